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

import dataclasses
import importlib.util
import sys
import uuid
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import sglang_shapes as S  # noqa: E402

CLASS_MAP = {
    "sglang.srt.speculative.eagle_worker.EAGLEWorker": "EAGLEWorker",
    "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2": "EAGLEWorkerV2",
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker": "EagleDraftWorker",
    "sglang.srt.model_executor.model_runner.ModelRunner": "ModelRunner",
}


def fresh_shapes() -> ModuleType:
    name = f"sglang_shapes_rank_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, HERE / "sglang_shapes.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def install(mod: ModuleType, version: str) -> None:
    from tracekit.collectors.sglang import rankinfo, runtime
    from tracekit.collectors.sglang.hooktable import specs_for

    rows = []
    for s in specs_for(version):
        cls, _, method = s.target.rpartition(".")
        rows.append(dataclasses.replace(s, target=f"{mod.__name__}.{CLASS_MAP[cls]}.{method}"))
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
