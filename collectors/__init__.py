"""tracekit.collectors: capture on every rank (hooks, profiler sessions, manifests, workloads).

torch, nvtx and sglang are imported inside the modules that need them, never here.
"""
