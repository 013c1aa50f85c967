"""Render ``tracekit attribute`` in host mode (selected ranks have no GPU events: a CPU run).

Same layout and JSON keys as ``tracekit.render.attribute`` (``mode: "host"``); the
buckets are ``analyzers.host_attribution.HOST_BUCKETS`` and add up to the host
range exactly; ``gpu_window_ns`` is 0. Every figure is a mean per phase instance
unless the column says otherwise.
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.analyzers.reports import GapReport
from tracekit.buckets import HOST_BUCKETS, HOST_LABELS
from tracekit.render.attribute import (
    CycleColumns,
    ModeTables,
    seq_table,
    share_table,
)
from tracekit.render.gap import (
    render_head,
    side_names,
    warning_lines,
)
from tracekit.render.units import dur, ms

HOST_HEADER: Final = "host time (CPU run: no GPU events; ops on the phase's thread)"
HOST_DEFINITIONS: Final = {
    "units": "integer nanoseconds",
    "mode": "host: the selected ranks have no GPU events; phase time is attributed on the host",
    "host_ns": "phase range on the host (CPU), summed over instances",
    "gpu_window_ns": "0: no GPU events",
    "buckets_ns": (
        "exclusive host time per bucket, summed over instances; adds up to host_ns exactly. At each instant "
        "the outermost CPU op on the phase's thread owns the time; bucket by op name rule, else enclosing "
        "module scope (tracekit/data/host_ops.toml); collective scopes own their whole span (call + wait); "
        "host_overhead = time no op covers (Python / framework between ops)"
    ),
    "ops": "CPU op rows on the phase's thread inside the range, summed over instances",
    "outer_ops": "outermost ops that own time, summed over instances",
}
HOST_ZERO: Final[dict[str, Any]] = {
    "queue_delay_ns": 0, "overlapped_comm_ns": 0, "between_ns": 0, "launches": 0, "eager_launches": 0,
    "graph_launches": 0, "gpu_events": 0, "allreduce_kernel_ns": 0, "allreduce_wait_ns": None,
    "allreduce_transfer_ns": None, "unmatched_instances": 1,
}


def host_mode_line(ranks: list[int] | None, what: str = "phase time is attributed") -> str:
    """The one line that says the run is attributed (``what``: or its phases compared) in host mode."""
    which = "this run" if ranks is None else f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks}"
    return (f"host mode: {which} has no GPU events (CPU run), so {what} on the host: "
            "the CPU ops on each phase's thread, outermost op wins")


def _host_table(phase: str, row: dict[str, Any], ranks: pl.DataFrame, all_ranks: bool = False) -> Table:
    return share_table(f"{phase}: {HOST_HEADER}; mean over all ranks' instances", "% of host range", row, ranks,
                       HOST_BUCKETS, HOST_LABELS, "host_ns", "host range (= sum)", all_ranks)[0]


HOST_CYCLES: Final = CycleColumns(
    f"one row per instance; {HOST_HEADER}; % of that instance's host range", ("host range", "host_ns"),
    (("attn", "attention"), ("moe", "moe"), ("gemm", "gemm"), ("allreduce", "allreduce"), ("comm", "comm"),
     ("overhead", "host_overhead")), (("ops", "ops"),), False)


def _host_seq_table(seq: pl.DataFrame, phase: str) -> Table:
    return seq_table(seq, phase, f"{phase}: by sequence length; {HOST_HEADER}; mean per instance over all ranks",
                     ("host range", "host_ns"),
                     (("attention", "attention"), ("moe", "moe"), ("gemm", "gemm"), ("allreduce", "allreduce"),
                      ("comm", "comm"), ("overhead", "host_overhead")))


def host_summary(row: dict[str, Any]) -> str:
    """One paragraph for a phase over all ranks in host mode (a by_phase row)."""
    n = max(int(row["instances"]), 1)
    host = row["host_ns"]
    shares = sorted(((row[f"{b}_ns"], b) for b in HOST_BUCKETS), reverse=True)
    parts = [f"{HOST_LABELS[b]} {100 * v / host:.0f}%" for v, b in shares[:4] if host > 0 and v / host >= 0.01]
    text = (f"{row['phase']} {dur(host / n)} per instance on the host ({n} instances on {row['ranks']} rank(s); "
            f"no GPU events, so no GPU window): " + ", ".join(parts) + ".")
    if host > 0 and (row["allreduce_ns"] + row["comm_ns"]) / host >= 0.5:
        text += (" Most of the range is spent inside collective calls, waiting for the slowest rank"
                 " (on a CPU box with fewer cores than ranks, the ranks take turns on the cores).")
    return text


HOST_TABLES: Final = ModeTables(HOST_CYCLES, lambda seq, ph: _host_seq_table(seq, ph),
                                lambda ph, row, r, a: _host_table(ph, row, r, a), lambda row, s: host_summary(row), False)


def host_explanation_lines(rep: GapReport) -> list[str]:
    assert rep.host_ranked is not None
    """The host-mode gap's ranked buckets (``analyzers.host_gap``) in words."""
    stat = rep.stat
    return [
        f"{HOST_LABELS[r['bucket']]}: {'+' if r['delta_ns'] > 0 else ''}{ms(r['delta_ns'])} per instance ({stat})"
        + ("" if r["share"] is None else f" ({100 * r['share']:.0f}% of the host-range gap)")
        for r in rep.host_ranked.iter_rows(named=True)
    ]


def render_host_gap(rep: GapReport, console: Console) -> None:
    """Print the host-mode gap table and its ranked explanations."""
    a, b = rep.a, rep.b
    an, bn = side_names(rep, tagged=True)
    stat = rep.stat
    render_head(rep, console)
    total = rep.total_delta_ns
    more = "more" if total >= 0 else "less"
    console.print(f"{an} takes {dur(abs(total))} per instance ({stat}) {more} host time than {bn}; by bucket:")
    for line in host_explanation_lines(rep):
        console.print(f"  {line}", soft_wrap=True)
    for w in warning_lines(rep, see_rows=False):
        console.print(Text.assemble(("warning:", "yellow"), f" {w}"), soft_wrap=True)
    tm = dict(rep.timing)
    if tm["timing_source"] == "unprofiled":
        d = tm["delta_ns"]
        console.print(f"unprofiled [U] (capture timers, {tm['clock']}, median per instance): {a['phase']} {ms(tm['a_ns'])}, "
                      f"{b['phase']} {ms(tm['b_ns'])} ({'+' if d >= 0 else ''}{ms(d)}); the table above is profiled",
                      soft_wrap=True)


__all__ = [
    "HOST_BUCKETS",
    "HOST_HEADER",
    "HOST_LABELS",
    "host_explanation_lines",
    "host_mode_line",
    "host_summary",
    "render_host_gap",
]
