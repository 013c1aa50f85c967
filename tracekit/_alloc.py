"""The allocator setting of tracekit's CLI process: polars' freed memory goes back to the system.

polars (on Linux) allocates through its own jemalloc, which keeps freed pages for ten seconds
by default (``dirty_decay_ms``) before returning them. A ``tracekit ingest`` frees and
allocates whole tables while it works, so its peak RSS was ~50 MB above the memory it holds
(bench/ingest.py: 265-280 MB against 222-232 MB with a 100 ms decay, on 130 MB of JSON, and
no difference in CPU seconds: docs/ingest.md). jemalloc reads the setting from the
environment when polars' library loads, so the CLI sets it before anything imports polars;
a value the user set is kept, and it does nothing once polars is loaded (library use).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Final

JEMALLOC_CONF_VAR: Final = "_RJEM_MALLOC_CONF"  # polars' jemalloc is built with the _rjem_ prefix
JEMALLOC_CONF: Final = "dirty_decay_ms:100"


def return_freed_memory(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set the decay for polars' jemalloc unless the user set one (call before importing polars)."""
    environ.setdefault(JEMALLOC_CONF_VAR, JEMALLOC_CONF)


__all__ = ["JEMALLOC_CONF", "JEMALLOC_CONF_VAR", "return_freed_memory"]
