"""One simulated SGLang scheduler rank for the live-capture test server.

``run_rank(out, rank, style, steps, hooks)`` runs tests/sglang_shapes.py's worker
(SGLang call shapes, real CPU torch work) for ``steps`` cycles under the CPU
profiler and writes ``out``, the way SGLang's scheduler does for /start_profile.
With ``hooks``, tracekit's hooks are installed first through the launcher's code
path (runtime.install_direct with the real hook-table rows pointed at a private
copy of the shapes classes, a Recorder of the rank's own), so the rank also
writes its environment manifest into TRACEKIT_SGLANG_DIR.

    python sglang_rank.py OUT_PATH RANK STYLE STEPS HOOKS     # one rank per process
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import sglang_shapes as S  # noqa: E402


def fresh_shapes() -> ModuleType:
    return S.fresh_copy("sglang_shapes_rank")


def install(mod: ModuleType, version: str) -> None:
    from tracekit.collectors.sglang import rankinfo, runtime
    from tracekit.collectors.sglang.hooktable import specs_for

    rows = S.retarget(specs_for(version), mod)
    rec = runtime.Recorder(on_first_call=rankinfo.on_first_call("test-server"))
    rep = runtime.install_direct(specs=rows, rec=rec, entry="test-server")
    assert not rep.skipped, rep.skipped


def run_rank(out: str, rank: int, style: str, steps: int, hooks: bool) -> None:
    mod = fresh_shapes()
    if hooks:
        install(mod, style)
    worker = mod.make_worker(style, rank)
    with S.cpu_profile(out):
        mod.drive(worker, cycles=steps)


if __name__ == "__main__":
    a = sys.argv[1:]
    run_rank(a[0], int(a[1]), a[2], int(a[3]), a[4] == "1")
