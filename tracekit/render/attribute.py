"""Render ``tracekit attribute``: rich tables and a plain-language summary (the JSON document: ``attribute_json.py``).

Every number says what it is: ``/inst`` = mean per phase instance (each
instance of each rank counts once), ``total`` = summed over instances, ``%`` =
share of the GPU window (the buckets add up to 100 %). Host time is the phase
range on the CPU; the GPU window runs from the instance's first GPU event to
its last. Queue delay and overlapped communication are reported beside the
buckets, never inside them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.analyzers.rank_summary import summarize
from tracekit.analyzers.reports import AttributionReport, Mode
from tracekit.buckets import BUCKETS, LABELS
from tracekit.render.attribute_json import WHOLE_TRACE_LINE, clock_notes
from tracekit.render.console import SafeConsole
from tracekit.render.rank_fold import ALL, RankView, summary_line
from tracekit.render.ranks import before_late
from tracekit.render.units import dur
from tracekit.schema import PHASES

PHASE_ORDER: Final = PHASES  # tables list the phases in cycle order, then the others by name
MAX_OUTLIER_LINES: Final = 8
def pct(part: float, whole: float) -> str:
    return "n/a" if whole <= 0 else f"{100.0 * part / whole:.1f}%"


MIN_PIPE_WIDTH: Final = 120  # console width when stdout is not a terminal (piped, CI logs)
MAX_RANK_COLUMNS: Final = 4  # more ranks: min / median / max across ranks instead of one column each


def make_console(min_width: int = MIN_PIPE_WIDTH) -> Console:
    """A console that never squeezes tables: at least ``min_width`` columns when not a terminal."""
    c = SafeConsole()
    if c.is_terminal:
        return c
    return SafeConsole(width=max(c.width, min_width))


def _rank_columns(t: Table, rrows: list[dict[str, Any]], what: str,
                  all_ranks: bool = False) -> Callable[[Callable[[dict[str, Any]], float | None]], list[str]]:
    """Add per-rank columns to ``t`` (one per rank up to MAX_RANK_COLUMNS ranks, or with ``all_ranks``;
    else the rank summary across ranks: min / median / p90 / max and which rank is max,
    ``analyzers.rank_summary``); return a function that turns a per-rank share (fraction, or None)
    into the row's cells."""
    if len(rrows) <= MAX_RANK_COLUMNS or all_ranks:
        for r in rrows:
            t.add_column(f"rank {r['rank']} {what}", justify="right")

        def cells(fn: Callable[[dict[str, Any]], float | None]) -> list[str]:
            return ["n/a" if (v := fn(r)) is None else f"{100 * v:.1f}%" for r in rrows]

        return cells
    t.add_column(f"ranks: min {what}", justify="right")
    t.add_column(f"median {what}", justify="right")
    t.add_column(f"p90 {what}", justify="right")
    t.add_column(f"max {what} (rank)", justify="right")

    def stats(fn: Callable[[dict[str, Any]], float | None]) -> list[str]:
        s = summarize(((r["rank"], fn(r)) for r in rrows), what, "fraction")
        if s is None:
            return ["n/a"] * 4
        return [f"{100 * s.min.value:.1f}%", f"{100 * s.median:.1f}%", f"{100 * s.p90:.1f}%",
                f"{100 * s.max.value:.1f}% (rank {s.max.rank})"]

    return stats


def _share(part: str, whole: str) -> Callable[[dict[str, Any]], float | None]:
    return lambda r: None if r[whole] <= 0 else r[part] / r[whole]


def phase_order(phases: Iterable[str]) -> list[str]:
    """``phases`` in the order every table lists them (``PHASE_ORDER``, then the others by name)."""
    return sorted(phases, key=lambda p: (PHASE_ORDER.index(p) if p in PHASE_ORDER else 99, p))



