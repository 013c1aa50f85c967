"""How many threads a stage may use: the one definition of "usable cores" (ingest's rank files,
attribution's rank passes, the benchmarks' reports)."""

from __future__ import annotations

import os


def usable_cores(override: int | None = None) -> int:
    """The cores this process may run on (its CPU affinity), or ``override`` when it is set (a
    ``tracekit.settings`` count: TRACEKIT_INGEST_THREADS, TRACEKIT_ATTRIBUTE_THREADS)."""
    if override is not None:
        return override
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
