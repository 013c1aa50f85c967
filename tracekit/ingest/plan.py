"""Which way ``tracekit ingest -o run.parquet`` runs with ``--executor local``: whole or rank by rank.

The in-process ingest (``ingest_traces``) holds the whole run: its peak RSS is about 1-2x the inputs'
JSON (measured: 1.26-1.36x on the 64-rank scale set, 449 MB of JSON; 0.96-1.18x on the 256-rank set, 1.83 GB;
up to 1.95x on one H200 trace) and it is the cheapest in CPU. The bounded ingest
(``sharded.ingest_file``) finalizes rank by rank, staged through disk, and streams the ranks into the
file: its peak is a few ranks' working set, for more CPU (``docs/scale.md`` gives both).

The rule: whole while the inputs' uncompressed JSON is at most ``WHOLE_MAX_MB`` MiB (so its peak stays
under about 1 GB), bounded past it; ``TRACEKIT_INGEST_WHOLE_MB`` moves the line (0: always bounded).
A gzip file's uncompressed size is its trailer's ISIZE (exact below 4 GiB: a file whose trailer says
less than its compressed size counts as 4 GiB).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from tracekit.inputs import is_regular

WHOLE_MAX_MB: Final = 512
_GZIP: Final = b"\x1f\x8b"


def json_bytes(path: str | os.PathLike[str]) -> int:
    """The uncompressed size of one input (a gzip file's ISIZE trailer; a plain file's size). Only a
    regular file that can be read is looked into (a FIFO would block here): for any other input this
    is its size, and the reader says in one line what is wrong with it (``tracekit.inputs.open_input``)."""
    p = Path(path)
    if not is_regular(p):
        return 0
    size = p.stat().st_size
    try:
        with open(p, "rb") as f:
            if f.read(2) != _GZIP or size < 18:
                return size
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return size
    return isize if isize >= size else 1 << 32


def whole_max_bytes() -> int:
    from tracekit import settings

    mb = settings.current().ingest_whole_mb
    return (WHOLE_MAX_MB if mb is None else mb) << 20


def ingests_whole(files: Iterable[str | os.PathLike[str]]) -> bool:
    """True when the in-process ingest of ``files`` stays under the rule's line (see the module docstring)."""
    limit = whole_max_bytes()
    total = 0
    for f in files:
        total += json_bytes(f)
        if total > limit:
            return False
    return True


__all__ = ["WHOLE_MAX_MB", "ingests_whole", "json_bytes", "whole_max_bytes"]