def straggler_line(s: dict[str, Any]) -> str:
    """The straggler of a phase (an ``analyzers.stragglers.phase_stragglers`` row), in the words
    of ``tracekit ranks`` (which also names the slower kernels)."""
    why = before_late(s)
    return (
        f"  straggler: rank {s['last_rank']} made the other ranks wait {dur(s['inflicted_wait_ns'])} in total "
        f"(all instances); it arrived last at {s['last_count']} of {s['collectives']} matched collectives "
        f"({100 * s['last_share']:.0f}%), {dur(s['late_margin_ns'])} in total behind the next-latest rank"
        + (f"; before its late arrivals: {'; '.join(why)}" if why else "")
    )


TIMES_GLOSSARY: Final = (
    "[U] unprofiled timer: the capture's timer around the phase with no profiler running (median per instance on "
    "each rank, median over ranks; spec uses one rank's); [P] profiled timer: the same timer inside the profiled "
    "window; [W] GPU window: first GPU event start to last GPU event end of an instance in the profiled trace "
    "(median, p90, mean over every rank's instances; the bucket tables split its mean, gap and diff its median); "
    "[H] host range: the phase's range on the CPU in the profiled trace (mean)"
)


TIMES_KEY: Final = ("times: [U] unprofiled timer, [P] profiled timer, [W] GPU window, [H] host range "
                    "(`tracekit attribute` prints each phase's, with the glossary)")


def times_table(report: AttributionReport) -> Table:
    """The glossary of a phase's times, printed once above the tables: each figure a phase has, by clock."""
    assert report.by_phase is not None
    t = Table(title="Times of each phase, per instance (glossary below; the tables name the one they show)",
              title_justify="left", caption=TIMES_GLOSSARY, caption_justify="left")
    for c in ("phase", "[U] unprofiled", "[P] profiled timer", "[W] median", "[W] p90", "[W] mean", "[H] mean"):
        t.add_column(c, justify="left" if c == "phase" else "right")
    rows = {r["phase"]: r for r in report.by_phase.iter_rows(named=True)}
    for ph in phase_order(rows):
        r, tm = rows[ph], report.timers.get(ph)
        n = max(int(r["instances"]), 1)
        t.add_row(ph, "n/a" if tm is None else f"{dur(tm.unprofiled_ns, digits=3)} ({tm.clock})",
                  dur(None if tm is None else tm.window_ns, digits=3), dur(r.get("median_gpu_window_ns"), digits=3),
                  dur(r.get("p90_gpu_window_ns"), digits=3), dur(r["gpu_window_ns"] / n, digits=3),
                  dur(r["host_ns"] / n, digits=3))
    return t


def dilation_line(phase: str, d: Mapping[str, Any]) -> str:
    """The attribute tables' dilation line of one phase (an entry of ``dilation``)."""
    from tracekit.render.capture import reference_note

    return (f"  profiler dilation: {phase} {dur(d['unprofiled_ns'])} unprofiled [U], {dur(d['profiled_ns'])} profiled [P] "
            f"(x{d['ratio']:.2f}; {reference_note(d.get('before_ns'), d.get('after_ns'), d['profiled_ns'])}; "
            "capture timers: median per instance, median over ranks)")


