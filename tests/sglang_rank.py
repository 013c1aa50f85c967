"""One simulated SGLang scheduler rank for the live-capture test server.

``run_rank(out, rank, style, steps, hooks)`` runs tests/sglang_shapes.py's worker
(SGLang call shapes, real CPU torch work) for ``steps`` cycles under the CPU
profiler and writes ``out``, the way SGLang's scheduler does for /start_profile.
With ``hooks``, tracekit's hooks are installed first through the launcher's code
path (runtime.install_direct with the real hook-table rows pointed at a private
copy of the shapes classes, a Recorder of the rank's own), so the rank also
writes its environment manifest into TRACEKIT_SGLANG_DIR.

    python sglang_rank.py OUT_PATH RANK STYLE STEPS HOOKS     # one rank per process

``serve(ctl, rank, style, hooks)`` (``python sglang_rank.py --serve CTL RANK STYLE HOOKS``) is a
scheduler process of the server's ``--serve`` mode: it runs speculative cycles without end (a
busy server: prefill once, then one cycle every few ms), so tracekit's window (profile modes
lite and timing) sees cycle boundaries, and starts torch.profiler when the server writes a
profile request ``CTL/profile.json`` (``{seq, output_dir, num_steps, activities, profile_id}``),
for ``num_steps`` cycles, then writes ``{profile_id}-TP-{rank}.trace.json.gz``. SGLang maps
``activities`` CPU -> CPU, GPU -> CUDA; a CPU-only torch cannot run a CUDA-only profiler (it
refuses "no activities"), so there a GPU-only request records CPU activity instead, the only
thing a CPU rank has (no launches, no kernels). It exits when its parent (the server) is gone.
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




def _profiler(activities: list[str]):  # type: ignore[no-untyped-def]
    import torch

    acts = {"CPU": torch.profiler.ProfilerActivity.CPU, "GPU": torch.profiler.ProfilerActivity.CUDA}
    chosen = [acts[a] for a in activities if a in acts]
    if not torch.cuda.is_available():
        chosen = [acts["CPU"]]  # the CPU stand-in (module doc)
    return torch.profiler.profile(activities=chosen)


def serve(ctl: str, rank: int, style: str, hooks: bool, period_s: float = 0.004) -> None:
    import json
    import os
    import time

    parent = os.getppid()
    mod = fresh_shapes()
    if hooks:
        install(mod, style)
    worker = mod.make_worker(style, rank)
    batch = mod.ScheduleBatch.make(4, 32, mod.ForwardMode.EXTEND)
    worker.forward_batch_generation(batch)
    (Path(ctl) / f"ready-{rank}").write_text(str(os.getpid()))  # the server listens once every rank is ready
    pending: list = []  # type: ignore[type-arg]
    seen = None
    prof = None
    left = 0
    out = ""
    req_path = Path(ctl) / "profile.json"
    while os.getppid() == parent:
        if prof is None and req_path.exists():
            try:
                req = json.loads(req_path.read_text())
            except ValueError:
                req = None
            if req is not None and req.get("seq") != seen:
                seen = req["seq"]
                out = os.path.join(req["output_dir"], f"{req['profile_id']}-TP-{rank}.trace.json.gz")
                prof = _profiler(req["activities"])
                prof.start()
                left = int(req["num_steps"])
        res = worker.forward_batch_generation(batch)
        if isinstance(worker, mod.EAGLEWorkerV2):
            pending.append(res)
            if len(pending) > 1:
                done = pending.pop(0)
                worker.on_verify_complete_cpu([int(x) - 1 for x in done.accept_lens.tolist()])
        if prof is not None:
            left -= 1
            if left <= 0:
                prof.stop()
                Path(out).parent.mkdir(parents=True, exist_ok=True)
                tmp = out + ".partial.json"
                prof.export_chrome_trace(tmp)
                import gzip
                import shutil

                with open(tmp, "rb") as src, gzip.open(out + ".tmp", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(out + ".tmp", out)
                os.unlink(tmp)
                prof = None
        time.sleep(period_s)


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[0] == "--serve":
        serve(a[1], int(a[2]), a[3], a[4] == "1")
    else:
        run_rank(a[0], int(a[1]), a[2], int(a[3]), a[4] == "1")
