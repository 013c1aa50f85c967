"""Stragglers: which rank arrives last at collectives, what it costs the others, and why.

Definitions (over collectives matched on every rank, ``coll_match``):

- arrival of rank r at collective j = start of r's collective kernel;
  ``skew`` = latest arrival - earliest; the **last rank** is the latest arrival,
  counted only when ``skew >= min_skew_ns`` (below that nobody is late);
  ``margin`` = latest - second latest arrival (how much earlier the collective
  could have started had the last rank been as early as the next one).
- **own wait** of r: sum of r's waits (latest arrival - own arrival);
  **inflicted wait**: for collectives where r is last, the waits of all the
  other ranks (the time r made them wait).
- **before the arrival**: the segment of r's GPU timeline from the end of its
  previous matched collective to its arrival (collective ends are nearly
  simultaneous on all ranks, so segment lengths differ by the lateness). Each
  segment splits by the attribution walk (``analyzers.buckets.walk``,
  docs/attribution.md section 4: one definition of a launch gap) into GPU busy (interval union of r's
  GPU events), launch gaps (the part of an idle gap before the next event's launch
  call returned plus the launch latency: the GPU waited for the host) and other
  idle. For late arrivals the excess over the mean of the other ranks' same
  segment is reported, plus host syncs (``sync`` rows on r starting inside the
  segment) and kernel families whose time in the segment exceeds the other ranks' mean.

This is the one straggler analysis: ``tracekit ranks`` prints ``stragglers``, ``attribute``
the straggler of each phase (``phase_stragglers``, through ``analyzers.attribution_views``) and
the report its plots from the ``ranks`` document.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit import schema
from tracekit.manifest import is_gpu_state

from .buckets import DEFAULT_LAUNCH_LATENCY_NS, UNKNOWN_LAUNCH, Walk, walk
from .buckets import LAUNCH as LAUNCH_BUCKET
from .coll_match import matched_collectives
from .families import family_column
from .timeline import first_of_launch, launch_ends

I64 = npt.NDArray[np.int64]
MIN_SKEW_NS: Final = 1_000
def collective_skew(matched: pl.DataFrame, min_skew_ns: int = MIN_SKEW_NS) -> pl.DataFrame:
    """One row per matched collective: key, group, coll_seq, coll_op, phase, first/last arrival,
    skew_ns, margin_ns, last_rank (null when skew < min_skew_ns), others_wait_ns."""
    return (
        matched.sort(["key", "start_ns", "rank"], descending=[False, True, False])
        .group_by("key", maintain_order=True)
        .agg(
            pl.col("group").first(),
            pl.col("coll_seq").first(),
            pl.col("coll_op").first(),
            pl.col("phase").first(),
            pl.col("start_ns").min().alias("first_arrival_ns"),
            pl.col("start_ns").max().alias("last_arrival_ns"),
            (pl.col("start_ns").first() - pl.col("start_ns").get(1)).alias("margin_ns"),
            pl.col("rank").first().alias("_last"),
            pl.col("wait_ns").sum().alias("others_wait_ns"),
        )
        .with_columns((pl.col("last_arrival_ns") - pl.col("first_arrival_ns")).alias("skew_ns"))
        .with_columns(
            pl.when(pl.col("skew_ns") >= min_skew_ns).then(pl.col("_last")).otherwise(None).alias("last_rank")
        )
        .drop("_last")
        .sort("first_arrival_ns")
    )


def _split(
    g_start: I64, g_end: I64, g_lend: I64, g_first: npt.NDArray[np.bool_], a: I64, b: I64, launch_latency_ns: int
) -> Walk:
    """The attribution walk (``analyzers.buckets.walk``) over segments [a_k, b_k] of one timeline.

    ``g_*``: the GPU events of one rank in start order (launch end, first of its launch call);
    segments disjoint and sorted (a_k = end of the previous collective >= b_(k-1)). Every event
    overlapping a segment is clipped to it and belongs to that segment's instance (an event starting
    exactly at b_k, the arriving collective, counts as zero-length at b_k: the gap before it is
    classified by its launch); a zero-length marker at each a_k starts the window there. All
    events carry one work code, so the walk's work bucket is the busy union, ``launch_overhead``
    the launch gaps and ``idle`` the rest, by the walk's own rule.
    """
    k1 = np.searchsorted(b, g_start, side="left")  # first segment with b_k >= start
    k2 = np.searchsorted(a, g_end, side="left") - 1  # last segment with a_k < end
    n = np.maximum(k2 - k1 + 1, 0)
    rows = np.repeat(np.arange(g_start.size), n)
    seg = np.repeat(k1 - np.cumsum(n) + n, n) + np.arange(rows.size)
    K = a.size
    # the markers first, then the events in start order: already sorted by (segment, start) unless an
    # event spans segments (the walk sorts then)
    inst = np.concatenate([np.arange(K), seg]).astype(np.int64)
    start = np.concatenate([a, np.maximum(g_start[rows], a[seg])])
    end = np.concatenate([a, np.minimum(g_end[rows], b[seg])])
    lend = np.concatenate([np.full(K, UNKNOWN_LAUNCH, dtype=np.int64), g_lend[rows]])
    firsts = np.concatenate([np.ones(K, dtype=bool), g_first[rows]])
    return walk(inst, start, end, np.zeros(inst.size, dtype=np.int8), lend, K, launch_latency_ns, firsts)


SEGMENT_SCHEMA: Final = {
    "key": pl.String(), "rank": pl.Int32(), "seg_start": pl.Int64(), "arrival_ns": pl.Int64(),
    "busy_ns": pl.Int64(), "launch_gap_ns": pl.Int64(), "syncs": pl.Int64(), "sync_ns": pl.Int64(),
    "seg_ns": pl.Int64(), "other_idle_ns": pl.Int64(),
}


def _i64(s: pl.Series, fill: int = 0) -> I64:
    return s.fill_null(fill).to_numpy().astype(np.int64, copy=False)


def _by_rank_and_start(rows: npt.NDArray[np.intp], rank: I64, start: I64) -> npt.NDArray[np.intp]:
    """``rows`` in (rank, start) order (as they come when the table is sorted: no sort then)."""
    r, s = rank[rows], start[rows]
    if np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (s[1:] >= s[:-1]))):
        return rows
    return rows[np.lexsort((s, r))]


def segments(events: pl.DataFrame, matched: pl.DataFrame, launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
             keys: pl.Series | None = None) -> pl.DataFrame:
    """Per (key, rank): the GPU segment before the arrival and its split (see module doc);
    ``keys``: only the segments before these collectives."""
    order = matched.sort(["rank", "start_ns"]).with_columns(
        pl.col("end_ns").shift(1).over("rank").alias("seg_start")
    ).filter(pl.col("seg_start").is_not_null() & (pl.col("seg_start") <= pl.col("start_ns")))
    if keys is not None:
        order = order.filter(pl.col("key").is_in(keys.implode()))
    if order.is_empty():
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    kind = events.get_column("kind")
    corr_s = events.get_column("correlation")
    rank, start, corr = _i64(events.get_column("rank"), -1), _i64(events.get_column("start_ns")), _i64(corr_s)
    end = start + _i64(events.get_column("dur_ns"))
    has = ~corr_s.is_null().to_numpy() if corr_s.null_count() else np.ones(rank.size, dtype=bool)
    g = _by_rank_and_start(np.flatnonzero(kind.is_in(list(schema.GPU_KINDS)).to_numpy()), rank, start)
    lr = np.flatnonzero((kind == schema.LAUNCH).to_numpy() & has)
    sy = _by_rank_and_start(np.flatnonzero((kind == schema.SYNC).to_numpy()), rank, start)
    g_rank, g_start, g_end = rank[g], start[g], end[g]
    g_lend = launch_ends(rank[lr], corr[lr], end[lr], g_rank, corr[g], has[g])
    g_first = first_of_launch(g_rank, corr[g], has[g], g_start)
    s_rank, s_start, s_dur = rank[sy], start[sy], end[sy] - start[sy]
    o_rank = _i64(order.get_column("rank"), -1)
    a_all, b_all = _i64(order.get_column("seg_start")), _i64(order.get_column("start_ns"))
    busy = np.zeros(a_all.size, dtype=np.int64)
    lgap = np.zeros(a_all.size, dtype=np.int64)
    n_sync = np.zeros(a_all.size, dtype=np.int64)
    t_sync = np.zeros(a_all.size, dtype=np.int64)
    for r in np.unique(o_rank).tolist():
        o = slice(*np.searchsorted(o_rank, [r, r + 1]).tolist())
        gs = slice(*np.searchsorted(g_rank, [r, r + 1]).tolist())
        a, b = a_all[o], b_all[o]
        w = _split(g_start[gs], g_end[gs], g_lend[gs], g_first[gs], a, b, launch_latency_ns)
        busy[o] = w.buckets[:, 0]
        lgap[o] = w.buckets[:, LAUNCH_BUCKET]
        ss = slice(*np.searchsorted(s_rank, [r, r + 1]).tolist())
        st, sd = s_start[ss], s_dur[ss]
        lo = np.searchsorted(st, a, side="left")
        hi = np.searchsorted(st, b, side="left")
        prefix = np.concatenate([[0], np.cumsum(sd)]).astype(np.int64)
        n_sync[o] = hi - lo
        t_sync[o] = prefix[hi] - prefix[lo]
    out = order.select("key", "rank", "seg_start", pl.col("start_ns").alias("arrival_ns")).with_columns(
        pl.Series("busy_ns", busy),
        pl.Series("launch_gap_ns", lgap),
        pl.Series("syncs", n_sync),
        pl.Series("sync_ns", t_sync),
    ).with_columns((pl.col("arrival_ns") - pl.col("seg_start")).alias("seg_ns"))
    return out.with_columns((pl.col("seg_ns") - pl.col("busy_ns") - pl.col("launch_gap_ns")).alias("other_idle_ns"))


def _excess(per: pl.DataFrame, skew: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """For each late arrival (key, last rank): metric of the last rank minus the others' mean."""
    late = skew.filter(pl.col("last_rank").is_not_null()).select("key", pl.col("last_rank").cast(pl.Int32()))
    j = per.join(late, on="key", how="inner").with_columns((pl.col("rank") == pl.col("last_rank")).alias("_is_last"))
    return j.group_by(["key", "last_rank"]).agg(
        *[
            (
                pl.col(c).filter(pl.col("_is_last")).sum()
                - pl.col(c).filter(~pl.col("_is_last")).mean().fill_null(0)
            ).alias(f"{c}_excess")
            for c in cols
        ],
        *[pl.col(c).filter(pl.col("_is_last")).sum().alias(f"{c}_last") for c in ("syncs", "sync_ns") if c in cols],
    )


