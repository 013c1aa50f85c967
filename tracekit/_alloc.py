"""The allocator setting of tracekit's CLI process: polars' freed memory is reused and given back.

polars (on Linux) allocates through its own jemalloc, which by default spreads threads over
4 arenas per core and keeps freed pages for ten seconds (``dirty_decay_ms``) before returning
them. A ``tracekit ingest`` frees and allocates whole tables from several threads (the rank
files' threads, polars' parquet writer), so its peak RSS held freed pages (bench/ingest.py on
130 MB of JSON: 221 MB with this setting, 255 MB with the defaults, bench/results/ingest.txt).
jemalloc reads the setting from the environment when polars' library loads, so the CLI sets it
before anything imports polars; a value the user set is kept, and it does nothing once polars
is loaded (library use in a process that imported polars first).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Final

JEMALLOC_CONF_VAR: Final = "_RJEM_MALLOC_CONF"  # polars' jemalloc is built with the _rjem_ prefix
JEMALLOC_CONF: Final = "narenas:1,dirty_decay_ms:100"


def return_freed_memory(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set the decay for polars' jemalloc unless the user set one (call before importing polars)."""
    environ.setdefault(JEMALLOC_CONF_VAR, JEMALLOC_CONF)


__all__ = ["JEMALLOC_CONF", "JEMALLOC_CONF_VAR", "return_freed_memory"]
