"""One summary of a series of per-interval values: n, mean, median and p90 (nearest rank,
``analyzers/robust.py``'s quantile rule), and the statistic a comparison uses."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analyzers.robust import STATS, quantile


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float | None
    median: float | None
    p90: float | None

    def stat(self, name: str) -> float | None:
        if name not in STATS:
            raise ValueError(f"stat must be one of {STATS}, not {name!r}")
        return self.median if name == "median" else self.mean


def summarize(values: pl.Series) -> Summary:
    """The summary of ``values`` (nulls and NaN dropped)."""
    s = values.cast(pl.Float64).drop_nulls().drop_nans()
    if s.len() == 0:
        return Summary(0, None, None, None)
    df = pl.DataFrame({"v": s})
    med, p90 = df.select(quantile(pl.col("v"), 0.5), quantile(pl.col("v"), 0.9).alias("p90")).row(0)
    return Summary(n=s.len(), mean=float(s.mean()), median=float(med), p90=float(p90))  # type: ignore[arg-type]


__all__ = ["Summary", "summarize"]