def summary(row: dict[str, Any], strag: dict[str, Any] | None) -> str:
    """One paragraph for a phase over all ranks (a by_phase row)."""
    n = max(int(row["instances"]), 1)
    win = row["gpu_window_ns"]
    shares = sorted(((row[f"{b}_ns"], b) for b in BUCKETS), reverse=True)
    parts = []
    for v, b in shares[:4]:
        if v <= 0 or win <= 0 or v / win < 0.03:
            continue
        text = f"{LABELS[b]} {100 * v / win:.0f}%"
        if b == "allreduce" and row["allreduce_kernel_ns"] > 0 and not row["unmatched_instances"]:
            w = row["allreduce_wait_ns"] / row["allreduce_kernel_ns"]
            who = f" for rank {strag['last_rank']}" if strag and strag.get("last_rank") is not None else ""
            text += f" (of which {100 * w:.0f}% waiting{who})"
        parts.append(text)
    launches = row["launches"] / n
    graphed = int(row["graphed_instances"])
    if graphed == 0:
        g = "no CUDA graph"
    elif graphed == n:
        g = f"all {n} instances from a CUDA graph"
    else:
        g = f"{graphed} of {n} instances from a CUDA graph"
    if row.get("graphed_label_conflicts"):
        g += f" by the collector's label, which the launches of {int(row['graphed_label_conflicts'])} contradict"
    text = (
        f"{row['phase']} {dur(win / n)} per instance on the GPU ({n} instances on {row['ranks']} rank(s), "
        f"host range {dur(row['host_ns'] / n)}): " + ", ".join(parts) + f" — {launches:,.0f} launches per instance, {g}."
    )
    if row["queue_delay_ns"] > 0:
        text += f" The GPU was still busy with earlier work for {dur(row['queue_delay_ns'] / n)} per instance after the range opened (queue delay, not counted)."
    if row["overlapped_comm_ns"] > 0:
        text += f" {dur(row['overlapped_comm_ns'] / n)} per instance of communication overlapped compute."
    if row["mean_seq_len"] is not None:
        text += f" Mean sequence length {row['mean_seq_len']:,.0f}."
    return text


def share_table(title: str, share_header: str, row: dict[str, Any], ranks: pl.DataFrame, buckets: tuple[str, ...],
                labels: dict[str, str], total_col: str, total_label: str, all_ranks: bool = False) -> tuple[Table, Callable[[Callable[[dict[str, Any]], float | None]], list[str]]]:
    """A phase's buckets (GPU window or host range): mean per instance over all ranks, share of the
    total, one share column per rank; the total row last (bold). Returns the table and its per-rank cells."""
    n = max(int(row["instances"]), 1)
    total = row[total_col]
    t = Table(title=title)
    t.add_column("bucket", no_wrap=True)
    t.add_column("mean per instance", justify="right")
    t.add_column(share_header, justify="right")
    rrows = list(ranks.iter_rows(named=True))
    cells = _rank_columns(t, rrows, "%", all_ranks)
    for b in buckets:
        v = row[f"{b}_ns"]
        if v == 0 and all(r[f"{b}_ns"] == 0 for r in rrows):
            continue
        t.add_row(labels[b], dur(v / n, digits=3), pct(v, total), *cells(_share(f"{b}_ns", total_col)))
    t.add_row(total_label, dur(total / n, digits=3), "100%", *["" for _ in cells(lambda r: None)], style="bold")
    return t, cells


def seq_table(seq: pl.DataFrame, phase: str, title: str, total: tuple[str, str], columns: tuple[tuple[str, str], ...]) -> Table:
    """A phase by sequence-length bucket: instances, the total (header, column) and the ``columns``
    (header, bucket), each as the mean per instance over all ranks."""
    t = Table(title=title)
    for c in ("seq len", "instances", total[0], *[h for h, _ in columns]):
        t.add_column(c, justify="right")
    for r in seq.filter(pl.col("phase") == phase).iter_rows(named=True):
        n = max(int(r["instances"]), 1)
        label = "unknown" if r["seq_lo"] is None else f"{r['seq_lo']:,}-{r['seq_hi'] - 1:,}"
        t.add_row(label, str(r["instances"]), dur(r[total[1]] / n), *[dur(r[f"{b}_ns"] / n) for _, b in columns])
    return t


