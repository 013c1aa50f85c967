"""Robust statistics over phase instances: medians, p90 and outliers (docs/attribution.md 5).

Pure polars. One definition of each, shared by GPU and host mode, ``gap`` and ``diff``:

- quantile q of n values: the nearest-rank value, the ceil(q * n)-th smallest
  (1-based); always one of the instances' own integer ns (median of 24 values: the
  12th smallest, p90: the 22nd);
- outlier: an instance whose value x is more than ``OUTLIER_RATIO`` times the median m
  of its (phase, rank) **and** more than ``OUTLIER_MADS`` scaled median absolute
  deviations above it: x > OUTLIER_RATIO * m and x - m > OUTLIER_MADS * 1.4826 * MAD,
  MAD = the median of |x_i - m| over the same instances. Only slow instances are
  outliers (a stall, a first collective waiting for a late rank); at least
  ``MIN_INSTANCES`` instances are needed to call one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import polars as pl

OUTLIER_RATIO: Final = 2.0
OUTLIER_MADS: Final = 5.0
MAD_SCALE: Final = 1.4826  # MAD of a normal distribution = 0.6745 sigma
MIN_INSTANCES: Final = 3
STATS: Final = ("median", "mean")  # what ``gap`` and ``diff`` compare per instance; median by default
OUTLIER_COLUMNS: Final = ("phase", "rank", "phase_id", "cycle", "start_ns", "value_ns", "median_ns", "ratio")


def quantile(expr: pl.Expr, q: float) -> pl.Expr:
    """Nearest-rank q-quantile of ``expr`` (an aggregation: ceil(q * n)-th smallest value)."""
    vals = expr.drop_nulls()
    idx = ((vals.len() * q).ceil().cast(pl.Int64) - 1).clip(0)
    return vals.sort().slice(idx, 1).first()  # null when every value is null


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """``quantile``'s rule on plain numbers: the ceil(q * n)-th smallest; None for no values."""
    v = sorted(values)
    return None if not v else v[max(math.ceil(q * len(v)) - 1, 0)]


def weighted_center(values: Sequence[tuple[float, float]], total_weight: float, stat: str) -> float | None:
    """``center`` over weighted instances given as (value, weight) pairs, the instances not listed being 0
    with the rest of ``total_weight`` (a kernel family absent from an instance takes no time in it).
    ``median``: the nearest-rank rule with weights (the smallest value whose cumulative weight reaches half
    the total; with unit weights the ceil(n/2)-th smallest); ``mean``: the weighted mean."""
    if total_weight <= 0:
        return None
    if stat == "mean":
        return sum(v * w for v, w in values) / total_weight
    if stat != "median":
        raise ValueError(f"stat must be one of {STATS}, not {stat!r}")
    zero = total_weight - sum(w for _, w in values)
    cum, half = 0.0, 0.5 * total_weight * (1 - 1e-12)
    for v, w in sorted([(0.0, zero), *values]) if zero > 0 else sorted(values):
        cum += w
        if cum >= half:
            return v
    return None


def center(expr: pl.Expr, stat: str) -> pl.Expr:
    """Per-instance statistic for comparisons: ``median`` (nearest rank, robust to stalls) or
    ``mean`` (adds up across buckets, moved by a single stalled instance)."""
    if stat == "median":
        return quantile(expr, 0.5).cast(pl.Float64)
    if stat == "mean":
        return expr.cast(pl.Float64).mean()
    raise ValueError(f"stat must be one of {STATS}, not {stat!r}")


def median_p90(col: str, name: str | None = None) -> list[pl.Expr]:
    """``median_<name>`` and ``p90_<name>`` aggregations of ``col`` (name defaults to col)."""
    n = name or col
    return [quantile(pl.col(col), 0.5).alias(f"median_{n}"), quantile(pl.col(col), 0.9).alias(f"p90_{n}")]


def outliers(instances: pl.DataFrame, value: str, start: str, keys: tuple[str, ...] = ("phase", "rank")) -> pl.DataFrame:
    """Instances past the robust threshold (module doc), slowest first within each key.

    Columns: phase, rank, phase_id, cycle, start_ns (``start``), value_ns (``value``),
    median_ns (of the key's instances), ratio (value / median; null when the median is 0).
    """
    schema = {"phase": pl.String, "rank": pl.Int32, "phase_id": pl.Int64, "cycle": pl.Int64, "start_ns": pl.Int64,
              "value_ns": pl.Int64, "median_ns": pl.Int64, "ratio": pl.Float64}
    if instances.height == 0:
        return pl.DataFrame(schema=schema)
    med = instances.group_by(list(keys)).agg(
        quantile(pl.col(value), 0.5).alias("median_ns"), pl.len().alias("_n")
    )
    df = instances.select(*keys, "phase_id", "cycle", pl.col(start).alias("start_ns"), pl.col(value).alias("value_ns"))
    df = df.join(med, on=list(keys), how="left")
    mad = (
        df.with_columns((pl.col("value_ns") - pl.col("median_ns")).abs().alias("_dev"))
        .group_by(list(keys))
        .agg(quantile(pl.col("_dev"), 0.5).alias("_mad"))
    )
    df = df.join(mad, on=list(keys), how="left")
    x, m = pl.col("value_ns").cast(pl.Float64), pl.col("median_ns").cast(pl.Float64)
    hit = (
        (pl.col("_n") >= MIN_INSTANCES)
        & (x > OUTLIER_RATIO * m)
        & ((x - m) > OUTLIER_MADS * MAD_SCALE * pl.col("_mad").cast(pl.Float64))
    )
    out = df.filter(hit).with_columns(
        pl.when(pl.col("median_ns") > 0).then(x / m).otherwise(None).alias("ratio")
    )
    return (
        out.select([pl.col(c).cast(t) for c, t in schema.items()])
        .sort([*keys, "value_ns"], descending=[False] * len(keys) + [True])
    )


__all__ = ["MAD_SCALE", "MIN_INSTANCES", "OUTLIER_MADS", "OUTLIER_RATIO", "STATS", "center", "median_p90", "outliers", "quantile"]