KERNELS_SCHEMA: Final = {"rank": pl.Int32(), "family": pl.String(), "late_arrivals": pl.UInt32(), "excess_ns": pl.Float64()}


FAMILY_SCHEMA: Final = {"key": pl.String(), "rank": pl.Int32(), "family": pl.String(), "fam_ns": pl.Int64()}


def family_segments(events: pl.DataFrame, matched: pl.DataFrame, keys: pl.Series | None = None) -> pl.DataFrame:
    """Per (key, rank, family): the kernel family's time in the rank's segment before collective ``key``
    (collective kernels left out); ``keys``: only those collectives. Per rank: a rank's rows need only
    its own events and matched rows."""
    seg = matched.sort(["rank", "start_ns"]).with_columns(pl.col("end_ns").shift(1).over("rank").alias("seg_start"))
    seg = seg.filter(pl.col("seg_start").is_not_null()).select("key", "rank", "seg_start", pl.col("start_ns").alias("arrival"))
    comm_keys = matched.select(pl.col("rank").cast(pl.Int32()), "start_ns").with_columns(pl.lit(True).alias("_is_coll"))
    kern = (
        events.filter(pl.col("kind") == schema.KERNEL)
        .select(pl.col("rank").cast(pl.Int32()), "name", "start_ns", "dur_ns")
        .join(comm_keys, on=["rank", "start_ns"], how="left")
        .filter(pl.col("_is_coll").is_null())
        .sort("start_ns")
    )
    if kern.is_empty() or seg.is_empty():
        return pl.DataFrame(schema=FAMILY_SCHEMA)
    kern = kern.with_columns(family_column(kern.get_column("name")))
    joined = kern.join_asof(
        seg.sort("seg_start"), left_on="start_ns", right_on="seg_start", by="rank", strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("key").is_not_null() & (pl.col("start_ns") < pl.col("arrival")))
    per = joined.group_by(["key", "rank", "family"]).agg(pl.col("dur_ns").sum().alias("fam_ns"))
    if keys is not None:
        per = per.filter(pl.col("key").is_in(keys.implode()))
    return per.select([pl.col(k).cast(v) for k, v in FAMILY_SCHEMA.items()])