def _bucket_table(phase: str, ph_row: dict[str, Any], ranks: pl.DataFrame, all_ranks: bool = False) -> Table:
    n = max(int(ph_row["instances"]), 1)
    t, cells = share_table(f"{phase}: where the GPU window [W] went (mean per instance over all ranks; % of window)",
                           "% of window", ph_row, ranks, BUCKETS, LABELS, "gpu_window_ns", "GPU window", all_ranks)
    blank = ["" for _ in cells(lambda r: None)]
    if ph_row.get("median_gpu_window_ns") is not None:
        t.add_row("GPU window median / p90", f"{dur(ph_row['median_gpu_window_ns'], digits=3)} / {dur(ph_row['p90_gpu_window_ns'], digits=3)}",
                  "", *blank, style="bold")
    t.add_row("host range", dur(ph_row["host_ns"] / n, digits=3), "", *blank, style="dim")
    t.add_row("queue delay (beside)", dur(ph_row["queue_delay_ns"] / n, digits=3), "", *cells(_share("queue_delay_ns", "gpu_window_ns")), style="dim")
    t.add_row("overlapped comm (beside)", dur(ph_row["overlapped_comm_ns"] / n, digits=3), "", *cells(_share("overlapped_comm_ns", "gpu_window_ns")), style="dim")
    return t


def label_line(row: dict[str, Any]) -> str | None:
    """A warning when the graphed label of some instances contradicts their launches."""
    k = int(row.get("graphed_label_conflicts") or 0)
    if not k:
        return None
    n = max(int(row["instances"]), 1)
    g = int(row["graphed_instances"])
    said = f"labelled graphed in {g}/{n} instances" if g else "labelled eager (not graphed)"
    launched = "eager launches and no graph launch" if g else "graph launches and no eager launch"
    return (
        f"label check: {row['phase']} is {said}, but {k} of its {n} instances issued {launched} "
        f"({row['eager_launches'] / n:,.1f} eager + {row['graph_launches'] / n:,.1f} graph launches per instance): "
        "the label disagrees with the launches (graphed_label_conflicts)"
    )


def instance_where(rank: int, cycle: int | None) -> str:
    """'rank 0 cycle 3', or 'rank 0, no cycle' for an instance outside any cycle (an ingested trace's phase
    before or without a cycle marker: stored cycle null or negative)."""
    return f"rank {rank}, no cycle" if cycle is None or cycle < 0 else f"rank {rank} cycle {cycle}"


def robust_lines(row: dict[str, Any], out: pl.DataFrame | None, gpu: bool = True) -> list[str]:
    """The median beside the mean, and one line per outlier (at most MAX_OUTLIER_LINES)."""
    n = max(int(row["instances"]), 1)
    col, what = ("gpu_window_ns", "GPU window") if gpu else ("host_ns", "host range")
    med = row.get(f"median_{col}")
    if med is None:
        return []
    lines = [f"  {what} per instance: median {dur(med)}, p90 {dur(row[f'p90_{col}'])}, mean {dur(row[col] / n)} "
             f"(over all ranks' {n} instances)"]
    rows = [] if out is None else list(out.filter(pl.col("phase") == row["phase"]).iter_rows(named=True))
    if rows and med and row[col] / n > 1.5 * med:
        lines[0] += "; the mean is pulled up by the outliers below, the median is not"
    for r in sorted(rows, key=lambda r: -r["value_ns"])[:MAX_OUTLIER_LINES]:
        ratio = "" if r["ratio"] is None else f" = {r['ratio']:.0f}x the median"
        lines.append(f"  outlier: {instance_where(r['rank'], r['cycle'])}, {dur(r['value_ns'], digits=1)}{ratio} ({dur(r['median_ns'])} on that rank)")
    if len(rows) > MAX_OUTLIER_LINES:
        lines.append(f"  ... and {len(rows) - MAX_OUTLIER_LINES} more outliers (--json lists them all)")
    return lines


def _facts_line(row: dict[str, Any], gpu: bool = True) -> str:
    n = max(int(row["instances"]), 1)
    bits = []
    if row["mean_batch_size"] is not None:
        bits.append(f"batch size {row['mean_batch_size']:.1f}")
    if row["token_instances"]:
        bits.append(f"{row['tokens'] / max(int(row['token_instances']), 1):.1f} tokens")
    if row["mean_seq_len"] is not None:
        bits.append(f"seq len {row['mean_seq_len']:,.0f}")
    if row["mean_accept_len"] is not None:
        bits.append(f"accept len {row['mean_accept_len']:.2f}")
    if gpu:
        bits.append(f"{row['eager_launches'] / n:,.1f} eager launches + {row['graph_launches'] / n:,.1f} graph launches")
        bits.append(f"{row['gpu_events'] / n:,.1f} GPU events")
        if row.get("cross_thread_events"):
            bits.append(f"{row['cross_thread_events'] / n:,.1f} of them launched from another thread")
        bits.append(f"{int(row['graphed_instances'])}/{n} graphed")
    else:
        bits.append(f"{row['ops'] / n:,.1f} CPU ops ({row['outer_ops'] / n:,.1f} outermost)")
    return "  per instance (mean): " + ", ".join(bits)


