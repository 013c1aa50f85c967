"""What the CLI says about how a run was read (``tracekit.store.load_run``)."""

from __future__ import annotations

from tracekit.store import Refinalized


def refinalized_line(note: Refinalized) -> str:
    """One line: the run was written by an older pipeline and was finalized again on read."""
    was = "no finalize version" if note.from_version is None else f"finalize version {note.from_version}"
    return (
        f"tracekit: {note.path}: written by an older tracekit ({was}); finalized again on read "
        f"(categories, collectives, phases: version {note.to_version}); rewrite it with "
        f"`tracekit align --align none` to skip this"
    )
