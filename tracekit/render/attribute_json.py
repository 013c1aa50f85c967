"""``tracekit attribute --json``: the document's items and their definitions (``render/attribute.py``
writes the same report as tables and words)."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from tracekit.analyzers.rank_summary import RankSummary, int_hosts, summarize
from tracekit.analyzers.reports import AttributionReport, Mode
from tracekit.analyzers.robust import MAD_SCALE, OUTLIER_MADS, OUTLIER_RATIO
from tracekit.buckets import BUCKETS, HOST_BUCKETS
from tracekit.documents import ATTRIBUTE
from tracekit.render.units import dur

DEFINITIONS: Final = {
    "units": "integer nanoseconds",
    "host_ns": "phase range on the host (CPU), summed over instances",
    "gpu_window_ns": "first GPU event start to last GPU event end of each instance, summed over instances",
    "buckets_ns": "exclusive time per bucket, summed over instances; adds up to gpu_window_ns exactly",
    "queue_delay_ns": "time after the host range opened while the GPU was still busy with earlier work (not in the window)",
    "overlapped_comm_ns": "communication hidden under compute or copies (not in any bucket)",
    "between_ns": "GPU time from this phase's window end to the next phase's window start on the rank",
    "launches": "launch calls issued inside the phase range: eager kernel/copy launches + cudaGraphLaunch calls",
    "cross_thread_events": "GPU events whose launch call ran on another thread of the process than the phase range",
    "graphed_label_conflicts": (
        "instances whose graphed label contradicts their launches: labelled graphed with eager launches and no "
        "graph launch, or labelled eager with graph launches and no eager launch"
    ),
    "allreduce_wait_ns": "allreduce kernel time spent waiting for the last rank to arrive",
    "allreduce_transfer_ns": "allreduce kernel time after the last rank arrived",
    "median_gpu_window_ns": "median GPU window per instance: the ceil(n/2)-th smallest (nearest rank; one instance's value)",
    "p90_gpu_window_ns": "90th percentile GPU window per instance: the ceil(0.9 n)-th smallest",
    "outliers": (
        f"instances more than {OUTLIER_RATIO:g}x the median of their (phase, rank) and more than "
        f"{OUTLIER_MADS:g} x {MAD_SCALE} x MAD above it (MAD: median absolute deviation); slow side only"
    ),
}
WHOLE_TRACE_LINE: Final = (
    "no phase ranges found (no tracekit labels, no SGLang spans): each rank's whole GPU span, first GPU event "
    "to last, is attributed as one instance of phase 'trace'; its buckets add up to the span"
)
NO_TIMERS_LINE: Final = (
    "clock: every figure is from the profiled window (the trace's own timestamps, exact ns); this run has no "
    "unprofiled phase timers (raw traces ingested, or a capture without them), so the profiler's dilation is "
    "unknown: the time between measured ops and kernels (launch overhead, GPU idle, host overhead) may hold "
    "profiler cost. `tracekit capture` records both (docs/capture.md, Profile modes)"
)


def clock_notes(report: AttributionReport) -> list[str]:
    """The clock sentence of an attribute output (text and JSON, GPU and host mode) when the run has no
    unprofiled phase timer at all; none otherwise."""
    return [] if report.has_timers else [NO_TIMERS_LINE]


def opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def opt_float(v: Any) -> float | None:
    return None if v is None else float(v)


def outlier_reason(row: dict[str, Any], what: str) -> str:
    """Why an instance is an outlier (``analyzers.robust.outliers`` row), in words."""
    ratio = "" if row["ratio"] is None else f"{row['ratio']:.0f}x the median, "
    return (
        f"{what} {ratio}{dur(row['value_ns'])} vs a median of {dur(row['median_ns'])} on rank {row['rank']}: above "
        f"{OUTLIER_RATIO:g}x the median and {OUTLIER_MADS:g} scaled MADs above it"
    )


def outlier_item(row: dict[str, Any], value_key: str) -> dict[str, Any]:
    """One JSON ``outliers`` item: rank, cycle, phase_id, start_ns, the value, median_ns, ratio, reason."""
    what = "GPU window" if value_key == "gpu_window_ns" else "host range"
    return {
        "rank": row["rank"],
        "cycle": opt_int(row["cycle"]),
        "phase_id": opt_int(row["phase_id"]),
        "start_ns": int(row["start_ns"]),
        value_key: int(row["value_ns"]),
        "median_ns": int(row["median_ns"]),
        "ratio_to_median": opt_float(row["ratio"]),
        "reason": outlier_reason(row, what),
    }


def outlier_items(out: pl.DataFrame | None, value_key: str) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    """JSON outlier items keyed by (phase, rank) and by (phase, None) (all ranks)."""
    items: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    if out is None:
        return items
    for r in out.iter_rows(named=True):
        it = outlier_item(r, value_key)
        items.setdefault((r["phase"], r["rank"]), []).append(it)
        items.setdefault((r["phase"], None), []).append(it)
    return items


def phase_item(
    row: dict[str, Any],
    buckets: tuple[str, ...] = BUCKETS,
    outliers: dict[tuple[str, int | None], list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One JSON ``phases`` item from a by_rank / by_phase row."""
    extra: dict[str, Any] = {k: int(row[k]) for k in ("ops", "outer_ops") if k in row}
    for k in ("median_gpu_window_ns", "p90_gpu_window_ns", "median_host_ns", "p90_host_ns"):
        if k in row:
            extra[k] = opt_int(row[k])
    if outliers is not None:
        extra["outliers"] = outliers.get((row["phase"], row.get("rank")), [])
    return {
        "phase": row["phase"],
        "rank": row.get("rank"),
        "instances": int(row["instances"]),
        "host_ns": int(row["host_ns"]),
        "gpu_window_ns": int(row["gpu_window_ns"]),
        "buckets_ns": {b: int(row[f"{b}_ns"]) for b in buckets},
        "queue_delay_ns": int(row["queue_delay_ns"]),
        "overlapped_comm_ns": int(row["overlapped_comm_ns"]),
        "between_ns": int(row["between_ns"]),
        "launches": int(row["launches"]),
        "eager_launches": int(row["eager_launches"]),
        "graph_launches": int(row["graph_launches"]),
        "graphed_instances": int(row["graphed_instances"]),
        **({"graphed_label_conflicts": int(row["graphed_label_conflicts"])} if "graphed_label_conflicts" in row else {}),
        **({"cross_thread_events": int(row["cross_thread_events"])} if "cross_thread_events" in row else {}),
        "gpu_events": int(row["gpu_events"]),
        "allreduce": {
            "kernel_ns": int(row["allreduce_kernel_ns"]),
            "wait_ns": None if row["unmatched_instances"] else int(row["allreduce_wait_ns"]),
            "transfer_ns": None if row["unmatched_instances"] else int(row["allreduce_transfer_ns"]),
        },
        "tokens": int(row["tokens"]) if row["token_instances"] else None,
        "mean_batch_size": opt_float(row["mean_batch_size"]),
        "mean_seq_len": opt_float(row["mean_seq_len"]),
        "mean_accept_len": opt_float(row["mean_accept_len"]),
        **extra,
    }


