"""``tracekit upgrade``: a run written by an older finalize chain, finalized again and written once.

    up = upgrade_run("old.parquet", "old.parquet")   # in place (atomic), or to another file
    up.changed                                       # what the newer versions add (version.changes_since)

A run already at ``FINALIZE_VERSION`` is left as it is (``Upgrade.written`` False).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tracekit.finalize.pipeline import finalize_events
from tracekit.finalize.version import (
    FINALIZE_VERSION,
    changes_since,
    finalize_version,
    is_finalized,
    stamp,
)
from tracekit.store import load_run, write_run


@dataclass(frozen=True)
class Upgrade:
    path: str
    output: str
    from_version: int | None  # what the manifest recorded (None: nothing)
    to_version: int
    changed: tuple[str, ...]  # CHANGES of the versions above from_version (all of them when None)
    events: int
    written: bool  # False: the run was current, nothing written


def upgrade_run(path: str | os.PathLike[str], output: str | os.PathLike[str]) -> Upgrade:
    """Finalize the run at ``path`` again and write it to ``output`` (atomically; ``output`` may be
    ``path``); a current run is not rewritten."""
    run = load_run(path)
    old = finalize_version(run.manifest)
    if is_finalized(run.manifest):
        return Upgrade(str(path), str(output), old, FINALIZE_VERSION, (), run.events.height, False)
    events = finalize_events(run.events)
    write_run(events, output, stamp(run.manifest))
    return Upgrade(str(path), str(output), old, FINALIZE_VERSION, changes_since(old), events.height, True)


__all__ = ["Upgrade", "upgrade_run"]
