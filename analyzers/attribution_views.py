"""Views over attribution's instance table: per rank, per phase, per sequence-length bucket,
the straggler per phase, and the bucket-sum invariant. Pure functions over polars frames."""

from __future__ import annotations

from typing import Final

import numpy as np
import polars as pl

from tracekit.buckets import BUCKETS
from tracekit.schema import GPU_KINDS

from .robust import median_p90

BUCKET_COLUMNS: Final = tuple(f"{b}_ns" for b in BUCKETS)
SUM_COLUMNS: Final = (
    "host_ns",
    "gpu_window_ns",
    *BUCKET_COLUMNS,
    "queue_delay_ns",
    "between_ns",
    "overlapped_comm_ns",
    "gpu_events",
    "launches",
    "eager_launches",
    "graph_launches",
    "cross_thread_events",
    "allreduce_kernel_ns",
    "allreduce_wait_ns",
    "allreduce_transfer_ns",
)


def _agg(keys: list[str]) -> list[pl.Expr]:
    return [
        pl.len().alias("instances"),
        *[pl.col(c).sum().alias(c) for c in SUM_COLUMNS],
        *median_p90("gpu_window_ns"),
        pl.col("allreduce_wait_ns").null_count().alias("unmatched_instances"),
        pl.col("graphed").fill_null(False).sum().alias("graphed_instances"),
        pl.col("graphed_label_conflict").sum().alias("graphed_label_conflicts"),
        (pl.col("gpu_events") > 0).sum().alias("gpu_instances"),
        pl.col("num_tokens").sum().alias("tokens"),
        pl.col("num_tokens").is_not_null().sum().alias("token_instances"),
        pl.col("batch_size").mean().alias("mean_batch_size"),
        pl.col("seq_len").mean().alias("mean_seq_len"),
        pl.col("accept_len").mean().alias("mean_accept_len"),
    ]


