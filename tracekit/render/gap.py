"""Render ``tracekit gap``: bucket table (medians per instance by default, or means), kernel
evidence, ranked explanations, JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.analyzers.rank_summary import summarize
from tracekit.analyzers.reports import GapReport, Mode
from tracekit.buckets import HOST_LABELS, LABELS
from tracekit.documents import GAP
from tracekit.ranklist import format_rank_list
from tracekit.render.rank_fold import ALL, Column, RankView, rank_table
from tracekit.render.units import dur


def _num(v: Any) -> Any:
    if v is None:
        return None
    return float(v) if isinstance(v, float) else v


def side_json(s: Mapping[str, Any], run: str | None) -> dict[str, Any]:
    out = {k: _num(v) for k, v in s.items()}
    out["run"] = run
    return out


STAT_NOTE: Final = {
    "median": "medians per instance (nearest rank; one stalled instance does not move them; "
              "bucket medians need not add up to the window median; --stat mean for means that add up)",
    "mean": "means per instance (the buckets add up to the window; one stalled instance moves them; "
            "--stat median for medians)",
}
HOST_STAT_NOTE: Final = {k: v.replace("window", "host range") for k, v in STAT_NOTE.items()}


def side_names(rep: GapReport, tagged: bool = False) -> tuple[str, str]:
    """What the words call the two sides: the phase names, or (one phase on both sides) A and B
    (``tagged``: ``A:verify`` / ``B:verify``, as the table headers say)."""
    an, bn = rep.a["phase"], rep.b["phase"]
    if an != bn:
        return an, bn
    return (f"A:{an}", f"B:{bn}") if tagged else ("A", "B")


def _family(r: dict[str, Any], names: tuple[str, str], stat: str) -> str:
    """A kernel family's evidence: launches per instance x mean duration on each side (what the family is), and
    its time per instance in the gap's statistic (the one the bucket delta is in)."""
    fam = r["family"][:50]
    if r["only"] == "a":
        what = f"{fam} only in {names[0]} ({r['a_count']:.1f}/instance, {dur(r['a_mean_ns'])} each"
    elif r["only"] == "b":
        what = f"{fam} only in {names[1]} ({r['b_count']:.1f}/instance, {dur(r['b_mean_ns'])} each"
    else:
        what = f"{fam} {r['a_count']:.1f} x {dur(r['a_mean_ns'])} vs {r['b_count']:.1f} x {dur(r['b_mean_ns'])} per instance ("
    return what + ("" if what.endswith("(") else "; ") + f"{stat} time per instance {dur(r['delta_ns'], signed=True)})"


def explanation_lines(rep: GapReport) -> list[str]:
    """The ranked explanations (``analyzers.gap.Explanation`` items) in words."""
    a, b = rep.a, rep.b
    an, bn = side_names(rep)
    medians = "medians: " if a.get("stat") == "median" else ""
    lines = []
    for e in rep.explanations:
        head = (f"{dur(e.delta_ns, signed=True)} {LABELS[e.bucket]} per instance "
                f"({medians}{dur(e.a_ns)} in {an} vs {dur(e.b_ns)} in {bn})")
        if e.bucket == "launch_overhead":
            why = (
                f"{an} {int(a['graphed_instances'])}/{a['instances']} instances graphed, "
                f"{a['eager_launches']:,.0f} eager + {a['graph_launches']:,.0f} graph launches per instance; "
                f"{bn} {int(b['graphed_instances'])}/{b['instances']} graphed, "
                f"{b['eager_launches']:,.0f} eager + {b['graph_launches']:,.0f} graph launches"
            )
        elif e.bucket == "idle":
            why = "the GPU waited on dependencies, syncs or copies with work already issued"
        else:
            why = "; ".join(_family(r, (an, bn), rep.stat) for r in e.families)
            if e.wait_share_a is not None and e.wait_share_b is not None:
                why += (f"; waiting for the last rank: {100 * e.wait_share_a:.0f}% of allreduce time in {an} "
                        f"vs {100 * e.wait_share_b:.0f}%")
        lines.append(head + (f": {why}" if why else ""))
    return lines


