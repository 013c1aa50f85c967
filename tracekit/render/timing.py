"""Render a timing-mode run (``tracekit attribute`` on ``--profile timing``): phase times per instance."""

from __future__ import annotations

from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table

from tracekit.analyzers.reports import AttributionReport
from tracekit.documents import ATTRIBUTE_TIMING
from tracekit.render.attribute import phase_order
from tracekit.render.capture import profile_line
from tracekit.render.units import dur

CANNOT: Final = ("no profiler ran: no kernels, so no kernel buckets, launch overhead or allreduce wait; "
                 "phase times are unprofiled (host range; GPU time between CUDA events around the phase)")
DEFINITIONS: Final = {
    "units": "integer nanoseconds",
    "host_ns": "phase range on the host, recorded by tracekit's hooks (host clock)",
    "gpu_ns": "GPU time between CUDA events recorded on the stream at the phase's open and close "
              "(includes any queue the phase waited behind); null on CPU ranks",
    "p90": "nearest-rank 90th percentile over the instances",
}


def _ns(v: Any) -> int | None:
    return None if v is None else int(v)


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def to_json(report: AttributionReport, by: str, run: str | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "run": run,
        "mode": "timing",
        "timing_source": "unprofiled",
        "cannot": CANNOT,
        "by": by,
        "units": "ns",
        "phases": [
            {
                "phase": r["phase"], "rank": r["rank"], "instances": int(r["instances"]),
                "median_host_ns": _ns(r["median_host_ns"]), "p90_host_ns": _ns(r["p90_host_ns"]),
                "median_gpu_ns": _ns(r["median_gpu_ns"]), "p90_gpu_ns": _ns(r["p90_gpu_ns"]),
                "mean_batch_size": _f(r["mean_batch_size"]), "mean_tokens": _f(r["mean_tokens"]),
                "mean_seq_len": _f(r["mean_seq_len"]), "mean_accept_len": _f(r["mean_accept_len"]),
                "graphed_instances": int(r["graphed_instances"]),
                "first_cycle": _ns(r["first_cycle"]), "last_cycle": _ns(r["last_cycle"]),
            }
            for r in report.by_rank.iter_rows(named=True)
        ],
        "definitions": DEFINITIONS,
    }
    if by == "cycle":
        doc["cycles"] = [
            {k: (v if not isinstance(v, float) else float(v)) for k, v in r.items()}
            for r in report.instances.iter_rows(named=True)
        ]
    doc["profile"] = profile_line(dict(report.manifest))
    return ATTRIBUTE_TIMING.make(doc)


def render(report: AttributionReport, by: str, console: Console) -> None:
    line = profile_line(dict(report.manifest))
    if line:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(f"timing mode: {CANNOT}", highlight=False, markup=False, soft_wrap=True)
    br = report.by_rank
    phases = phase_order(br["phase"].unique().to_list())
    for ph in phases:
        if by == "cycle":
            t = Table(title=f"{ph}: one row per instance (unprofiled)", title_justify="left")
            for c in ("rank", "cycle", "bs", "tokens", "seq", "accept", "graphed", "host", "GPU (CUDA events)"):
                t.add_column(c, justify="right")
            for r in report.instances.filter(pl.col("phase") == ph).iter_rows(named=True):
                t.add_row(*("" if r[k] is None else str(r[k]) for k in ("rank", "cycle", "batch_size", "num_tokens", "seq_len")),
                          "" if r["accept_len"] is None else f"{r['accept_len']:.2f}",
                          "" if r["graphed"] is None else ("yes" if r["graphed"] else "no"),
                          dur(r["host_ns"], digits=3), dur(r["gpu_ns"], digits=3))
        else:
            t = Table(title=f"{ph}: phase time per instance (unprofiled; median and p90 over instances)", title_justify="left")
            for c in ("rank", "instances", "cycles", "host median", "host p90", "GPU median", "GPU p90", "bs", "tokens",
                      "seq len", "accept len", "graphed"):
                t.add_column(c, justify="right")
            for r in br.filter(pl.col("phase") == ph).iter_rows(named=True):
                t.add_row(str(r["rank"]), str(r["instances"]), f"{r['first_cycle']}..{r['last_cycle']}",
                          dur(r["median_host_ns"], digits=3), dur(r["p90_host_ns"], digits=3), dur(r["median_gpu_ns"], digits=3),
                          dur(r["p90_gpu_ns"], digits=3),
                          *("n/a" if r[k] is None else f"{r[k]:,.{d}f}" for k, d in (
                              ("mean_batch_size", 1), ("mean_tokens", 1), ("mean_seq_len", 0), ("mean_accept_len", 2))),
                          f"{r['graphed_instances']}/{r['instances']}")
        console.print(t)
