"""One simulated SGLang scheduler rank for the live-capture test server.

    python sglang_rank.py OUT_PATH RANK STYLE STEPS HOOKS

Runs tests/sglang_shapes.py's worker (SGLang call shapes, real CPU torch work)
for STEPS cycles under the CPU profiler and writes OUT_PATH, the way SGLang's
scheduler does for /start_profile. With HOOKS=1, tracekit's hooks are installed
first through the same code path as the launcher (runtime.install_direct with
the real hook table rows pointed at the shapes classes), so the rank also writes
its environment manifest into TRACEKIT_SGLANG_DIR.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import sglang_shapes as S

CLASS_MAP = {
    "sglang.srt.speculative.eagle_worker.EAGLEWorker": "EAGLEWorker",
    "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2": "EAGLEWorkerV2",
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker": "EagleDraftWorker",
    "sglang.srt.model_executor.model_runner.ModelRunner": "ModelRunner",
}


def install(version: str) -> None:
    from tracekit.collectors.sglang import rankinfo, runtime
    from tracekit.collectors.sglang.hooktable import specs_for

    rows = []
    for s in specs_for(version):
        cls, _, method = s.target.rpartition(".")
        rows.append(dataclasses.replace(s, target=f"sglang_shapes.{CLASS_MAP[cls]}.{method}"))
    runtime.RECORDER.on_first_call = rankinfo.on_first_call("test-server")
    rep = runtime.install_direct(specs=rows, entry="test-server")
    assert not rep.skipped, rep.skipped


def main(argv: list[str]) -> None:
    out, rank, style, steps, hooks = argv[0], int(argv[1]), argv[2], int(argv[3]), argv[4] == "1"
    if hooks:
        install(style)
    worker = S.make_worker(style, rank)
    with S.cpu_profile(out):
        S.drive(worker, cycles=steps)


if __name__ == "__main__":
    main(sys.argv[1:])