def slow_families(per: pl.DataFrame, matched: pl.DataFrame, skew: pl.DataFrame) -> pl.DataFrame:
    """Kernel families in the late rank's segments that took longer than on the other ranks, from
    ``family_segments`` (of every rank).

    Columns: rank, family, late_arrivals (segments where it exceeded), excess_ns
    (sum over the rank's late arrivals of its time minus the other ranks' mean), sorted
    by rank then excess descending; only positive excess.
    """
    if per.is_empty():
        return pl.DataFrame(schema=KERNELS_SCHEMA)
    n_ranks = matched.get_column("rank").n_unique()
    late = skew.filter(pl.col("last_rank").is_not_null()).select("key", pl.col("last_rank").cast(pl.Int32()))
    j = per.join(late, on="key", how="inner")
    agg = j.group_by(["key", "last_rank", "family"]).agg(
        pl.col("fam_ns").filter(pl.col("rank") == pl.col("last_rank")).sum().alias("_mine"),
        pl.col("fam_ns").filter(pl.col("rank") != pl.col("last_rank")).sum().alias("_others"),
    ).with_columns((pl.col("_mine") - pl.col("_others") / max(n_ranks - 1, 1)).alias("excess_ns"))
    return (
        agg.filter(pl.col("excess_ns") > 0)
        .group_by(["last_rank", "family"])
        .agg(pl.len().alias("late_arrivals"), pl.col("excess_ns").sum())
        .rename({"last_rank": "rank"})
        .sort(["rank", "excess_ns", "family"], descending=[False, True, False])  # ties in family order: one output
    )


