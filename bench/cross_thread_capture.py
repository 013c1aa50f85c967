"""Capture a run where one thread holds the phase ranges and another launches the kernels.

    python bench/cross_thread_capture.py --out DIR [--cycles 6] [--layers 8]

The shape of SGLang's overlap scheduler (the scheduler thread holds the step's range
while a forward thread launches) and of a training step's autograd thread. Per cycle:

- the main thread opens ``phase("verify", cycle=c, graphed=False)`` (tracekit's own hook,
  ``tracekit.collectors.hooks.phase``) and hands the worker thread an *eager* job:
  ``layers`` x (matmul, relu, add) launched one by one; it waits until the worker is done;
- then ``phase("draft", cycle=c, graphed=True)``: the worker replays a CUDA graph of the
  same layers (one ``cudaGraphLaunch``);
- then, with no range open anywhere, the worker launches one *stray* kernel (a control:
  it must join no phase).

The main thread never launches GPU work inside a range. The profiler is tracekit's
``ProfilerSession`` (torch.profiler, CPU + CUDA activities). Written to DIR:
``run.parquet`` (events finalized by ``tracekit.pipeline.finalize_events``, with a
manifest), ``trace.json.gz`` (the raw Kineto JSON) and ``truth.json`` (the main and
worker thread ids and, per job, its kind, cycle and ``time.time_ns`` window on the
worker). Without CUDA the same runs on the CPU (ops only, no kernels): a dry run of the
threading and the writing.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cycles", type=int, default=6)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=512)
    args = ap.parse_args()

    import torch

    from tracekit.collectors.hooks import phase
    from tracekit.collectors.session import ProfilerSession, finalize
    from tracekit.store import new_manifest, write_run

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    w = [torch.randn(args.dim, args.dim, device=dev) / args.dim**0.5 for _ in range(args.layers)]
    x = torch.randn(64, args.dim, device=dev)

    def layers(h: torch.Tensor) -> torch.Tensor:
        for m in w:
            h = (h @ m).relu() + h
        return h

    graph: Any = None
    static_out: torch.Tensor | None = None
    if cuda:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                layers(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = layers(x)
        torch.cuda.synchronize()

    jobs: queue.Queue[tuple[str, int] | None] = queue.Queue()
    done: queue.Queue[dict[str, Any]] = queue.Queue()
    tids: dict[str, int] = {"main": threading.get_native_id()}

    def worker() -> None:
        tids["worker"] = threading.get_native_id()
        while (job := jobs.get()) is not None:
            kind, cycle = job
            t0 = time.time_ns()
            if kind == "graph" and graph is not None:
                graph.replay()
            elif kind == "stray":
                (x @ w[0]).relu()
            else:
                layers(x)
            if cuda:
                torch.cuda.current_stream().synchronize()
            done.put({"kind": kind, "cycle": cycle, "start_unix_ns": t0, "end_unix_ns": time.time_ns()})

    th = threading.Thread(target=worker, name="forward", daemon=True)
    th.start()

    def run(kind: str, cycle: int) -> dict[str, Any]:
        jobs.put((kind, cycle))
        return done.get()

    for c in range(2):  # warm-up, unprofiled: allocator, cuBLAS handles of the worker thread
        run("eager", -1 - c)
        run("graph", -1 - c)
    session = ProfilerSession(rank=0, cuda=cuda)
    session.start()
    truth: list[dict[str, Any]] = []
    for c in range(args.cycles):
        with phase("verify", cycle=c, bs=64, graphed=False):
            truth.append({**run("eager", c), "phase": "verify"})
        with phase("draft", cycle=c, bs=64, graphed=True):
            truth.append({**run("graph", c), "phase": "draft"})
        truth.append({**run("stray", c), "phase": None})
    session.stop()
    jobs.put(None)
    th.join()

    events = finalize(session.events())
    session.export_json(out / "trace.json.gz")
    man = new_manifest(
        source="capture",
        world_size=1,
        capture={"script": "bench/cross_thread_capture.py", "cycles": args.cycles, "layers": args.layers,
                 "dim": args.dim, "profile_mode": "full"},
        ranks={"0": {"device": str(dev), "versions": {"torch": torch.__version__, "cuda": torch.version.cuda},
                     "session": session.info, "threads": tids}},
        clock={"align": "none", "note": "one process", "offsets_ns": {"0": 0}},
    )
    write_run(events, out / "run.parquet", man)
    (out / "truth.json").write_text(json.dumps({"threads": tids, "jobs": truth, "cuda": cuda,
                                                "device": torch.cuda.get_device_name() if cuda else "cpu"}, indent=1))
    n_kernels = int((events.get_column("kind") == "kernel").sum())
    print(f"{'cuda' if cuda else 'cpu'}: {events.height} events, {n_kernels} kernels, threads {tids}, "
          f"{len(truth)} jobs -> {out}")
    if static_out is not None:
        del static_out
    os._exit(0)


if __name__ == "__main__":
    main()
