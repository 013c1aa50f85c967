"""Phase instances as one row each, with their facts, for the forensic analyzers.

A thin adapter over ``tracekit.finalize.membership.phase_instances`` on a
finalized table (``tracekit.finalize``: phase membership is set once, when a run
is written; readers never re-annotate).

Output columns: rank, phase, phase_id, cycle, start_ns, dur_ns (host time of the
outermost range), end_ns, batch_size, num_tokens, seq_len, graphed, accept_len
(one row per instance, sorted by rank and start).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit import schema
from tracekit.finalize.membership import phase_instances as _membership_instances

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


def phase_instances(events: pl.DataFrame, phases: tuple[str, ...] | None = None) -> pl.DataFrame:
    """One row per phase instance (see module doc), optionally only ``phases``."""
    inst = _membership_instances(events)
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