def slow_kernels(events: pl.DataFrame, matched: pl.DataFrame, skew: pl.DataFrame) -> pl.DataFrame:
    """``slow_families`` of the whole run's ``events``."""
    return slow_families(family_segments(events, matched, late_keys(skew)), matched, skew)


def rank_state(manifest: dict[str, Any]) -> pl.DataFrame:
    """Clocks, throttle reasons, PCIe, power and temperature per rank from the manifest,
    flattened to (rank, key, value) rows; whatever layout the collectors used, any key
    path that is GPU state (``tracekit.manifest.is_gpu_state``) is taken."""
    rows: list[tuple[int, str, str]] = []

    def walk(rank: int, prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(rank, f"{prefix}.{k}" if prefix else str(k), v)
        elif prefix and obj is not None and is_gpu_state(prefix):
            rows.append((rank, prefix, obj if isinstance(obj, str) else repr(obj)))

    for r, meta in (manifest.get("ranks") or {}).items():
        try:
            rank = int(r)
        except ValueError:
            continue
        walk(rank, "", meta)
    return pl.DataFrame(rows, schema={"rank": pl.Int32(), "key": pl.String(), "value": pl.String()}, orient="row")


def late_arrivals(events: pl.DataFrame, matched: pl.DataFrame, skew: pl.DataFrame,
                  launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> pl.DataFrame:
    """One row per collective with a last rank: key, phase, rank (the last one), first_arrival_ns,
    others_wait_ns, margin_ns, and what that rank did in the segment before it minus the other
    ranks' mean (``busy_ns_excess``, ``launch_gap_ns_excess``, ``other_idle_ns_excess``; null for a
    rank's first collective, which has no segment) with its own ``syncs`` / ``sync_ns`` there."""
    return late_from_segments(segments(events, matched, launch_latency_ns, keys=late_keys(skew)), skew)


def late_keys(skew: pl.DataFrame) -> pl.Series:
    """The keys of the collectives with a last rank (``collective_skew``)."""
    return skew.filter(pl.col("last_rank").is_not_null()).get_column("key")


def late_from_segments(seg: pl.DataFrame, skew: pl.DataFrame) -> pl.DataFrame:
    """``late_arrivals`` from the ``segments`` before the late collectives (of every rank)."""
    late = skew.filter(pl.col("last_rank").is_not_null()).select(
        "key", "phase", pl.col("last_rank").cast(pl.Int32()).alias("rank"), "first_arrival_ns", "others_wait_ns",
        "margin_ns",
    )
    exc = _excess(seg, skew, ["busy_ns", "launch_gap_ns", "other_idle_ns", "syncs", "sync_ns"])
    exc = exc.select("key", pl.col("last_rank").alias("rank"), *[f"{c}_excess" for c in EXCESS],
                     pl.col("syncs_last").alias("syncs"), pl.col("sync_ns_last").alias("sync_ns"))
    return late.join(exc, on=["key", "rank"], how="left")


EXCESS: Final = ("busy_ns", "launch_gap_ns", "other_idle_ns")


def _late_totals(late: pl.DataFrame) -> list[pl.Expr]:
    """Aggregations of late arrivals (per rank, or per phase and rank): how often last, the wait
    inflicted, the margin, and the segment excesses, totals over the late arrivals."""
    return [
        pl.len().alias("last_count"),
        pl.col("others_wait_ns").sum().alias("inflicted_wait_ns"),
        pl.col("margin_ns").sum().alias("late_margin_ns"),
        *[_sum_known(f"{c}_excess", f"{c}_excess") for c in EXCESS],
        _sum_known("syncs", "syncs_before_late"),
        _sum_known("sync_ns", "sync_ns_before_late"),
    ]


def _sum_known(col: str, alias: str) -> pl.Expr:
    """Sum of the known values; null when none is known (no segment before any late arrival)."""
    return pl.when(pl.col(col).is_not_null().any()).then(pl.col(col).sum()).otherwise(None).alias(alias)


def stragglers(events: pl.DataFrame, min_skew_ns: int = MIN_SKEW_NS, *,
               launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS, match: pl.DataFrame | None = None,
               kernels: bool = True) -> dict[str, pl.DataFrame]:
    """The straggler analysis: ``ranks`` (one row per rank), ``kernels`` (slow families before
    late arrivals; empty unless ``kernels``), ``collectives`` (one row per matched collective),
    ``late`` (one row per late arrival, ``late_arrivals``). ``match``: ``match_collectives``
    over the run when the caller has it already."""
    matched = matched_collectives(events, match)
    skew = collective_skew(matched, min_skew_ns)
    ranks = sorted(int(r) for r in events.get_column("rank").drop_nulls().unique().to_list())
    keys = late_keys(skew)
    seg = segments(events, matched, launch_latency_ns, keys=keys)
    per = family_segments(events, matched, keys) if kernels else None
    return straggler_tables(ranks, matched, skew, seg, per)


def straggler_tables(ranks: list[int], matched: pl.DataFrame, skew: pl.DataFrame, seg: pl.DataFrame,
                     per: pl.DataFrame | None) -> dict[str, pl.DataFrame]:
    """``stragglers`` from its parts: the run's ranks, the matched collectives and their skew, the
    ``segments`` before the late collectives and (None: no kernel view) their ``family_segments``, of
    every rank: what a run analysed rank by rank (``analyzers.ranked``) gathers."""
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32()})
    part = matched.group_by("rank").agg(
        pl.len().alias("collectives"),
        pl.col("wait_ns").sum().alias("own_wait_ns"),
        pl.col("transfer_ns").sum().alias("transfer_ns"),
    )
    late = late_from_segments(seg, skew)
    last = (
        late.sort(["others_wait_ns", "first_arrival_ns"], descending=[True, False])
        .group_by("rank", maintain_order=True)
        .agg(
            *_late_totals(late),
            pl.col("others_wait_ns").first().alias("worst_wait_ns"),
            pl.col("key").first().alias("worst_key"),
            pl.col("phase").first().alias("worst_phase"),
        )
    )
    out = (
        base.join(part, on="rank", how="left")
        .join(last, on="rank", how="left")
        .with_columns(
            pl.col("collectives").fill_null(0),
            pl.col("last_count").fill_null(0),
            pl.col("inflicted_wait_ns").fill_null(0),
            pl.col("late_margin_ns").fill_null(0),
        )
        .with_columns(
            (pl.col("last_count") / pl.col("collectives").replace(0, None)).alias("last_share"),
        )
        .sort("rank")
    )
    slow = slow_families(per, matched, skew) if per is not None else pl.DataFrame(schema=KERNELS_SCHEMA)
    return {"ranks": out, "kernels": slow, "collectives": skew, "late": late}


