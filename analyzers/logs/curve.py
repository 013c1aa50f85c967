"""Throughput and accept length against tokens per request, for ``tracekit report`` on log runs.

Every stats interval with a token count is a point (tokens per request, throughput per request,
throughput of all requests, accept length, batch, graph use); per tokens-per-request bin (the
width ``diff`` uses for the same logs: ``analyzers.logs.diff.tokens_bin_width``) the median and p90 of each (nearest rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.analyzers.logs.stats import Summary, summarize
from tracekit.analyzers.logs.views import intervals


@dataclass(frozen=True)
class Point:
    line: int
    tokens_per_req: float
    per_req_tps: float | None
    gen_throughput: float | None
    accept_length: float | None
    batch: int | None
    graph: bool | None


@dataclass(frozen=True)
class BinStats:
    tokens_lo: int
    tokens_hi: int
    per_req_tps: Summary
    gen_throughput: Summary
    accept_length: Summary


@dataclass(frozen=True)
class LogCurve:
    path: str
    tokens_width: int
    points: tuple[Point, ...]
    bins: tuple[BinStats, ...]
    left_out: int  # intervals without a token count or without a running request


def log_curve(rows: pl.DataFrame, path: str, tokens_width: int) -> LogCurve:
    ivs = intervals(rows).filter(pl.col("source") == "log")
    usable = ivs.filter(pl.col("tokens_per_req").is_not_null() & (pl.col("running_req").fill_null(0) > 0))
    points = tuple(Point(int(r["line"]), float(r["tokens_per_req"]), r["per_req_tps"], r["gen_throughput"],
                         r["accept_length"], r["running_req"], r["graph"]) for r in usable.iter_rows(named=True))
    binned = usable.with_columns((pl.col("tokens_per_req") // tokens_width).cast(pl.Int64).alias("_b"))
    bins = []
    for (b,), grp in sorted(binned.group_by(["_b"]), key=lambda kv: int(kv[0][0])):  # type: ignore[arg-type]
        bins.append(BinStats(int(b) * tokens_width, (int(b) + 1) * tokens_width,  # type: ignore[call-overload]
                             summarize(grp.get_column("per_req_tps")), summarize(grp.get_column("gen_throughput")),
                             summarize(grp.get_column("accept_length"))))
    return LogCurve(path=path, tokens_width=tokens_width, points=points, bins=tuple(bins),
                    left_out=ivs.height - usable.height)


__all__ = ["BinStats", "LogCurve", "Point", "log_curve"]
