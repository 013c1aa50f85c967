"""The time resolution of each rank's events: 1 µs when every time stamp is whole microseconds.

Kineto JSON written with integer-microsecond ``ts``/``dur`` (older torch, some converters)
rounds every kernel shorter than 1 µs to 0 ns. :func:`time_resolution` finds the ranks
where that happened, from the table itself (so it works for any run, however made).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.schema import KERNEL

MICROSECOND_NS = 1000


@dataclass(frozen=True)
class CoarseRank:
    """A rank whose start and duration columns are all whole microseconds."""

    rank: int
    resolution_ns: int
    kernels: int
    zero_kernels: int  # kernels of 0 ns (shorter than the resolution)


def time_resolution(events: pl.DataFrame) -> list[CoarseRank]:
    """Ranks whose every ``start_ns`` and ``dur_ns`` is a multiple of 1 µs (needs rank, kind, start_ns, dur_ns)."""
    if events.height == 0:
        return []
    per = (
        events.lazy()
        .filter(pl.col("start_ns").is_not_null())
        .group_by("rank")
        .agg(
            ((pl.col("start_ns") % MICROSECOND_NS == 0) & (pl.col("dur_ns").fill_null(0) % MICROSECOND_NS == 0))
            .all().alias("whole_us"),
            (pl.col("kind") == KERNEL).sum().alias("kernels"),
            ((pl.col("kind") == KERNEL) & (pl.col("dur_ns") == 0)).sum().alias("zero_kernels"),
            pl.len().alias("n"),
        )
        .filter(pl.col("whole_us") & (pl.col("n") > 1))
        .sort("rank")
        .collect()
    )
    return [CoarseRank(int(r["rank"]), MICROSECOND_NS, int(r["kernels"]), int(r["zero_kernels"]))
            for r in per.iter_rows(named=True)]


__all__ = ["MICROSECOND_NS", "CoarseRank", "time_resolution"]