def warning_lines(rep: GapReport, see_rows: bool = True) -> list[str]:
    """The comparison's caveats (``seq_check``) in words; ``see_rows``: the output has the
    matched sequence-length rows (GPU mode)."""
    a, b = rep.a, rep.b
    check = rep.seq_check
    if check == "differs":
        if not see_rows:
            return [f"sequence lengths differ: {a['mean_seq_len']:,.0f} vs {b['mean_seq_len']:,.0f} on average"]
        an, bn = side_names(rep)
        return [f"sequence lengths differ: {an} at {a['mean_seq_len']:,.0f} vs {bn} at {b['mean_seq_len']:,.0f} "
                "on average; see the matched sequence-length rows"]
    if check == "unknown" and see_rows:
        return ["sequence length unknown on at least one side: the comparison cannot be matched by sequence length"]
    return []


def to_json(rep: GapReport, a_run: str | None, b_run: str | None, by_rank: bool = False,
            hosts: Mapping[int, str | None] | None = None) -> dict[str, Any]:
    """The stable ``--json`` document (times in ns, ``statistic`` per instance: median or mean); host mode: the
    same keys, ``mode: host``, host-range buckets, no kernels or sequence rows, ``definitions``."""
    stat = rep.stat
    host = rep.mode is Mode.HOST
    if host:
        from tracekit.render.host_attribute import HOST_DEFINITIONS, host_explanation_lines

    def side(x: Mapping[str, Any], run: str | None) -> dict[str, Any]:
        return {**side_json(x, run), "gpu_window_ns": 0} if host else side_json(x, run)

    total = "host_range" if host else "gpu_window"
    doc: dict[str, Any] = {
        "units": f"ns, {stat} per phase instance (each instance of each selected rank counts once)",
        "statistic": stat,
        **({"mode": "host"} if host else {}),
        "a": side(rep.a, a_run),
        "b": side(rep.b, b_run),
        "buckets": {
            r["bucket"]: {
                "a_ns": r["a_ns"],
                "b_ns": r["b_ns"],
                "delta_ns": r["delta_ns"],
                "delta_per_token_ns": r["delta_per_token_ns"],
                "share_of_gap": r["share"],
            }
            for r in rep.buckets.iter_rows(named=True)
            if r["bucket"] != total
        },
        "total_delta_ns": rep.total_delta_ns,
        "explanations": host_explanation_lines(rep) if host else explanation_lines(rep),
        "kernels": rep.kernels.to_dicts(),
        "seq": rep.seq.to_dicts(),
        "warnings": warning_lines(rep, see_rows=not host),
        **({"definitions": HOST_DEFINITIONS} if host else {}),
    }
    timing = dict(rep.timing)
    doc["timing_source"] = timing["timing_source"]
    doc["unprofiled"] = timing
    if rep.estimate is not None:
        from tracekit.render.estimate import change_json

        doc["unprofiled_estimate"] = change_json(rep.estimate)
    if by_rank and not host:
        doc["by_rank"] = rep.by_rank.to_dicts()
        s = summarize(((r["rank"], r["delta_ns"]) for r in rank_rows(rep)), "delta_ns", "ns", hosts=hosts)
        doc["rank_summary"] = {"delta_ns": None if s is None else s.to_dict()}
    if not host:
        from tracekit.render import sol as render_sol

        doc["sol"] = render_sol.gap_json(rep.sol)
        doc["sol_why"] = rep.sol_why
    return GAP.make(doc)


def bucket_table(rep: GapReport, title: str, heads: tuple[str, str, str, str, str], labels: dict[str, str],
                 total: tuple[str, str]) -> Table:
    """The gap's bucket rows (``analyzers.gap.bucket_table`` or ``analyzers.host_gap``'s): A, B, delta,
    delta per token, share of the gap; buckets zero on both sides left out; ``total`` (bucket, label)
    last, bold."""
    t = Table(title=title)
    t.add_column("bucket", no_wrap=True)
    for c in heads:
        t.add_column(c, justify="right")
    for r in rep.buckets.iter_rows(named=True):
        name = r["bucket"]
        if name != total[0] and r["a_ns"] == 0 and r["b_ns"] == 0:
            continue
        t.add_row(
            total[1] if name == total[0] else labels[name],
            dur(r["a_ns"]),
            dur(r["b_ns"]),
            ("+" if r["delta_ns"] > 0 else "") + dur(r["delta_ns"]),
            "n/a" if r["delta_per_token_ns"] is None else dur(r["delta_per_token_ns"]),
            "n/a" if r["share"] is None else f"{100 * r['share']:.0f}%",
            style="bold" if name == total[0] else None,
        )
    return t


