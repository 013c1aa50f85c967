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
  segment splits into GPU busy (interval union of r's GPU events), launch gaps
  (GPU idle before a kernel whose launch call started after the GPU went idle:
  the GPU waited for the host) and other idle. For late arrivals the excess over
  the mean of the other ranks' same segment is reported, plus host syncs
  (``sync`` rows on r starting inside the segment) and kernel families whose
  time in the segment exceeds the other ranks' mean.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit import schema
from tracekit.manifest import is_gpu_state

from .coll_match import matched_collectives
from .families import family_column

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


def _covered(s: I64, e: I64, a: I64, b: I64) -> I64:
    """For disjoint sorted intervals [s, e): length of their intersection with each [a, b)."""
    if s.size == 0:
        return np.zeros(a.size, dtype=np.int64)
    prefix = np.concatenate([[0], np.cumsum(e - s)]).astype(np.int64)

    def before(t: I64) -> I64:
        k = np.searchsorted(s, t, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.clip(t - s[kk], 0, e[kk] - s[kk])
        return np.where(k >= 0, prefix[kk] + inside, 0)

    return before(b) - before(a)


def _rank_timeline(events: pl.DataFrame) -> tuple[I64, I64, I64, I64]:
    """Busy blocks (merged GPU intervals) and launch-bound gaps of one rank's events."""
    gpu = events.filter(pl.col("kind").is_in(list(schema.GPU_KINDS))).sort("start_ns")
    if gpu.is_empty():
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    launches = (
        events.filter((pl.col("kind") == schema.LAUNCH) & pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_ns").min().alias("_launch"))
    )
    gpu = gpu.join(launches, on="correlation", how="left", maintain_order="left")
    s = gpu.get_column("start_ns").to_numpy().astype(np.int64)
    e = s + gpu.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64)
    launch = gpu.get_column("_launch").fill_null(np.iinfo(np.int64).min).to_numpy().astype(np.int64)
    run_max = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    bs = s[idx]
    be = np.maximum.reduceat(e, idx)
    # gap before block i (i >= 1) is launch-bound when the block's first kernel was launched
    # after the previous block ended (the GPU had nothing queued: it waited for the host)
    gs = be[:-1]
    ge = bs[1:]
    bound = launch[idx[1:]] > gs
    return bs, be, gs[bound], ge[bound]


def segments(events: pl.DataFrame, matched: pl.DataFrame) -> pl.DataFrame:
    """Per (key, rank): the GPU segment before the arrival and its split (see module doc)."""
    order = matched.sort(["rank", "start_ns"]).with_columns(
        pl.col("end_ns").shift(1).over("rank").alias("seg_start")
    ).filter(pl.col("seg_start").is_not_null() & (pl.col("seg_start") <= pl.col("start_ns")))
    need = events.filter(pl.col("kind").is_in([*schema.GPU_KINDS, schema.LAUNCH, schema.SYNC])).select(
        "rank", "kind", "start_ns", "dur_ns", "correlation"
    )
    by_rank = need.partition_by("rank", as_dict=True)
    empty = need.clear()
    parts: list[pl.DataFrame] = []
    for rank in order.get_column("rank").unique().sort().to_list():
        mine = by_rank.get((rank,), empty)
        seg = order.filter(pl.col("rank") == rank)
        a = seg.get_column("seg_start").to_numpy().astype(np.int64)
        b = seg.get_column("start_ns").to_numpy().astype(np.int64)
        bs, be, ls, le = _rank_timeline(mine)
        busy = _covered(bs, be, a, b)
        lgap = _covered(ls, le, a, b)
        sy = mine.filter(pl.col("kind") == schema.SYNC).sort("start_ns")
        st = sy.get_column("start_ns").to_numpy().astype(np.int64)
        sd = sy.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64)
        lo = np.searchsorted(st, a, side="left")
        hi = np.searchsorted(st, b, side="left")
        sprefix = np.concatenate([[0], np.cumsum(sd)]).astype(np.int64)
        parts.append(
            seg.select("key", "rank", "seg_start", pl.col("start_ns").alias("arrival_ns")).with_columns(
                pl.Series("busy_ns", busy),
                pl.Series("launch_gap_ns", lgap),
                pl.Series("syncs", (hi - lo).astype(np.int64)),
                pl.Series("sync_ns", sprefix[hi] - sprefix[lo]),
            )
        )
    if not parts:
        return pl.DataFrame(
            schema={
                "key": pl.String(), "rank": pl.Int32(), "seg_start": pl.Int64(), "arrival_ns": pl.Int64(),
                "busy_ns": pl.Int64(), "launch_gap_ns": pl.Int64(), "syncs": pl.Int64(), "sync_ns": pl.Int64(),
                "seg_ns": pl.Int64(), "other_idle_ns": pl.Int64(),
            }
        )
    out = pl.concat(parts).with_columns((pl.col("arrival_ns") - pl.col("seg_start")).alias("seg_ns"))
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


def slow_kernels(events: pl.DataFrame, matched: pl.DataFrame, skew: pl.DataFrame) -> pl.DataFrame:
    """Kernel families in the late rank's segments that took longer than on the other ranks.

    Columns: rank, family, late_arrivals (segments where it exceeded), excess_ns
    (sum over the rank's late arrivals of its time minus the other ranks' mean), sorted
    by rank then excess descending; only positive excess.
    """
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
        return pl.DataFrame(schema={"rank": pl.Int32(), "family": pl.String(), "late_arrivals": pl.UInt32(), "excess_ns": pl.Float64()})
    kern = kern.with_columns(family_column(kern.get_column("name")))
    joined = kern.join_asof(
        seg.sort("seg_start"), left_on="start_ns", right_on="seg_start", by="rank", strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("key").is_not_null() & (pl.col("start_ns") < pl.col("arrival")))
    per = joined.group_by(["key", "rank", "family"]).agg(pl.col("dur_ns").sum().alias("fam_ns"))
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
        .sort(["rank", "excess_ns"], descending=[False, True])
    )


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


