"""What the CLI says about how a run was read (``tracekit.store.load_run``) and upgraded."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tracekit.finalize.version import changes_since

if TYPE_CHECKING:
    from tracekit.finalize.upgrade import Upgrade
    from tracekit.store import Outdated


def outdated_line(note: Outdated) -> str:
    """One line: the run was written by an older finalize chain and is read as stored (a shard
    directory whose shards are not all finalized: ``merge`` finalizes it)."""
    if note.from_version is None:
        was, lacks = "no finalize version recorded", ""
    else:
        was, lacks = f"finalize version {note.from_version} of {note.to_version}", f", without {'; '.join(changes_since(note.from_version))}"
    fix = (f"`tracekit merge {note.path} -o run.parquet` finalizes and merges its shards" if os.path.isdir(note.path)
           else f"`tracekit upgrade {note.path}` finalizes it again, once")
    return f"tracekit: {note.path}: written by an older tracekit ({was}): answers use its stored annotations{lacks}; {fix}"


def upgrade_line(up: Upgrade) -> str:
    """One line: what ``tracekit upgrade`` did."""
    if not up.written:
        return f"{up.path}: already at finalize version {up.to_version}; nothing written"
    was = "no finalize version" if up.from_version is None else f"finalize version {up.from_version}"
    return (f"{up.path}: {was} -> {up.to_version} ({'; '.join(up.changed)}), {up.events} events -> {up.output}")