def document(rep: GapReport, a_run: str | None, b_run: str | None, by_rank: bool = False,
             hosts: Mapping[int, str | None] | None = None, view: RankView = ALL) -> dict[str, Any]:
    """The ``tracekit gap --json`` document of ``rep`` in its mode (``view.ranks``: the ``by_rank`` rows of
    those ranks, ``ranks_selected`` saying which)."""
    if view.ranks is None:
        return to_json(rep, a_run, b_run, by_rank, hosts)
    doc = to_json(replace(rep, by_rank=rep.by_rank.filter(pl.col("rank").is_in(list(view.ranks)))), a_run, b_run, by_rank, hosts)
    doc["ranks_selected"] = format_rank_list(view.ranks)
    return doc


def render_report(rep: GapReport, console: Console, by_rank: bool = False, view: RankView = ALL,
                  hosts: Mapping[int, str | None] | None = None) -> None:
    """Print ``rep`` in its mode (host mode: the host ranges compared)."""
    if rep.mode is Mode.HOST:
        from tracekit.render import host_attribute as render_host

        console.print(render_host.host_mode_line(None if rep.ranks is None else list(rep.ranks), "phases are compared"),
                      soft_wrap=True)
        render_host.render_host_gap(rep, console)
        return
    render(rep, console, by_rank, view, hosts)


def render_head(rep: GapReport, console: Console) -> None:
    """The sides, the statistic and the bucket table of a gap (GPU window, or host range in host mode)."""
    host = rep.mode is Mode.HOST
    an, bn = side_names(rep, tagged=True)

    def desc(x: Mapping[str, Any]) -> str:
        tok = "unknown" if x["mean_tokens"] is None else f"{x['mean_tokens']:.1f}"
        seq = "unknown" if x["mean_seq_len"] is None else f"{x['mean_seq_len']:,.0f}"
        return f"{x['instances']} instances on {x['ranks']} rank(s), {tok} tokens" + ("" if host else f", seq len {seq}")

    stat = rep.stat
    console.print(f"A = {an}: {desc(rep.a)}; B = {bn}: {desc(rep.b)}", soft_wrap=True)
    console.print(f"compared by {(HOST_STAT_NOTE if host else STAT_NOTE)[stat]}", soft_wrap=True)
    if host:
        from tracekit.render.host_attribute import HOST_HEADER

        console.print(bucket_table(
            rep, f"{an} vs {bn}: {HOST_HEADER}; {stat} per instance over all selected ranks",
            (f"{an} per instance", f"{bn} per instance", "delta per instance", "delta per token", "share of gap"),
            HOST_LABELS, ("host_range", "host range (= sum)")))
    else:
        console.print(bucket_table(rep, f"{an} vs {bn}: GPU window per instance ({stat} over instances of all selected ranks)",
                                   (an, bn, "delta", "delta/token", "share of gap"), LABELS, ("gpu_window", "GPU window")))


def rank_rows(rep: GapReport) -> list[dict[str, Any]]:
    """One row per rank: ``rank, a_ns, b_ns, delta_ns`` (the phases' window per instance, ``rep.stat``)."""
    br = rep.by_rank
    if br.height == 0:
        return []
    val = {(int(r), str(sd)): v for r, sd, v in br.select("rank", "side", "gpu_window_ns").iter_rows()}
    out = []
    for rank in sorted({int(r) for r in br.get_column("rank").to_list()}):
        va, vb = val.get((rank, "a")), val.get((rank, "b"))
        out.append({"rank": rank, "a_ns": va, "b_ns": vb, "delta_ns": None if va is None or vb is None else va - vb})
    return out


