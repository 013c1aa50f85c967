"""Whole-trace attribution: a trace with no phase ranges at all (docs/attribution.md 1).

Pure polars. Each rank with GPU events becomes one instance of phase ``trace``: a
``gpu_range`` row named ``WHOLE_TRACE_NAME`` spanning the rank's GPU span (first GPU
event start to last GPU event end, all streams), and every GPU row and launch row
of the rank belongs to it (phase ``trace``, that instance's phase_id). The
attribution walk then runs unchanged: the buckets add up to the span exactly.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit.schema import GPU_KINDS, GPU_RANGE, LAUNCH, conform

WHOLE_TRACE_PHASE: Final = "trace"
WHOLE_TRACE_NAME: Final = "tracekit:whole-trace"


def whole_trace(events: pl.DataFrame) -> pl.DataFrame:
    """``events`` with one ``trace`` instance per rank that has GPU events (module doc);
    ``events`` unchanged when no rank has any."""
    gpu = events.select("kind", "rank", "start_ns", "dur_ns").filter(pl.col("kind").is_in(list(GPU_KINDS)))
    spans = (
        gpu.group_by("rank")
        .agg(pl.col("start_ns").min().alias("s"), (pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).max().alias("e"))
        .sort("rank")
        .with_row_index("pid")
    )
    if spans.height == 0:
        return events
    ids = spans.select("rank", pl.col("pid").cast(pl.Int64).alias("_wt"))
    ranges = conform(
        spans.select(
            "rank",
            pl.lit(GPU_RANGE).alias("kind"),
            pl.lit(WHOLE_TRACE_NAME).alias("name"),
            pl.col("s").alias("start_ns"),
            (pl.col("e") - pl.col("s")).alias("dur_ns"),
            pl.lit(WHOLE_TRACE_PHASE).alias("phase"),
            pl.col("pid").cast(pl.Int64).alias("phase_id"),
        )
    )
    member = pl.col("kind").is_in([*GPU_KINDS, LAUNCH])
    ev = events.join(ids, on="rank", how="left", maintain_order="left").with_columns(
        pl.when(member & pl.col("_wt").is_not_null()).then(pl.col("_wt")).otherwise(pl.col("phase_id")).alias("phase_id"),
        pl.when(member & pl.col("_wt").is_not_null()).then(pl.lit(WHOLE_TRACE_PHASE)).otherwise(pl.col("phase")).alias("phase"),
    ).drop("_wt")
    # keep a rank's rows together (attribution walks whole-rank row ranges)
    return pl.concat([ev, ranges], how="diagonal_relaxed").sort("rank", maintain_order=True, nulls_last=True)


def is_whole_trace(events: pl.DataFrame) -> bool:
    """True when ``events`` carries whole-trace instances (``whole_trace``)."""
    return bool(events.select(((pl.col("kind") == GPU_RANGE) & (pl.col("name") == WHOLE_TRACE_NAME)).any()).item())


__all__ = ["WHOLE_TRACE_NAME", "WHOLE_TRACE_PHASE", "is_whole_trace", "whole_trace"]