@dataclass(frozen=True)
class CycleColumns:
    """The one-row-per-instance table of a bucket set: ``total`` the column the shares are of (GPU window or
    host range), ``main`` the (header, bucket) share columns, ``tail`` the (header, column) columns after
    ``rest`` (``*_ns``: a duration, else a count); ``gpu``: the graph and host columns before the total."""

    title: str
    total: tuple[str, str]
    main: tuple[tuple[str, str], ...]
    tail: tuple[tuple[str, str], ...]
    gpu: bool


GPU_CYCLES: Final = CycleColumns(
    "one row per instance (host range and GPU window per instance; % of that window)", ("window", "gpu_window_ns"),
    (("attn", "attention"), ("moe", "moe"), ("gemm", "gemm"), ("AR", "allreduce"), ("launch", "launch_overhead"),
     ("idle", "idle")), (("queue", "queue_delay_ns"),), True)


def cycle_table(inst: pl.DataFrame, phase: str, cols: CycleColumns) -> Table:
    """One row per instance of ``phase``: rank, cycle, batch size, sequence length, the total, the main buckets'
    shares of it and the rest."""
    t = Table(title=f"{phase}: {cols.title}")
    heads = ("rank", "cycle", "bs", "seq", *(("graph", "host") if cols.gpu else ()), cols.total[0],
             *[h for h, _ in cols.main], "rest", *[h for h, _ in cols.tail])
    for c in heads:
        t.add_column(c, justify="right")
    for r in inst.filter(pl.col("phase") == phase).sort(["rank", "host_start_ns"]).iter_rows(named=True):
        w = r[cols.total[1]]
        rest = w - sum(r[f"{b}_ns"] for _, b in cols.main)
        t.add_row(
            str(r["rank"]),
            "" if r["cycle"] is None else str(r["cycle"]),
            "" if r["batch_size"] is None else str(r["batch_size"]),
            "" if r["seq_len"] is None else str(r["seq_len"]),
            *(("" if r["graphed"] is None else ("yes" if r["graphed"] else "no"), dur(r["host_ns"])) if cols.gpu else ()),
            dur(w),
            *[pct(r[f"{b}_ns"], w) for _, b in cols.main],
            pct(rest, w),
            *[dur(r[c]) if c.endswith("_ns") else f"{r[c]:,}" for _, c in cols.tail],
        )
    return t


def _seq_table(seq: pl.DataFrame, phase: str) -> Table:
    return seq_table(seq, phase, f"{phase}: by sequence length (mean per instance over all ranks)",
                     ("window", "gpu_window_ns"),
                     (("attention", "attention"), ("moe", "moe"), ("gemm", "gemm"), ("allreduce", "allreduce"),
                      ("launch", "launch_overhead"), ("idle", "idle")))


@dataclass(frozen=True)
class ModeTables:
    """How ``render`` shows a bucket set (GPU window or host range): its tables and its summary sentence."""

    cycles: CycleColumns
    seq: Callable[[pl.DataFrame, str], Table]
    ranks: Callable[[str, dict[str, Any], pl.DataFrame, bool], Table]  # phase, row, its by-rank rows, --all-ranks
    summary: Callable[[dict[str, Any], dict[str, Any] | None], str]
    gpu: bool


GPU_TABLES: Final = ModeTables(GPU_CYCLES, lambda seq, ph: _seq_table(seq, ph), lambda ph, row, r, a: _bucket_table(ph, row, r, a),
                               lambda row, s: summary(row, s), True)


