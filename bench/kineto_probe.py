"""Print what ``prof.profiler.kineto_results.events()`` gives on this torch build (facts for docs/capture.md).

    python bench/kineto_probe.py

Profiles a few eager kernels, a CUDA-graph replay and a record_function range,
then prints one sample event per Kineto category with every timing/link field,
whether ``start_ns`` is Unix-epoch time (compared with ``time.time_ns()``), and
whether graph-replayed kernels share the ``cudaGraphLaunch`` correlation id.
The reference is the same run's ``time.time_ns()`` window.
"""

from __future__ import annotations

import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function

FIELDS = ("name", "start_ns", "duration_ns", "correlation_id", "linked_correlation_id", "external_id",
          "device_type", "device_index", "device_resource_id", "start_thread_id", "is_user_annotation",
          "activity_type", "flow_id", "metadata_json")


def main() -> None:
    cuda = torch.cuda.is_available()
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    dev = "cuda" if cuda else "cpu"
    x = torch.randn(256, 256, device=dev)
    g = None
    if cuda:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = (x @ x).relu()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = (x @ x).relu().sum()
    t0 = time.time_ns()
    with profile(activities=acts) as prof, record_function("tracekit:verify|cycle=0"):
        y = (x @ x).relu()
        if g is not None:
            g.replay()
        y.cpu()
    t1 = time.time_ns()
    ev = prof.profiler.kineto_results.events()
    print(f"torch {torch.__version__} cuda {torch.version.cuda} events {len(ev)} window unix ns [{t0}, {t1}]")
    seen: dict[str, int] = {}
    for e in ev:
        at = e.activity_type() if hasattr(e, "activity_type") else "?"
        seen[at] = seen.get(at, 0) + 1
        if seen[at] > 2:
            continue
        vals = {}
        for f in FIELDS:
            if hasattr(e, f):
                try:
                    vals[f] = getattr(e, f)()
                except Exception as exc:
                    vals[f] = f"ERR {exc!r}"
        print(at, vals)
    starts = [e.start_ns() for e in ev]
    print("counts per activity_type:", seen)
    print("start_ns within the unix window:", all(t0 <= s <= t1 for s in starts), "min-t0 ns:", min(starts) - t0)
    if cuda:
        gl = {e.correlation_id() for e in ev if e.name().startswith(("cudaGraphLaunch", "cuGraphLaunch"))}
        kern = [e for e in ev if str(e.device_type()).endswith("CUDA")]
        in_graph = [e for e in kern if e.correlation_id() in gl]
        print(f"graph launches {len(gl)} corr {sorted(gl)}; GPU events {len(kern)}; with a graph-launch correlation: "
              f"{len(in_graph)}: {[e.name()[:40] for e in in_graph]}")


if __name__ == "__main__":
    main()