def render(rep: GapReport, console: Console, by_rank: bool = False, view: RankView = ALL,
           hosts: Mapping[int, str | None] | None = None) -> None:
    a, b = rep.a, rep.b
    an, bn = side_names(rep, tagged=True)
    stat = rep.stat
    render_head(rep, console)
    console.print(
        f"  launches per instance: {an} {a['eager_launches']:,.1f} eager + {a['graph_launches']:,.1f} graph "
        f"({int(a['graphed_instances'])}/{a['instances']} graphed); {bn} {b['eager_launches']:,.1f} eager + "
        f"{b['graph_launches']:,.1f} graph ({int(b['graphed_instances'])}/{b['instances']} graphed)",
        soft_wrap=True,
    )
    k = rep.kernels.head(12)
    if k.height:
        kt = Table(title=f"kernel families with the largest time difference (n x mean per instance; delta: {rep.stat} time per instance)")
        for c in ("family", "category", f"{an} n×mean", f"{bn} n×mean", "delta", "only in"):
            kt.add_column(c, justify="left" if c in ("family", "category") else "right")
        for r in k.iter_rows(named=True):
            kt.add_row(
                r["family"][:48],
                r["category"] or "",
                f"{r['a_count']:.1f}×{dur(r['a_mean_ns'])}" if r["a_count"] else "-",
                f"{r['b_count']:.1f}×{dur(r['b_mean_ns'])}" if r["b_count"] else "-",
                ("+" if r["delta_ns"] > 0 else "") + dur(r["delta_ns"]),
                {"a": an, "b": bn}.get(r["only"] or "", ""),
            )
        console.print(kt)
    seq = rep.seq
    if seq.height:
        st = Table(title=f"GPU window per instance ({stat}) at matched sequence length (buckets present on both sides)")
        for c in ("seq len", f"{an} n", an, f"{bn} n", bn, "delta"):
            st.add_column(c, justify="right")
        for r in seq.iter_rows(named=True):
            st.add_row(f"{r['seq_lo']:,}-{r['seq_hi'] - 1:,}", str(r["a_instances"]), dur(r["a_window_ns"]),
                       str(r["b_instances"]), dur(r["b_window_ns"]), dur(r["delta_ns"]))
        console.print(st)
    if by_rank:
        rt = Table(title=f"per rank: GPU window per instance ({stat})")
        cols = [Column("rank", lambda r: str(r["rank"])),
                Column(an, lambda r: dur(r["a_ns"]), lambda r: r["a_ns"], dur),
                Column(bn, lambda r: dur(r["b_ns"]), lambda r: r["b_ns"], dur),
                Column("delta", lambda r: "n/a" if r["delta_ns"] is None else dur(r["delta_ns"]), lambda r: r["delta_ns"], dur)]
        _, lines = rank_table(rt, rank_rows(rep), cols, 3, "high", view, hosts)
        console.print(rt)
        for line in ([] if (n := view.note()) is None else [n]) + lines:
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    total = rep.total_delta_ns
    tm = rep.timing
    if tm.get("timing_source") == "unprofiled":
        d = tm["delta_ns"]
        console.print(f"unprofiled [U] (capture timers, {tm['clock']}, median per instance): {an} {dur(tm['a_ns'])}, "
                      f"{bn} {dur(tm['b_ns'])}: {an} costs {('+' if d > 0 else '')}{dur(d)} more. The buckets above "
                      "are profiled (the profiler dilates host-bound time):", soft_wrap=True)
    elif tm:
        console.print(f"times are profiled only ({tm.get('why')})", soft_wrap=True)
    console.print(f"{an} costs {('+' if total > 0 else '')}{dur(total)} per instance ({stat}) more than {bn} on the GPU "
                  "(profiled window [W]); explained by:")
    for line in explanation_lines(rep):
        console.print(f"  {line}", soft_wrap=True)
    if rep.estimate is not None:
        from tracekit.render.estimate import CHANGE_METHOD, change_table

        prof = {str(r["bucket"]): r["delta_ns"] for r in rep.buckets.iter_rows(named=True)}
        console.print(change_table(f"{an} vs {bn} ({stat} per instance)", prof, rep.estimate, rep.total_delta_ns))
        console.print(f"  {CHANGE_METHOD}", soft_wrap=True, highlight=False, markup=False)
    for w in warning_lines(rep):
        console.print(Text.assemble(("warning:", "yellow"), f" {w}"), soft_wrap=True)
    from tracekit.render.attribute import TIMES_KEY

    console.print(TIMES_KEY, soft_wrap=True, highlight=False, markup=False)
    from tracekit.render import sol as render_sol

    for line in render_sol.gap_lines(rep.sol, an, bn, stat) or [x for x in [render_sol.why_line(rep.sol_why)] if x]:
        console.print(line, soft_wrap=True, highlight=False, markup=False)


__all__ = ["STAT_NOTE", "bucket_table", "document", "explanation_lines", "render", "render_report", "side_names", "to_json",
           "warning_lines"]
