"""Phase instances as one row each, with their facts, for the forensic analyzers.

A thin adapter over ``tracekit.membership``: a table whose phase range rows
already carry ``phase_id`` (runs written by ingest/capture) is used as is;
otherwise ``annotate_phases`` runs first (foreign or hand-built frames). Same-phase
nesting (tracekit's label around SGLang's own span) and late facts markers are
handled there.

Output columns: rank, phase, phase_id, cycle, start_ns, dur_ns (host time of the
outermost range), end_ns, batch_size, num_tokens, seq_len, graphed, accept_len
(one row per instance, sorted by rank and start).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit import schema
from tracekit.membership import annotate_phases
from tracekit.membership import phase_instances as _membership_instances

FACT_COLUMNS: Final = ("batch_size", "num_tokens", "seq_len", "graphed", "accept_len")
INSTANCE_COLUMNS: Final = (
    "rank",
    "phase",
    "phase_id",
    "cycle",
    "start_ns",
    "dur_ns",
    "end_ns",
    *FACT_COLUMNS,
)


def ids_usable(events: pl.DataFrame) -> bool:
    """True when phase ranges carry ids and no id is used on two ranks.

    (Per-rank shards annotated one by one and then merged number their instances
    from 0 on every rank; such ids collide across ranks and are not usable.)"""
    ranges = events.filter(
        pl.col("kind").is_in([schema.RANGE, schema.GPU_RANGE])
        & pl.col("phase_id").is_not_null()
        & pl.col("phase").is_not_null()
    )
    if ranges.is_empty():
        return False
    shared = ranges.group_by("phase_id").agg(pl.col("rank").n_unique().alias("n")).filter(pl.col("n") > 1)
    return shared.is_empty()


def annotated(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` with usable phase membership: as is when ``ids_usable``, else re-annotated
    (``annotate_phases`` numbers instances over the whole table)."""
    return events if ids_usable(events) else annotate_phases(events)


def phase_instances(events: pl.DataFrame, phases: tuple[str, ...] | None = None) -> pl.DataFrame:
    """One row per phase instance (see module doc), optionally only ``phases``."""
    inst = _membership_instances(annotated(events))
    if phases is not None:
        inst = inst.filter(pl.col("phase").is_in(list(phases)))
    return (
        inst.with_columns(pl.col("host_ns").alias("dur_ns"))
        .select(
            pl.col("rank").cast(pl.Int32()),
            pl.col("phase"),
            pl.col("phase_id").cast(pl.Int64()),
            pl.col("cycle").cast(pl.Int64()),
            pl.col("start_ns").cast(pl.Int64()),
            pl.col("dur_ns").cast(pl.Int64()),
            pl.col("end_ns").cast(pl.Int64()),
            *[pl.col(c).cast(schema.COLUMNS[c]) for c in FACT_COLUMNS],
        )
        .sort(["rank", "start_ns"])
    )
