"""What a reader of a finalized run uses from finalize, without importing any finalize step:
the version stamp of the chain (``FINALIZE_VERSION``, ``stamp``, ``is_finalized``) and phase ids
made unique in the run (``unique_phase_ids``: shards number their instances per rank).

``tracekit.store.load_run`` imports this module for every run it reads; the chain itself
(``tracekit.finalize.pipeline``) only runs where a run is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

import polars as pl

# Bump when a change to the chain changes what it writes for the same input, and say what in
# CHANGES: a run recorded with a lower version is read as stored (store.load_run says so) until
# ``tracekit upgrade`` finalizes it again.
CHANGES: Final[dict[int, str]] = {
    1: "categories, collectives, phase membership with trace_rules, unique phase ids",
    # a launch on a thread with no open phase range joins the innermost range open on another
    # thread of its process
    2: "cross-thread launch membership",
}
FINALIZE_VERSION: Final = max(CHANGES)
MANIFEST_KEY: Final = "finalize_version"


def finalize_version(manifest: Mapping[str, Any]) -> int | None:
    """The finalize version a manifest records, None when it records none."""
    v = manifest.get(MANIFEST_KEY)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def changes_since(version: int | None) -> tuple[str, ...]:
    """What finalizing a run of ``version`` again changes (``CHANGES`` of the later versions)."""
    return tuple(text for v, text in sorted(CHANGES.items()) if version is None or v > version)


def is_finalized(manifest: Mapping[str, Any]) -> bool:
    """True when the run was finalized by this pipeline version (or a newer one)."""
    v = finalize_version(manifest)
    return v is not None and v >= FINALIZE_VERSION


def stamp(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` recording that its events went through this version of the chain."""
    return {**manifest, MANIFEST_KEY: FINALIZE_VERSION}



_Frame = TypeVar("_Frame", pl.DataFrame, pl.LazyFrame)


def unique_phase_ids(events: _Frame) -> _Frame:
    """Make ``phase_id`` unique in the run when shards numbered their instances per rank.

    Shards are annotated rank by rank, so two ranks can both hold instance 0.
    Ids are then remapped to ``rank * (max_id + 1) + id``: unique, deterministic,
    ordered as before within each rank. A table whose ids are already unique
    across ranks is returned unchanged.
    """
    names = events.collect_schema().names()  # a LazyFrame too (shard_merge.merge_shards streams a run)
    if "phase_id" not in names or "rank" not in names:
        return events
    ids = events.lazy().filter(pl.col("phase_id").is_not_null()).select("rank", "phase_id").unique()
    shared = ids.group_by("phase_id").agg(pl.len().alias("n")).select(pl.col("n").max()).collect()
    if shared.height == 0 or (shared.item() or 0) <= 1:
        return events
    top = int(events.lazy().select(pl.col("phase_id").max()).collect().item() or 0) + 1
    return shift_phase_ids(events, top)


def shift_phase_ids(events: _Frame, top: int) -> _Frame:
    """Phase ids remapped to ``rank * top + id`` (``unique_phase_ids``' rule; ``top`` > every id)."""
    return events.with_columns((pl.col("rank").cast(pl.Int64) * top + pl.col("phase_id")).alias("phase_id"))


def phase_id_top(ids_by_rank: Iterable[pl.Series]) -> int | None:
    """``unique_phase_ids``' decision from each rank's distinct phase ids (a run read rank by rank): the
    ``top`` of ``shift_phase_ids`` when two ranks share an id, else None (ids kept)."""
    ids = [s.drop_nulls() for s in ids_by_rank]
    every = pl.concat(ids) if ids else pl.Series("phase_id", [], pl.Int64)
    if every.len() == 0 or every.n_unique() == every.len():
        return None
    return int(every.max() or 0) + 1  # type: ignore[arg-type]


__all__ = ["CHANGES", "FINALIZE_VERSION", "MANIFEST_KEY", "changes_since", "finalize_version", "is_finalized", "phase_id_top", "shift_phase_ids", "stamp",
           "unique_phase_ids"]
