"""Views over attribution's instance table: per rank, per phase, per sequence-length bucket,
the straggler per phase (``analyzers.stragglers``), and the bucket-sum invariant. Pure functions
over polars frames."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from tracekit.buckets import BUCKETS

from .buckets import DEFAULT_LAUNCH_LATENCY_NS
from .robust import median_p90
from .stragglers import MIN_SKEW_NS, phase_stragglers
from .stragglers import stragglers as straggler_view

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


@dataclass(frozen=True)
class InstanceColumns:
    """What the per-rank / per-phase / per-sequence-length views of an instance table aggregate: the columns
    summed, the window whose median and p90 they give, and (GPU buckets) the GPU-only counts."""

    sums: tuple[str, ...]
    window: str  # gpu_window_ns (GPU buckets) | host_ns (host buckets)
    gpu: bool  # allreduce matching, graphed-label conflicts, instances with GPU events


GPU_COLUMNS: Final = InstanceColumns(SUM_COLUMNS, "gpu_window_ns", True)


def _agg(cols: InstanceColumns) -> list[pl.Expr]:
    gpu = cols.gpu
    return [
        pl.len().alias("instances"),
        *[pl.col(c).sum().alias(c) for c in cols.sums],
        *median_p90(cols.window),
        *([pl.col("allreduce_wait_ns").null_count().alias("unmatched_instances")] if gpu else []),
        pl.col("graphed").fill_null(False).sum().alias("graphed_instances"),
        *([pl.col("graphed_label_conflict").sum().alias("graphed_label_conflicts"),
           (pl.col("gpu_events") > 0).sum().alias("gpu_instances")] if gpu else []),
        pl.col("num_tokens").sum().alias("tokens"),
        pl.col("num_tokens").is_not_null().sum().alias("token_instances"),
        pl.col("batch_size").mean().alias("mean_batch_size"),
        pl.col("seq_len").mean().alias("mean_seq_len"),
        pl.col("accept_len").mean().alias("mean_accept_len"),
    ]


def by_rank(instances: pl.DataFrame, cols: InstanceColumns = GPU_COLUMNS) -> pl.DataFrame:
    """One row per (phase, rank): instance count and sums (means are sums / instances)."""
    return instances.group_by(["phase", "rank"]).agg(_agg(cols)).sort(["phase", "rank"])


def by_phase(instances: pl.DataFrame, cols: InstanceColumns = GPU_COLUMNS) -> pl.DataFrame:
    """One row per phase over all ranks (each instance of each rank counts once)."""
    return instances.group_by("phase").agg(pl.col("rank").n_unique().alias("ranks"), *_agg(cols)).sort("phase")


def seq_bucket_edges(seq: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Power-of-two sequence-length buckets [lo, hi): 0-1, 1-2, ..., 1024-2048, ..."""
    lo = pl.when(seq <= 0).then(pl.lit(0, pl.Int64)).otherwise(
        pl.lit(2, pl.Int64).pow(seq.cast(pl.Float64).log(2).floor().cast(pl.Int64))
    )
    hi = pl.when(seq <= 0).then(pl.lit(1, pl.Int64)).otherwise(lo * 2)
    return lo.cast(pl.Int64), hi.cast(pl.Int64)


def by_seq(instances: pl.DataFrame, cols: InstanceColumns = GPU_COLUMNS) -> pl.DataFrame:
    """One row per (phase, sequence-length bucket) over all ranks; unknown seq_len in its own row."""
    lo, hi = seq_bucket_edges(pl.col("seq_len"))
    df = instances.with_columns(lo.alias("seq_lo"), hi.alias("seq_hi"))
    return (
        df.group_by(["phase", "seq_lo", "seq_hi"])
        .agg(pl.col("rank").n_unique().alias("ranks"), *_agg(cols))
        .sort(["phase", "seq_lo"], nulls_last=True)
    )


def stragglers(
    events: pl.DataFrame,
    instances: pl.DataFrame,
    min_skew_ns: int = MIN_SKEW_NS,
    collectives: pl.DataFrame | None = None,
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
) -> pl.DataFrame:
    """Per phase of ``instances``: its straggler, by the one straggler analysis
    (``analyzers.stragglers.phase_stragglers``: the columns of ``tracekit ranks`` restricted to the
    phase's collectives). ``collectives``: ``match_collectives`` over the run, when known."""
    view = straggler_view(events, min_skew_ns, launch_latency_ns=launch_latency_ns, match=collectives, kernels=False)
    return phase_stragglers(view, instances.get_column("phase").unique().to_list())


def check_sums(instances: pl.DataFrame) -> None:
    """Raise AssertionError when an instance's buckets do not sum to its GPU window."""
    bad = instances.filter(pl.sum_horizontal(list(BUCKET_COLUMNS)) != pl.col("gpu_window_ns"))
    if bad.height:
        raise AssertionError(f"{bad.height} instances whose buckets do not sum to the GPU window")


__all__ = [
    "BUCKET_COLUMNS",
    "GPU_COLUMNS",
    "SUM_COLUMNS",
    "InstanceColumns",
    "by_phase",
    "by_rank",
    "by_seq",
    "check_sums",
    "seq_bucket_edges",
    "stragglers",
]