def cycle_item(row: dict[str, Any], buckets: tuple[str, ...] = BUCKETS) -> dict[str, Any]:
    """One JSON ``cycles`` item (one phase instance)."""
    extra: dict[str, Any] = {k: int(row[k]) for k in ("ops", "outer_ops") if k in row}
    return {
        "phase": row["phase"],
        "rank": row["rank"],
        "phase_id": row["phase_id"],
        "cycle": opt_int(row["cycle"]),
        "batch_size": opt_int(row["batch_size"]),
        "num_tokens": opt_int(row["num_tokens"]),
        "seq_len": opt_int(row["seq_len"]),
        "graphed": row["graphed"],
        "accept_len": opt_float(row["accept_len"]),
        "host_start_ns": int(row["host_start_ns"]),
        "host_ns": int(row["host_ns"]),
        "window_start_ns": int(row["window_start_ns"]),
        "gpu_window_ns": int(row["gpu_window_ns"]),
        "buckets_ns": {b: int(row[f"{b}_ns"]) for b in buckets},
        "queue_delay_ns": int(row["queue_delay_ns"]),
        "between_ns": int(row["between_ns"]),
        "overlapped_comm_ns": int(row["overlapped_comm_ns"]),
        "launches": int(row["launches"]),
        "eager_launches": int(row["eager_launches"]),
        "graph_launches": int(row["graph_launches"]),
        **({"cross_thread_events": int(row["cross_thread_events"])} if "cross_thread_events" in row else {}),
        "allreduce_wait_ns": opt_int(row["allreduce_wait_ns"]),
        "allreduce_transfer_ns": opt_int(row["allreduce_transfer_ns"]),
        **extra,
    }


