"""Cycle composition: per rank, the median and p90 over speculative cycles of each part.

The cycles are ``analyzers.spec.cycles`` (host time: a cycle runs from a ``draft``
range to the next phase range after its last speculative phase); the parts are its
draft, verify and draft-extend range time and the rest of the cycle (``between``).
Median and p90 are observed values (nearest rank, ``analyzers.robust.quantile``: the ceil(q n)-th smallest), so
they stay exact integer ns on the host clock of the rank.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit.errors import AnalysisError

from .robust import quantile
from .spec import PART_COLUMNS, cycles

PARTS: Final = tuple(c.removesuffix("_ns") for c in PART_COLUMNS)  # draft, verify, draft_extend, host_between
SCHEMA: Final[dict[str, pl.DataType]] = {
    "rank": pl.Int32(),
    "part": pl.String(),
    "cycles": pl.UInt32(),
    "median_ns": pl.Int64(),
    "p90_ns": pl.Int64(),
    "cycle_median_ns": pl.Int64(),
    "cycle_p90_ns": pl.Int64(),
}


def cycle_composition(events: pl.DataFrame) -> pl.DataFrame:
    """One row per (rank, part): cycles, median_ns, p90_ns of that part, and the same two of
    the whole cycle (``cycle_*``). Raises AnalysisError when the run has no complete cycle."""
    cyc = cycles(events)
    if cyc.is_empty():
        raise AnalysisError("no complete speculative cycle (draft -> verify -> next draft) in the run")
    rows = []
    for part, col in zip(PARTS, PART_COLUMNS, strict=True):
        rows.append(
            cyc.group_by("rank").agg(
                pl.lit(part).alias("part"),
                pl.len().alias("cycles"),
                quantile(pl.col(col), 0.5).alias("median_ns"),
                quantile(pl.col(col), 0.9).alias("p90_ns"),
                quantile(pl.col("cycle_ns"), 0.5).alias("cycle_median_ns"),
                quantile(pl.col("cycle_ns"), 0.9).alias("cycle_p90_ns"),
            )
        )
    out = pl.concat(rows)
    return out.select([pl.col(c).cast(t) for c, t in SCHEMA.items()]).sort(["rank", "part"])


__all__ = ["PARTS", "SCHEMA", "cycle_composition"]
