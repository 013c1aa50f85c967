"""``tracekit diff`` of a log against a captured run, at matched operating points.

The captured run's verify instances (``analyzers/phase_rows.py``; rank 0's, one per cycle) are
binned as the log's stats intervals are: batch size (``batch_size`` ~ ``#running-req``), tokens per
request (``seq_len``, the mean context length per request ~ ``#token / #running-req``) and graph
use (``graphed`` ~ ``cuda graph``), with ``analyzers.logs.diff``'s bins. Per bin present in both:

- accept length, one definition on both sides (tokens per verify, bonus included: the trace's
  ``accept_len`` + 1), compared old -> new in the statistic;
- verify time, each on its own clock, side by side and **not subtracted**: the log's from the
  engine (a user-pattern field ``verify_*`` or the metrics' device timer; the bin of a
  user-pattern line is the last stats line's before it), the run's the host time of the profiled
  verify range (the profiler dilates host-bound time: ``tracekit attribute`` measures by how much).

Bins of one side only are listed, never compared; no common bin gives no comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from tracekit.analyzers.logs.diff import (
    Bin,
    MetricDelta,
    bin_of,
    bin_order,
    binned,
    metric_delta,
    usable_intervals,
    width_for,
)
from tracekit.analyzers.logs.spec import phase_timing
from tracekit.analyzers.logs.stats import Summary, summarize
from tracekit.analyzers.logs.views import intervals, user_rows
from tracekit.analyzers.phase_rows import phase_instances
from tracekit.errors import AnalysisError

TRACE_CLOCK: Final = "profiled window (host time of the verify range, rank 0)"


@dataclass(frozen=True)
class TraceBinDiff:
    bin: Bin
    n_log: int
    n_trace: int
    accept_length: MetricDelta  # old -> new
    log_verify_ns: Summary | None  # engine clock
    trace_verify_ns: Summary  # profiled window


@dataclass(frozen=True)
class LogTraceDiff:
    old: str
    new: str
    log_side: str  # "old" / "new"
    statistic: str
    tokens_width: int
    common: tuple[TraceBinDiff, ...]
    only_log: tuple[tuple[Bin, int], ...]
    only_trace: tuple[tuple[Bin, int], ...]
    no_common_bin: bool
    log_clock: str | None  # where the log's verify time comes from; None: the log has none
    trace_clock: str
    left_out: dict[str, int]


def trace_points(events: pl.DataFrame) -> pl.DataFrame:
    inst = phase_instances(events, ["verify"])
    if inst.height == 0:
        raise AnalysisError("the run has no verify phase instances to compare with the log")
    r0 = int(inst.get_column("rank").min())  # type: ignore[arg-type]
    return inst.filter(pl.col("rank") == r0).select(
        pl.col("batch_size").alias("running_req"), pl.col("seq_len").cast(pl.Float64).alias("tokens_per_req"),
        pl.col("graphed").alias("graph"), (pl.col("accept_len") + 1).alias("accept_length"),
        pl.col("host_ns").alias("verify_ns"))


def log_vs_trace(rows: pl.DataFrame, manifest: Mapping[str, Any], log_path: str, events: pl.DataFrame,
                 run_path: str, *, log_is_old: bool, stat: str = "median", tokens_width: int | None = None) -> LogTraceDiff:
    log_iv, left = usable_intervals(intervals(rows))
    tr = trace_points(events).filter(pl.col("tokens_per_req").is_not_null() & (pl.col("running_req") > 0))
    width = tokens_width or width_for(pl.concat([log_iv.get_column("tokens_per_req"), tr.get_column("tokens_per_req")]))
    timing = phase_timing(rows, manifest, "verify")
    field = None
    if timing is not None and timing.source.startswith("engine log (pattern field "):
        field = timing.source.removeprefix("engine log (pattern field ").removesuffix(")")
    users = binned(user_rows(rows, [field]), width) if field is not None else None
    a, b = binned(log_iv, width), binned(tr, width)
    keys = ["running_req", "_tbin", "graph"]
    ca = {tuple(r[:3]): r[3] for r in a.group_by(keys).len().iter_rows()}
    cb = {tuple(r[:3]): r[3] for r in b.group_by(keys).len().iter_rows()}
    common = []
    for key in sorted(set(ca) & set(cb), key=lambda k: bin_order((k, 0))):
        sel = (pl.col("running_req") == key[0]) & (pl.col("_tbin") == key[1]) & \
            (pl.col("graph").is_null() if key[2] is None else pl.col("graph") == key[2])
        la, lb = summarize(a.filter(sel).get_column("accept_length")), summarize(b.filter(sel).get_column("accept_length"))
        old, new = (la, lb) if log_is_old else (lb, la)
        if users is not None and field is not None:
            log_t: Summary | None = summarize((users.filter(sel).get_column(field).cast(pl.Float64)
                                               * _factor(field)).round(0))
        elif timing is not None:
            log_t = summarize(a.filter(sel).get_column("verify_ns"))
        else:
            log_t = None
        common.append(TraceBinDiff(bin_of(int(key[0]), int(key[1]), key[2], width), ca[key], cb[key],
                                   metric_delta("accept_length", old, new, stat), log_t,
                                   summarize(b.filter(sel).get_column("verify_ns"))))
    return LogTraceDiff(
        old=log_path if log_is_old else run_path, new=run_path if log_is_old else log_path,
        log_side="old" if log_is_old else "new", statistic=stat, tokens_width=width, common=tuple(common),
        only_log=tuple((bin_of(int(k[0]), int(k[1]), k[2], width), n) for k, n in sorted(ca.items(), key=bin_order) if k not in cb),
        only_trace=tuple((bin_of(int(k[0]), int(k[1]), k[2], width), n) for k, n in sorted(cb.items(), key=bin_order) if k not in ca),
        no_common_bin=not common, log_clock=None if timing is None else timing.source, trace_clock=TRACE_CLOCK,
        left_out=left)


def _factor(field: str) -> int:
    from tracekit.analyzers.logs.spec import ns_factor

    return ns_factor(field)


__all__ = ["TRACE_CLOCK", "LogTraceDiff", "TraceBinDiff", "log_vs_trace", "trace_points"]