PHASE_SCHEMA: Final = {
    "phase": pl.String(), "collectives": pl.UInt32(), "last_rank": pl.Int32(), "last_count": pl.UInt32(),
    "last_share": pl.Float64(), "inflicted_wait_ns": pl.Int64(), "late_margin_ns": pl.Int64(),
    **{f"{c}_excess": pl.Float64() for c in EXCESS},
    "syncs_before_late": pl.Int64(), "sync_ns_before_late": pl.Int64(),
}


def phase_stragglers(view: dict[str, pl.DataFrame], phases: list[str] | None = None) -> pl.DataFrame:
    """Per phase (of its collectives), the straggler: the rank whose late arrivals made the other
    ranks wait longest (ties: most often last, then the lower rank), with the ``ranks`` columns
    restricted to that phase's collectives (``PHASE_SCHEMA``). ``phases``: only these."""
    coll = view["collectives"].filter(pl.col("phase").is_not_null())
    late = view["late"].filter(pl.col("phase").is_not_null())
    if phases is not None:
        coll = coll.filter(pl.col("phase").is_in(phases))
        late = late.filter(pl.col("phase").is_in(phases))
    if late.is_empty():
        return pl.DataFrame(schema=PHASE_SCHEMA)
    per = late.group_by(["phase", "rank"]).agg(*_late_totals(late))
    top = (
        per.sort(["phase", "inflicted_wait_ns", "last_count", "rank"], descending=[False, True, True, False])
        .group_by("phase", maintain_order=True)
        .first()
        .rename({"rank": "last_rank"})
    )
    tot = coll.group_by("phase").agg(pl.len().alias("collectives"))
    out = top.join(tot, on="phase").with_columns((pl.col("last_count") / pl.col("collectives")).alias("last_share"))
    return out.select([pl.col(k).cast(v) for k, v in PHASE_SCHEMA.items()]).sort("phase")