def stragglers(events: pl.DataFrame, min_skew_ns: int = MIN_SKEW_NS) -> dict[str, pl.DataFrame]:
    """The straggler view: ``ranks`` (one row per rank), ``kernels`` (slow families before
    late arrivals), ``collectives`` (one row per matched collective)."""
    matched = matched_collectives(events)
    skew = collective_skew(matched, min_skew_ns)
    ranks = sorted(int(r) for r in events.get_column("rank").drop_nulls().unique().to_list())
    base = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int32()})
    part = matched.group_by("rank").agg(
        pl.len().alias("collectives"),
        pl.col("wait_ns").sum().alias("own_wait_ns"),
        pl.col("transfer_ns").sum().alias("transfer_ns"),
    )
    last = (
        skew.filter(pl.col("last_rank").is_not_null())
        .sort(["others_wait_ns", "first_arrival_ns"], descending=[True, False])
        .group_by(pl.col("last_rank").cast(pl.Int32()).alias("rank"), maintain_order=True)
        .agg(
            pl.len().alias("last_count"),
            pl.col("others_wait_ns").sum().alias("inflicted_wait_ns"),
            pl.col("margin_ns").sum().alias("late_margin_ns"),
            pl.col("others_wait_ns").first().alias("worst_wait_ns"),
            pl.col("key").first().alias("worst_key"),
            pl.col("phase").first().alias("worst_phase"),
        )
    )
    seg = segments(events, matched)
    cols = ["seg_ns", "busy_ns", "launch_gap_ns", "other_idle_ns", "syncs", "sync_ns"]
    exc = _excess(seg, skew, cols).group_by(pl.col("last_rank").alias("rank")).agg(
        *[pl.col(f"{c}_excess").sum() for c in ("busy_ns", "launch_gap_ns", "other_idle_ns")],
        pl.col("syncs_last").sum().alias("syncs_before_late"),
        pl.col("sync_ns_last").sum().alias("sync_ns_before_late"),
    )
    out = (
        base.join(part, on="rank", how="left")
        .join(last, on="rank", how="left")
        .join(exc, on="rank", how="left")
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
    return {"ranks": out, "kernels": slow_kernels(events, matched, skew), "collectives": skew}
