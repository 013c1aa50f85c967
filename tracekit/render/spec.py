"""Render ``tracekit spec``: a rich table per batch size, plain-language lines, a JSON document."""

from __future__ import annotations

import math
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from tracekit.analyzers.reports import SpecReport
from tracekit.documents import SPEC
from tracekit.render import sol as render_sol
from tracekit.render.units import ms

PART_LABELS: Final = {
    "draft_ns": "draft",
    "verify_ns": "verify",
    "draft_extend_ns": "draft_extend",
    "host_between_ns": "host between phases",
}

CONVENTIONS: Final = {
    "tokens_per_cycle": "tokens a sequence emits per cycle: accepted draft tokens + 1 bonus token",
    "accept_len": "accepted draft tokens per request per cycle, bonus EXCLUDED (SGLang v1 accept_length_per_req_cpu)",
    "cycle_ns": "host time from the start of a cycle's draft to the start of the next cycle's draft, one rank; "
                "timing_source unprofiled: the median of the capture's unprofiled cycle timer (mean of the profiled "
                "cycles otherwise)",
    "timing_source": "unprofiled: cycle, parts and decode step from timers that ran without the profiler (or a "
                     "timing-mode run); profiled: from the profiled phase ranges",
    "profiled_cycle_ns": "mean cycle of the profiled window, kept beside the unprofiled one (null in a timing-mode run)",
    "break_even_tokens": "cycle_ns / decode_step_ns: tokens per cycle (bonus included) at which speculation equals plain decode",
    "needed_accept_prob": "per-position accept probability p with 1 + p + ... + p^k = needed_tokens (k = draft_tokens; unbounded chain when k is unknown)",
    "needed_cycle_ns": "cycle time giving target_tps per sequence at the measured tokens per cycle",
    "shrink_<part>": "time that part must fall to, others unchanged, for needed_cycle_ns; null: that part alone cannot",
    "tps": "tokens per second; per sequence unless named per batch",
}


def _ms(ns: float | None) -> str:
    return ms(ns, 2)


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def speed_words(ratio: float) -> str:
    """Speculation's tok/s over plain decode's, in words: 'x15.2 the speed of' beyond doubling, else a percentage."""
    if ratio >= 2.0:
        return f"{ratio:.1f}x as fast as"
    gain = ratio - 1.0
    return f"{abs(gain) * 100:.0f}% {'faster' if gain >= 0 else 'slower'} than"


def break_even_line(r: dict[str, Any]) -> str:
    """Plain decode's step, the break-even tokens/cycle and how the measured tokens/cycle compare. A break-even
    below 1 token/cycle (a cycle shorter than one decode step: the decode step is not comparable with the cycle,
    e.g. timed on another clock or batch) is said as such, not as a negative accept length."""
    be = r["break_even_tokens"]
    head = f"  plain decode {_ms(r['decode_step_ns'])}/step ({r['decode_tps_per_seq']:.1f} tok/s): "
    if be < 1.0:
        return (head + f"the cycle ({_ms(r['cycle_ns'])}) is shorter than one decode step, so speculation beats plain "
                "decode at any accept length (break-even below the 1 bonus token every cycle emits); check that "
                "the decode step and the cycle were timed alike (same batch size, same clock)")
    line = head + f"break-even {be:.2f} tokens/cycle ({be - 1:.2f} accepted draft tokens + bonus)"
    if r["tokens_per_cycle"] is not None:
        line += (f"; measured {r['tokens_per_cycle']:.2f}: speculation is {speed_words(r['tokens_per_cycle'] / be)} "
                 "plain decode")
    return line


