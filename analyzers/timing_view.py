"""Timing-mode runs (``tracekit capture --profile timing``): phase times per instance, no kernels.

A timing run holds the phase ranges recorded by tracekit's hooks and nothing
else (no profiler ran): per instance the host time (the range, host clock) and,
on GPU, the GPU time between CUDA events recorded on the stream at the phase's
open and close (``args.cuda_event_ns``, written by ``collectors/ranges.py``),
plus the facts (batch size, tokens, sequence length, accept length, graphed).
There are no kernels, hence no kernel buckets: this view is what ``tracekit
attribute`` shows for such a run. Times are unprofiled (nothing dilated them).

Pure functions over polars frames.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.errors import AnalysisError
from tracekit.finalize.phases import CUDA_EVENT_ARG
from tracekit.manifest import typed
from tracekit.schema import RANGE

from .robust import quantile


def is_timing_run(manifest: dict[str, Any]) -> bool:
    """True when the run was captured in profile mode ``timing``."""
    return bool(typed(manifest).capture.get("profile_mode") == "timing")


def timing_instances(events: pl.DataFrame, phase: str | None = None, rank: int | None = None) -> pl.DataFrame:
    """One row per phase instance: rank, phase, phase_id, cycle, start_ns, host_ns, gpu_ns (null: no CUDA
    events, a CPU rank), batch_size, num_tokens, seq_len, graphed, accept_len. Phase selection as
    ``analyzers.attribution.prepare``."""
    from .attribution import prepare
    from .phase_rows import phase_instances

    ev, phases = prepare(events, phase)
    inst = phase_instances(ev, tuple(phases))
    gpu = (
        ev.filter((pl.col("kind") == RANGE) & pl.col("phase_id").is_not_null() & pl.col("args").is_not_null())
        .select(
            pl.col("phase_id").cast(pl.Int64()),
            pl.col("args").str.json_path_match(f"$.{CUDA_EVENT_ARG}").cast(pl.Int64()).alias("gpu_ns"),
        )
        .group_by("phase_id")
        .agg(pl.col("gpu_ns").max())
    )
    out = inst.join(gpu, on="phase_id", how="left")
    if rank is not None:
        have = sorted(out.get_column("rank").unique().to_list())
        if rank not in have:
            raise AnalysisError(f"no {'/'.join(phases)} instances on this rank (ranks with instances: {have})", rank=rank)
        out = out.filter(pl.col("rank") == rank)
    return out.select(
        "rank", "phase", "phase_id", "cycle", "start_ns", "host_ns", "gpu_ns",
        "batch_size", "num_tokens", "seq_len", "graphed", "accept_len",
    ).sort(["rank", "start_ns"])


def timing_by_rank(inst: pl.DataFrame) -> pl.DataFrame:
    """Per (phase, rank): instances, median / p90 host_ns and gpu_ns (integer ns, nearest rank: ``robust.quantile``), the facts
    (mean batch size, tokens, seq len, accept len; graphed instances)."""
    return (
        inst.group_by(["phase", "rank"])
        .agg(
            pl.len().alias("instances"),
            quantile(pl.col("host_ns"), 0.5).cast(pl.Int64()).alias("median_host_ns"),
            quantile(pl.col("host_ns"), 0.9).cast(pl.Int64()).alias("p90_host_ns"),
            quantile(pl.col("gpu_ns"), 0.5).cast(pl.Int64()).alias("median_gpu_ns"),
            quantile(pl.col("gpu_ns"), 0.9).cast(pl.Int64()).alias("p90_gpu_ns"),
            pl.col("batch_size").mean().alias("mean_batch_size"),
            pl.col("num_tokens").mean().alias("mean_tokens"),
            pl.col("seq_len").mean().alias("mean_seq_len"),
            pl.col("accept_len").mean().alias("mean_accept_len"),
            pl.col("graphed").cast(pl.Int64()).sum().alias("graphed_instances"),
            pl.col("cycle").min().alias("first_cycle"),
            pl.col("cycle").max().alias("last_cycle"),
        )
        .sort(["phase", "rank"])
    )


def timing_report(events: pl.DataFrame, phase: str | None = None, rank: int | None = None) -> dict[str, pl.DataFrame]:
    """Keys: instances, by_rank."""
    inst = timing_instances(events, phase, rank)
    return {"instances": inst, "by_rank": timing_by_rank(inst)}


__all__ = ["is_timing_run", "timing_by_rank", "timing_instances", "timing_report"]
