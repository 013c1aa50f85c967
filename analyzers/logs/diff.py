"""``tracekit diff OLD NEW`` on two log runs: compared at matched operating points only.

A bin is (batch size ``#running-req``, tokens per request ``#token / #running-req`` in bins of
``tokens_width`` tokens — by default ``analyzers/diff.py``'s ``nice_width``, the sequence-length bucket
rule of the trace ``diff``: 1/2/5 x 10^n, about 8 bins over both logs —, graph use). Per bin present in both logs: throughput (all requests and
per request), accept length and every user-pattern field, old vs new, with one statistic
(``median`` or ``mean`` over the bin's intervals; the others beside it). Bins found in one log
only are listed, never compared; two logs without a common bin give no comparison at all
(``no_common_bin``). Idle intervals (no running request) and intervals without a token count
(vLLM prints KV-cache usage, not tokens) are counted and left out. A user-pattern row takes the
bin of the last stats line before it in its file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from tracekit.analyzers.diff import nice_width
from tracekit.analyzers.logs.stats import Summary, summarize
from tracekit.analyzers.logs.views import intervals, user_fields, user_rows
from tracekit.analyzers.robust import STATS

INTERVAL_METRICS: Final = ("gen_throughput", "per_req_tps", "accept_length")


@dataclass(frozen=True)
class Bin:
    batch: int
    tokens_lo: int
    tokens_hi: int  # exclusive
    graph: bool | None


@dataclass(frozen=True)
class MetricDelta:
    metric: str
    old: Summary
    new: Summary
    delta: float | None  # new - old, in the chosen statistic
    ratio: float | None  # new / old


@dataclass(frozen=True)
class BinDiff:
    bin: Bin
    n_old: int
    n_new: int
    metrics: tuple[MetricDelta, ...]


@dataclass(frozen=True)
class LogDiff:
    old: str
    new: str
    statistic: str
    tokens_width: int
    common: tuple[BinDiff, ...]
    only_old: tuple[tuple[Bin, int], ...]
    only_new: tuple[tuple[Bin, int], ...]
    no_common_bin: bool
    left_out: dict[str, dict[str, int]]  # side -> reason -> intervals
    user_fields: tuple[str, ...]
    timing_source: str  # the clock of the user-pattern times: "engine log"


def tokens_bin_width(*rows: pl.DataFrame) -> int:
    """The default tokens-per-request bin width for these log runs (``nice_width`` over the busy
    intervals' tokens per request of all of them)."""
    return width_for(pl.concat([usable_intervals(intervals(r))[0].get_column("tokens_per_req") for r in rows]))


def width_for(tokens_per_req: pl.Series) -> int:
    """The bin width for these tokens-per-request values (``nice_width`` over their range; 1 when none)."""
    toks = tokens_per_req.drop_nulls()
    return nice_width(float(toks.min()), float(toks.max())) if toks.len() else 1  # type: ignore[arg-type]


def binned(df: pl.DataFrame, width: int) -> pl.DataFrame:
    return df.with_columns((pl.col("tokens_per_req") // width).cast(pl.Int64).alias("_tbin"))


def usable_intervals(ivs: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, int]]:
    log = ivs.filter(pl.col("source") == "log")
    idle = log.filter(pl.col("running_req").fill_null(0) == 0)
    busy = log.filter(pl.col("running_req").fill_null(0) > 0)
    no_tok = busy.filter(pl.col("tokens_per_req").is_null())
    out = {"idle (no running request)": idle.height, "no token count (vLLM prints KV usage)": no_tok.height,
           "metrics intervals (no batch per interval)": ivs.height - log.height}
    return busy.filter(pl.col("tokens_per_req").is_not_null()), {k: v for k, v in out.items() if v}


def bin_of(batch: int, tbin: int, graph: bool | None, width: int) -> Bin:
    return Bin(batch=batch, tokens_lo=tbin * width, tokens_hi=(tbin + 1) * width, graph=graph)


def log_diff(old_rows: pl.DataFrame, old_man: Mapping[str, Any], new_rows: pl.DataFrame, new_man: Mapping[str, Any],
             old: str, new: str, *, stat: str = "median", tokens_width: int | None = None) -> LogDiff:
    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}")
    a, left_a = usable_intervals(intervals(old_rows))
    b, left_b = usable_intervals(intervals(new_rows))
    width = tokens_width or tokens_bin_width(old_rows, new_rows)
    fa = [n for n, _k in user_fields(old_man)]
    fb = [n for n, _k in user_fields(new_man)]
    fields = [f for f in fa if f in fb]
    ua = binned(user_rows(old_rows, fields), width) if fields else None
    ub = binned(user_rows(new_rows, fields), width) if fields else None
    a, b = binned(a, width), binned(b, width)
    keys = ["running_req", "_tbin", "graph"]
    ca = {tuple(r[:3]): r[3] for r in a.group_by(keys).len().iter_rows()}
    cb = {tuple(r[:3]): r[3] for r in b.group_by(keys).len().iter_rows()}
    common = sorted(set(ca) & set(cb), key=lambda k: (k[0], k[1], -1 if k[2] is None else int(k[2])))
    diffs = []
    for key in common:
        sel = (pl.col("running_req") == key[0]) & (pl.col("_tbin") == key[1]) & \
            (pl.col("graph").is_null() if key[2] is None else pl.col("graph") == key[2])
        sa, sb = a.filter(sel), b.filter(sel)
        metrics = [metric_delta(m, summarize(sa.get_column(m)), summarize(sb.get_column(m)), stat) for m in INTERVAL_METRICS]
        if ua is not None and ub is not None:
            for f in fields:
                metrics.append(metric_delta(f, summarize(ua.filter(sel).get_column(f)), summarize(ub.filter(sel).get_column(f)),
                                      stat))
        diffs.append(BinDiff(bin=bin_of(int(key[0]), int(key[1]), key[2], width), n_old=ca[key], n_new=cb[key],
                             metrics=tuple(m for m in metrics if m.old.n or m.new.n)))
    if ua is not None:
        n = ua.filter(pl.col("running_req").is_null()).height
        if n:
            left_a["user-pattern rows before any stats line"] = n
    if ub is not None:
        n = ub.filter(pl.col("running_req").is_null()).height
        if n:
            left_b["user-pattern rows before any stats line"] = n
    return LogDiff(
        old=old, new=new, statistic=stat, tokens_width=width, common=tuple(diffs),
        only_old=tuple((bin_of(int(k[0]), int(k[1]), k[2], width), n) for k, n in sorted(ca.items(), key=bin_order) if k not in cb),
        only_new=tuple((bin_of(int(k[0]), int(k[1]), k[2], width), n) for k, n in sorted(cb.items(), key=bin_order) if k not in ca),
        no_common_bin=not diffs, left_out={"old": left_a, "new": left_b}, user_fields=tuple(fields),
        timing_source="engine log",
    )


def bin_order(kv: tuple[tuple[Any, ...], int]) -> tuple[int, int, int]:
    k = kv[0]
    return int(k[0]), int(k[1]), -1 if k[2] is None else int(k[2])


def metric_delta(metric: str, old: Summary, new: Summary, stat: str) -> MetricDelta:
    o, n = old.stat(stat), new.stat(stat)
    delta = None if o is None or n is None else n - o
    ratio = None if o is None or n is None or o == 0 or math.isnan(o) else n / o
    return MetricDelta(metric, old, new, delta, ratio)


__all__ = ["INTERVAL_METRICS", "Bin", "BinDiff", "LogDiff", "MetricDelta", "bin_of", "bin_order", "binned", "log_diff",
           "metric_delta", "tokens_bin_width", "usable_intervals", "width_for"]
