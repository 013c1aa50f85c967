"""How many threads a stage may use: the one definition of "usable cores" (ingest's rank files,
attribution's rank passes, the benchmarks' reports)."""

from __future__ import annotations

import os


def usable_cores(override_env: str | None = None) -> int:
    """The cores this process may run on (its CPU affinity), or the positive integer in the
    environment variable ``override_env`` when that is set."""
    if override_env:
        env = os.environ.get(override_env)
        if env and env.isdigit() and int(env) > 0:
            return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