def by_rank(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per (phase, rank): instance count and sums (means are sums / instances)."""
    return instances.group_by(["phase", "rank"]).agg(_agg(["phase", "rank"])).sort(["phase", "rank"])


def by_phase(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per phase over all ranks (each instance of each rank counts once)."""
    return instances.group_by("phase").agg(
        pl.col("rank").n_unique().alias("ranks"), *_agg(["phase"])
    ).sort("phase")


def seq_bucket_edges(seq: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Power-of-two sequence-length buckets [lo, hi): 0-1, 1-2, ..., 1024-2048, ..."""
    lo = pl.when(seq <= 0).then(pl.lit(0, pl.Int64)).otherwise(
        pl.lit(2, pl.Int64).pow(seq.cast(pl.Float64).log(2).floor().cast(pl.Int64))
    )
    hi = pl.when(seq <= 0).then(pl.lit(1, pl.Int64)).otherwise(lo * 2)
    return lo.cast(pl.Int64), hi.cast(pl.Int64)


def by_seq(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per (phase, sequence-length bucket) over all ranks; unknown seq_len in its own row."""
    lo, hi = seq_bucket_edges(pl.col("seq_len"))
    df = instances.with_columns(lo.alias("seq_lo"), hi.alias("seq_hi"))
    return (
        df.group_by(["phase", "seq_lo", "seq_hi"])
        .agg(pl.col("rank").n_unique().alias("ranks"), *_agg(["phase", "seq_lo"]))
        .sort(["phase", "seq_lo"], nulls_last=True)
    )


def stragglers(
    events: pl.DataFrame, instances: pl.DataFrame, min_skew_ns: int = 1_000, collectives: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per phase: the straggler rank at matched collectives, and what it did before.

    The straggler is the rank whose late arrivals made the other ranks wait longest
    (sum of their waits at collectives where it arrived last); ties: most often last.
    Columns: phase, collectives (matched, skew >= min_skew_ns), last_rank, times_last,
    share_last, mean_late_ns (its arrival minus the mean arrival of the others, when
    last), inflicted_wait_ns, before_gap_ns (mean GPU idle right before its late
    collective), before_kernel (its most frequent preceding kernel when late).
    """
    schema = {
        "phase": pl.String, "collectives": pl.UInt32, "last_rank": pl.Int32, "times_last": pl.UInt32,
        "share_last": pl.Float64, "mean_late_ns": pl.Float64, "inflicted_wait_ns": pl.Int64,
        "before_gap_ns": pl.Float64, "before_kernel": pl.String,
    }
    if collectives is None and events.get_column("coll_seq").null_count() == events.height:
        return pl.DataFrame(schema=schema)
    if collectives is None:
        from .attribution import matched

        collectives = matched(events)
    m = collectives.filter(
        pl.col("matched") & pl.col("phase").is_not_null()
    )
    m = m.filter(pl.col("phase").is_in(instances.get_column("phase").unique().implode()))
    if m.height == 0 or m.get_column("rank").n_unique() < 2:
        return pl.DataFrame(schema=schema)
    per = m.group_by(["group", "coll_seq"]).agg(
        pl.col("phase").first(),
        (pl.col("start_ns").max() - pl.col("start_ns").min()).alias("skew"),
        pl.col("last_rank").first(),
        (pl.col("start_ns").max() - pl.col("start_ns").sort().head(pl.len() - 1).mean()).alias("late"),
        pl.col("wait_ns").sum().alias("inflicted"),
    ).filter(pl.col("skew") >= min_skew_ns)
    if per.height == 0:
        return pl.DataFrame(schema=schema)
    counts = per.group_by(["phase", "last_rank"]).agg(
        pl.len().alias("times_last"),
        pl.col("late").mean().alias("mean_late_ns"),
        pl.col("inflicted").sum().alias("inflicted_wait_ns"),
    )
    # the straggler: the rank whose late arrivals made the others wait longest (then most often)
    top = (
        counts.sort(["phase", "inflicted_wait_ns", "times_last", "last_rank"], descending=[False, True, True, False])
        .group_by("phase", maintain_order=True)
        .first()
    )
    tot = per.group_by("phase").agg(pl.len().alias("collectives"))
    top = top.join(tot, on="phase").with_columns((pl.col("times_last") / pl.col("collectives")).alias("share_last"))
    # what the straggler did right before its late arrivals: previous GPU event on its device
    rows = []
    gpu = events.select("kind", "rank", "name", "start_ns", "dur_ns").filter(pl.col("kind").is_in(list(GPU_KINDS)))
    for phase, rank in top.select("phase", "last_rank").iter_rows():
        late = per.filter((pl.col("phase") == phase) & (pl.col("last_rank") == rank)).select("group", "coll_seq")
        arr = m.filter(pl.col("rank") == rank).join(late, on=["group", "coll_seq"]).get_column("start_ns").to_numpy()
        g = gpu.filter(pl.col("rank") == rank).sort("start_ns")
        gs = g.get_column("start_ns").to_numpy()
        ge = np.maximum.accumulate(gs + g.get_column("dur_ns").fill_null(0).to_numpy())
        pos = np.searchsorted(gs, arr, side="left") - 1
        okp = pos >= 0
        gap = np.maximum(arr[okp] - ge[pos[okp]], 0)
        names = g.get_column("name").to_numpy()[pos[okp]].tolist()
        kern = max(set(names), key=names.count) if names else None
        rows.append({"phase": phase, "before_gap_ns": float(gap.mean()) if gap.size else None, "before_kernel": kern})
    before = pl.DataFrame(rows, schema={"phase": pl.String, "before_gap_ns": pl.Float64, "before_kernel": pl.String})
    out = top.join(before, on="phase", how="left")
    return out.select([pl.col(k).cast(v) for k, v in schema.items()]).sort("phase")


def check_sums(instances: pl.DataFrame) -> None:
    """Raise AssertionError when an instance's buckets do not sum to its GPU window."""
    bad = instances.filter(pl.sum_horizontal(list(BUCKET_COLUMNS)) != pl.col("gpu_window_ns"))
    if bad.height:
        raise AssertionError(f"{bad.height} instances whose buckets do not sum to the GPU window")


__all__ = [
    "BUCKET_COLUMNS",
    "SUM_COLUMNS",
    "by_phase",
    "by_rank",
    "by_seq",
    "check_sums",
    "seq_bucket_edges",
    "stragglers",
]