def document_head(run: str | None, mode: str, by: str, buckets: tuple[str, ...]) -> dict[str, Any]:
    """The keys every ``attribute --json`` document starts with (GPU and host mode)."""
    return {"run": run, "mode": mode, "by": by, "units": "ns", "bucket_order": list(buckets)}


def rank_summaries(report: AttributionReport) -> dict[str, RankSummary]:
    """Per phase, each rank's median instance (GPU window, or host range in host mode) summarised over
    the ranks (``analyzers.rank_summary``: the slowest ranks named with their host)."""
    col = "median_host_ns" if report.mode is Mode.HOST else "median_gpu_window_ns"
    if report.by_rank is None or col not in report.by_rank.columns:
        return {}
    hosts = int_hosts(report.manifest)
    out: dict[str, RankSummary] = {}
    for (phase,), df in report.by_rank.group_by(["phase"], maintain_order=True):
        s = summarize(df.select("rank", col).iter_rows(), col, "ns", hosts=hosts)
        if s is not None:
            out[str(phase)] = s
    return out


def to_json(report: AttributionReport, by: str, run: str | None = None) -> dict[str, Any]:
    """The stable ``--json`` document of a GPU- or host-mode report (host mode: the same keys, ``mode: host``,
    host buckets summing to host_ns, gpu_window_ns 0, no stragglers, issues or estimates)."""
    assert report.by_phase is not None and report.by_seq is not None
    host = report.mode is Mode.HOST
    if host:
        from tracekit.render.host_attribute import HOST_DEFINITIONS, HOST_ZERO
    buckets, zero = (tuple(HOST_BUCKETS), HOST_ZERO) if host else (BUCKETS, {})
    out = outlier_items(report.outliers, "host_ns" if host else "gpu_window_ns")
    doc: dict[str, Any] = {
        **document_head(run, report.mode.value, by, buckets),
        "phases": [phase_item({**r, **zero}, buckets, out) for r in report.by_rank.iter_rows(named=True)],
        "all_ranks": [phase_item({**r, **zero, "rank": None}, buckets, out) for r in report.by_phase.iter_rows(named=True)],
        "stragglers": [] if report.stragglers is None else report.stragglers.to_dicts(),
        "issues": list(report.issues),
        "whole_trace": report.whole_trace,
        "definitions": HOST_DEFINITIONS if host else DEFINITIONS,
        "rank_summary": {ph: rs.to_dict() for ph, rs in rank_summaries(report).items()},
    }
    notes = ([WHOLE_TRACE_LINE] if doc["whole_trace"] else []) + clock_notes(report)
    if notes:
        doc["notes"] = notes
    if by == "cycle":
        doc["cycles"] = [cycle_item({**r, **zero}, buckets) for r in report.instances.iter_rows(named=True)]
    if by == "seq":
        doc["seq"] = [
            {"seq_lo": opt_int(r["seq_lo"]), "seq_hi": opt_int(r["seq_hi"]), **phase_item({**r, **zero, "rank": None}, buckets)}
            for r in report.by_seq.iter_rows(named=True)
        ]
    doc["dilation"] = dict(report.dilation)
    if host:
        return ATTRIBUTE.make(doc)
    from tracekit.render.estimate import estimate_json

    doc["unprofiled_estimate"] = [{"phase": e.phase, "rank": e.rank, **estimate_json(e)} for e in report.estimates]
    from tracekit.render import sol as render_sol

    doc["sol"] = render_sol.attribute_json(report.sol)
    doc["sol_why"] = report.sol_why
    return ATTRIBUTE.make(doc)
