"""The phase-instance table: one row per phase instance of a finalized run, with its facts.

The one definition, used by attribution, host attribution, spec and the timing view. Phase
membership is set once, when the run is written (``tracekit.finalize.membership``); a reader
only collects it: a phase range row owns its instance when no enclosing range of the same
instance exists, i.e. the outermost row per ``phase_id`` (earliest start, longest), so
tracekit's label around SGLang's own span gives one instance.

Columns: phase_id, phase, rank, pid, tid, source ("host" range or "gpu_range"), start_ns,
end_ns, host_ns (host time of the outermost range), the fact columns
(``tracekit.finalize.phases.FACT_COLUMNS``: cycle, batch_size, num_tokens, seq_len, graphed,
accept_len). Rows in phase_id order, which is (rank, start, longer first) order.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit.finalize.phases import FACT_COLUMNS
from tracekit.schema import GPU_RANGE, RANGE


def phase_rows(events: pl.DataFrame) -> pl.DataFrame:
    """The rows phase instances are made of: host and GPU ranges with a phase and a phase id (a few per
    cycle: what ``phase_instances`` and everything built on it alone read)."""
    return events.filter(pl.col("kind").is_in([RANGE, GPU_RANGE]) & pl.col("phase_id").is_not_null()
                         & pl.col("phase").is_not_null())


def phase_instances(events: pl.DataFrame, phases: Sequence[str] | None = None) -> pl.DataFrame:
    """One row per phase instance (see module doc), optionally only those of ``phases``."""
    rows = phase_rows(events)
    if phases is not None:
        rows = rows.filter(pl.col("phase").is_in(list(phases)))
    inst = (
        rows
        .sort(["phase_id", "start_ns", "dur_ns"], descending=[False, False, True])
        .group_by("phase_id", maintain_order=True)
        .first()
    )
    return inst.select(
        "phase_id",
        "phase",
        "rank",
        "pid",
        "tid",
        pl.when(pl.col("kind") == RANGE).then(pl.lit("host")).otherwise(pl.lit("gpu_range")).alias("source"),
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        pl.col("dur_ns").alias("host_ns"),
        *FACT_COLUMNS,
    )


def instance_head() -> list[pl.Expr]:
    """The leading columns of every per-instance result table (attribution's and host attribution's),
    in their order: who the instance is and which windows were measured; bucket columns follow."""
    return [
        pl.col("phase"),
        pl.col("rank").cast(pl.Int32),
        pl.col("phase_id"),
        *(pl.col(c) for c in FACT_COLUMNS),
        *(pl.col(c) for c in ("source", "host_start_ns", "host_ns", "window_start_ns", "window_end_ns", "gpu_window_ns")),
    ]


__all__ = ["instance_head", "phase_instances", "phase_rows"]