def summary_lines(rep: SpecReport) -> list[str]:
    """Plain-language findings, one bucket after another."""
    table = rep.table
    lines: list[str] = []
    rank_note = f"rank {rep.rank} ({rep.rank_choice}{', largest mean cycle' if rep.rank_choice == 'slowest' else ''})"
    for r in table.iter_rows(named=True):
        bs = r["batch_size"]
        parts = " + ".join(f"{PART_LABELS[p]} {ms(r[p], 2, unit=False)}" for p in PART_LABELS)
        head = f"bs={bs}, {r['cycles']} cycles on {rank_note}: cycle {_ms(r['cycle_ns'])} = {parts} ms"
        lines.append(head)
        src = r.get("timing_source")
        if src == "unprofiled" and r.get("profiled_cycle_ns") and r["profiled_cycle_ns"] != r["cycle_ns"]:
            ratio = r["profiled_cycle_ns"] / r["cycle_ns"] if r["cycle_ns"] else float("nan")
            lines.append(f"  times unprofiled ({r['timing_basis']}); the profiled window's cycle was "
                         f"{ms(r['profiled_cycle_ns'])} (x{ratio:.2f})")
        elif src is not None:
            lines.append(f"  times {src} ({r['timing_basis']})")
        if r["tokens_per_cycle"] is not None:
            lines.append(
                f"  {r['tokens_per_cycle']:.2f} tokens/cycle (accept {r['accept_len']:.2f} + 1 bonus, {r['accept_len_source']})"
                f" -> {r['tps_per_seq']:.1f} tok/s per sequence, {r['tps_per_batch']:.1f} tok/s for the batch of {bs}"
            )
        else:
            lines.append("  accept lengths missing from the trace: pass --accept-len to get tok/s")
        if r["decode_step_ns"] is not None:
            lines.append(break_even_line(r))
        else:
            if rep.decode_source == "none":
                lines.append("  no decode step time (no decode phases, no --baseline): break-even unknown")
            else:
                lines.append(f"  no decode step at batch size {bs} in the {rep.decode_source.split(':')[0]}: break-even unknown")
        tgt = r["target_tps"]
        if tgt is not None:
            k = r["draft_tokens"]
            need = r["needed_tokens"]
            p = r["needed_accept_prob"]
            kdesc = f"k={k} draft tokens" if k is not None else "an unbounded draft chain (k unknown)"
            if p is None:
                lines.append(
                    f"  target {tgt:g} tok/s per sequence needs {need:.2f} tokens/cycle at this cycle time:"
                    f" unreachable with {kdesc} (at most {k + 1} tokens/cycle)"
                )
            else:
                lines.append(
                    f"  target {tgt:g} tok/s per sequence needs {need:.2f} tokens/cycle (accept length {need - 1:.2f} + bonus):"
                    f" per-position accept probability {p * 100:.1f}% with {kdesc}"
                )
            if r["needed_cycle_ns"] is not None:
                lines.append(
                    f"  or, at the current {r['tokens_per_cycle']:.2f} tokens/cycle, the cycle must fall"
                    f" from {_ms(r['cycle_ns'])} to {_ms(r['needed_cycle_ns'])}:"
                )
                for p_col, label in PART_LABELS.items():
                    new = r[f"shrink_{p_col}"]
                    if new is None:
                        lines.append(f"    {label} alone cannot get there ({_ms(r[p_col])} is less than the excess)")
                    elif new < r[p_col]:
                        lines.append(f"    {label} must fall from {_ms(r[p_col])} to {_ms(new)} (others unchanged)")
    return lines


def to_json(rep: SpecReport) -> dict[str, Any]:
    """The stable ``--json`` document."""
    return SPEC.make({
        "rank": rep.rank,
        "rank_choice": rep.rank_choice,
        "decode_source": rep.decode_source,
        "timing": rep.timing,
        "target_tps": rep.target_tps,
        "cycles_by_rank": [dict(c) for c in rep.cycles_by_rank],
        "conventions": CONVENTIONS,
        "buckets": rep.table.to_dicts(),
        "summary": summary_lines(rep),
        "sol": render_sol.spec_json(rep.sol),
        "sol_why": rep.sol_why,
    })


def render(rep: SpecReport, console: Console) -> None:
    """Print the table and the plain-language lines."""
    table = rep.table
    title = f"rank {rep.rank} ({rep.rank_choice}); decode step from {rep.decode_source}"
    unprof = table.height > 0 and "timing_source" in table.columns and table["timing_source"][0] == "unprofiled"
    how = f"unprofiled ({rep.timing})" if unprof else "mean per cycle of the profiled window"
    comp = Table(title=f"Cycle composition, {how}: {title}", title_justify="left")
    for col in ("bs", "cycles", "cycle ms", "draft ms", "verify ms", "extend ms", "host ms", "verify graphed"):
        comp.add_column(col, justify="right")
    eco = Table(title="Economics per sequence (tokens include the bonus token)", title_justify="left")
    for col in ("bs", "accept len", "tok/cycle", "tok/s seq", "tok/s batch", "decode ms", "break-even", "need tok", "need p"):
        eco.add_column(col, justify="right")
    for r in table.iter_rows(named=True):
        comp.add_row(
            str(r["batch_size"]),
            str(r["cycles"]),
            _num(r["cycle_ns"] / 1e6),
            _num(r["draft_ns"] / 1e6),
            _num(r["verify_ns"] / 1e6),
            _num(r["draft_extend_ns"] / 1e6),
            _num(r["host_between_ns"] / 1e6),
            "n/a" if r["graphed_share"] is None else f"{r['graphed_share'] * 100:.0f}%",
        )
        p = r["needed_accept_prob"]
        eco.add_row(
            str(r["batch_size"]),
            _num(r["accept_len"]),
            _num(r["tokens_per_cycle"]),
            _num(r["tps_per_seq"], 1),
            _num(r["tps_per_batch"], 1),
            _num(None if r["decode_step_ns"] is None else r["decode_step_ns"] / 1e6),
            _num(r["break_even_tokens"]),
            _num(r["needed_tokens"]),
            ("unreachable" if r["needed_tokens"] is not None else "n/a") if p is None else f"{p * 100:.1f}%",
        )
    console.print(comp)
    console.print(eco)
    console.print(
        "accept len: accepted draft tokens, bonus excluded; tok/cycle = accept len + 1; break-even = cycle / decode step"
        " in tokens/cycle; need tok / need p: tokens/cycle and per-position accept probability for --target-tps",
        highlight=False,
        markup=False,
    )
    for line in summary_lines(rep):
        console.print(line, highlight=False, markup=False)
    be = [r["break_even_tokens"] for r in table.sort("cycles", descending=True).head(1).iter_rows(named=True)] \
        if table.height else []
    for line in render_sol.spec_lines(rep.sol, be[0] if be else None) or [
            x for x in [render_sol.why_line(rep.sol_why)] if x]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