def render(report: AttributionReport, by: str, console: Console, view: RankView = ALL) -> None:
    """Print tables and the summary for every phase of a GPU- or host-mode report (``view``: the by-rank
    columns of ``--ranks`` only; more than MAX_RANK_COLUMNS ranks summarised unless ``--all-ranks``)."""
    from tracekit.render import host_attribute
    from tracekit.render import sol as render_sol
    from tracekit.render.attribute_json import rank_summaries
    from tracekit.render.estimate import estimate_lines, estimate_table

    tables = host_attribute.HOST_TABLES if report.mode is Mode.HOST else GPU_TABLES
    assert report.by_phase is not None and report.by_seq is not None
    bp = {r["phase"]: r for r in report.by_phase.iter_rows(named=True)}
    strag = {} if report.stragglers is None else {r["phase"]: r for r in report.stragglers.iter_rows(named=True)}
    dil = report.dilation
    rank_sums = rank_summaries(report) if view.ranks is None else {}
    if report.whole_trace:
        console.print(WHOLE_TRACE_LINE, soft_wrap=True)
    if by != "seq" and (note := view.note()) is not None:
        console.print(note, soft_wrap=True, highlight=False, markup=False)
    for line in clock_notes(report):
        console.print(line, soft_wrap=True, highlight=False, markup=False)
    if tables.gpu and bp:
        console.print(times_table(report))
        console.print()
    for phase in phase_order(bp):
        row = bp[phase]
        if by == "cycle":
            inst = report.instances if view.ranks is None else report.instances.filter(pl.col("rank").is_in(list(view.ranks)))
            console.print(cycle_table(inst, phase, tables.cycles))
        elif by == "seq":
            console.print(tables.seq(report.by_seq, phase))
        else:
            rows = report.by_rank.filter(pl.col("phase") == phase)
            if view.ranks is not None:
                rows = rows.filter(pl.col("rank").is_in(list(view.ranks)))
            console.print(tables.ranks(phase, row, rows, view.all_ranks))
            rs = rank_sums.get(phase)
            if rs is not None and rs.count > MAX_RANK_COLUMNS:
                what = "host range" if not tables.gpu else "GPU window [W]"
                sl = summary_line(rs, f"  {what} per instance, each rank's median,", lambda v: dur(v, digits=3))
                console.print(sl, soft_wrap=True, highlight=False, markup=False)
        console.print(_facts_line(row, gpu=tables.gpu))
        if (lab := label_line(row)) is not None:
            console.print(Text.assemble("  ", ("warning:", "yellow"), f" {lab}"), soft_wrap=True)
        for line in robust_lines(row, report.outliers, gpu=tables.gpu):
            console.print(line, soft_wrap=True)
        if phase in dil:
            console.print(dilation_line(phase, dil[phase]))
        pe = report.estimate(phase)
        if pe is not None and by == "rank":
            console.print(estimate_table(pe))
            for line in estimate_lines(pe.estimate):
                console.print(line, highlight=False, markup=False, soft_wrap=True)
        s = strag.get(phase)
        if s is not None:
            console.print(straggler_line(s), soft_wrap=True)
        console.print(tables.summary(row, s), soft_wrap=True)
        if (sol := render_sol.attribute_line(report.sol, phase)) is not None:
            console.print(sol, soft_wrap=True, highlight=False, markup=False)
        console.print()
    if (why := render_sol.why_line(report.sol_why)) is not None:
        console.print(why, soft_wrap=True, highlight=False, markup=False)
    for issue in report.issues:
        console.print(Text.assemble(("warning:", "yellow"), f" {issue}; wait/transfer not split for that group"),
                      soft_wrap=True)


__all__ = [
    "BUCKETS",
    "LABELS",
    "dilation_line",
    "make_console",
    "phase_order",
    "render",
    "robust_lines",
    "seq_table",
    "share_table",
    "straggler_line",
    "summary",
]
