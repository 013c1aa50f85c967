"""Render ``tracekit sol``: per phase the floor beside the measured time, per bucket, bytes by what is
read; the ``--json`` document. Reads a ``SolReport`` (analyzers/sol/report.py) only."""

from __future__ import annotations

from typing import Any, Final

from rich.console import Console
from rich.table import Table

from tracekit.analyzers.sol.report import PhaseSol, SolEconomics, SolReport, SolSplit
from tracekit.buckets import LABELS
from tracekit.documents import SOL
from tracekit.render.units import dur, ms

SOL_LABELS: Final = {**LABELS, "allreduce": "allreduce", "comm": "logits all-gather",
                     "launch_idle": "launch overhead + idle", "other": "everything else (not modelled)"}
READ_LABELS: Final = {
    "attention_weights": "attention weights", "kv_cache": "KV cache", "router": "router",
    "routed_experts": "routed experts", "shared_experts": "shared experts", "dense_mlp": "dense MLP",
    "lm_head": "lm_head",
}
DEFINITIONS: Final = {
    "floor_ns": "speed of light of the phase on one GPU, an ESTIMATE: max(bytes / (HBM bandwidth x achievable), "
                "FLOPs / (dense rate x achievable)) + allreduce chain + logits all-gather (docs/sol.md)",
    "pct_of_sol": "floor / measured x 100 (100 = at the floor); above 100 the floor is wrong",
    "measured_ns": "median instance: the unprofiled timer where the run has one (clock), else the profiled GPU window",
    "bucket measured_ns": "median per instance of the bucket's exclusive time in the profiled window (tracekit attribute)",
    "bytes_by_read": "bytes one GPU reads from HBM per forward, by what is read",
}


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:.1f}%" if p < 10 else f"{p:.0f}%"


def _gb(b: float) -> str:
    return f"{b / 1e9:.3f} GB" if b >= 1e8 else f"{b / 1e6:.2f} MB"


def header_lines(rep: SolReport) -> list[str]:
    g = rep.gpu
    lay = rep.layout
    lines = [
        f"model: {rep.model} ({rep.architecture}; {rep.quant}) from {rep.model_source}",
        f"GPU: {g.name} ({rep.gpu_source}): HBM {g.hbm_Bps / 1e9:.0f} GB/s, bf16 {g.flops['bf16'] / 1e12:.0f} TFLOP/s,"
        f" {g.achievable * 100:.0f}% achievable; {g.link} {g.link_Bps / 1e9:.0f} GB/s per direction",
        f"layout: TP {lay.tp}, {lay.engine} sharding rules" + (", DP-attention" if lay.dp_attention else "")
        + (f", EP {lay.ep}" if lay.ep > 1 else ""),
        f"allreduce: {rep.ring.source}: {rep.ring.detail}",
        "floors are estimates of the speed-of-light model (docs/sol.md); % of SOL = floor / measured",
    ]
    return lines


def phase_lines(p: PhaseSol) -> list[str]:
    f = p.floor
    s = f.step
    comm = (f" + {f.allreduce_count} allreduces x {dur(f.allreduce_ns / f.allreduce_count)} ({f.allreduce_bytes:,} B "
            f"each, {f.allreduce_bound}) + logits all-gather {dur(f.gather_ns)}") if f.allreduce_count else \
        " (one rank: no collectives)"
    head = (f"{p.phase}: batch {s.batch} x {s.tokens} token{'s' if s.tokens != 1 else ''} at context {s.seq_len}: "
            f"floor {ms(f.floor_ns, 2)} = max(HBM {ms(f.memory_ns, 2)} for {_gb(f.total_bytes)}/GPU, FLOPs "
            f"{ms(f.compute_ns, 2)}){comm}; bound by {f.bound}")
    out = [head]
    if p.measured_ns is not None:
        out.append(f"  measured {ms(p.measured_ns, 2)} ({p.clock}, median of {p.instances} instances): "
                   f"{_pct(p.pct)} of SOL ({p.measured_ns / f.floor_ns:.2f}x the floor)")
    if f.distinct_experts:
        out.append(f"  distinct routed experts per MoE layer: {f.distinct_experts:.1f} ({f.distinct_source})")
    if p.note:
        out.append(f"  {p.note}")
    if p.beaten:
        out.append(f"  WRONG FLOOR: the measured {ms(p.measured_ns, 3)} beats the floor {ms(f.floor_ns, 3)}: a floor a "
                   "measurement beats is wrong (model config, GPU spec, achievable fraction or sharding rules)")
    for b in p.buckets:
        if b.beaten:
            out.append(f"  WRONG FLOOR: {SOL_LABELS.get(b.bucket, b.bucket)} measured {dur(b.measured_ns)} beats its "
                       f"floor {dur(b.floor_ns)}")
    return out


def _tables(p: PhaseSol) -> tuple[Table, Table]:
    measured = p.measured_ns is not None
    t = Table(title=f"{p.phase}: per bucket", title_justify="left")
    t.add_column("bucket")
    t.add_column("floor", justify="right")
    t.add_column("bound")
    if measured:
        t.add_column("measured (median, profiled)", justify="right")
        t.add_column("% of SOL", justify="right")
    for b in p.buckets:
        row = [SOL_LABELS.get(b.bucket, b.bucket), dur(b.floor_ns), b.bound]
        if measured:
            row += [dur(b.measured_ns), _pct(b.pct) + (" WRONG FLOOR" if b.beaten else "")]
        t.add_row(*row)
    r = Table(title=f"{p.phase}: bytes per GPU by what is read", title_justify="left")
    r.add_column("read")
    r.add_column("bytes", justify="right")
    r.add_column("share", justify="right")
    total = p.floor.total_bytes or 1
    for k, v in p.floor.bytes_by_read.items():
        r.add_row(READ_LABELS[k], f"{v:,}", f"{100 * v / total:.1f}%")
    r.add_row("total", f"{p.floor.total_bytes:,}", "100%")
    return t, r


def ratio_lines(rep: SolReport) -> list[str]:
    """At the floor: a multi-token step against the one-token step; on a run, the SOL break-even."""
    out: list[str] = []
    one = next((p for p in rep.phases if p.floor.step.tokens == 1 and p.phase in ("decode", "1-token step")), None)
    if one is not None:
        for p in rep.phases:
            if p.phase == "verify" or (p.phase.endswith("-token step") and p.floor.step.tokens > 1):
                x = p.floor.floor_ns / one.floor.floor_ns
                out.append(f"at the floor, {p.phase} costs {x:.2f} x {one.phase} ({ms(p.floor.floor_ns, 2)} / "
                           f"{ms(one.floor.floor_ns, 2)})")
    be = rep.break_even_at_floor()
    if be is not None:
        x, parts = be
        out.append(f"SOL break-even: {x:.2f} tokens per cycle (bonus included) = floors of {' + '.join(parts)} / decode;"
                   " speculation pays at the floor above it")
    return out


def render(rep: SolReport, console: Console) -> None:
    for line in header_lines(rep):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    for n in rep.notes:
        console.print(f"note: {n}", highlight=False, markup=False, soft_wrap=True)
    for p in rep.phases:
        console.print()
        for line in phase_lines(p):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        t, r = _tables(p)
        console.print(t)
        console.print(r)
    for line in ratio_lines(rep):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if rep.beaten:
        console.print("WRONG FLOOR: a measurement beats its floor (see above): the model's inputs are wrong for this run",
                      highlight=False, markup=False, soft_wrap=True)


def _phase_json(p: PhaseSol) -> dict[str, Any]:
    f = p.floor
    s = f.step
    return {
        "phase": p.phase, "batch": s.batch, "tokens": s.tokens, "seq_len": s.seq_len,
        "floor_ns": f.floor_ns, "bound": f.bound, "memory_ns": f.memory_ns, "compute_ns": f.compute_ns,
        "allreduce_ns": f.allreduce_ns, "allreduce_count": f.allreduce_count, "allreduce_bytes": f.allreduce_bytes,
        "allreduce_bound": f.allreduce_bound, "gather_ns": f.gather_ns, "bytes": f.total_bytes,
        "bytes_by_read": dict(f.bytes_by_read), "flops": f.flops,
        "distinct_experts": f.distinct_experts, "distinct_source": f.distinct_source,
        "measured_ns": p.measured_ns, "clock": p.clock, "instances": p.instances, "pct_of_sol": p.pct,
        "floor_beaten": p.beaten, "note": p.note,
        "buckets": [{"bucket": b.bucket, "floor_ns": b.floor_ns, "bound": b.bound, "measured_ns": b.measured_ns,
                     "pct_of_sol": b.pct, "floor_beaten": b.beaten} for b in p.buckets],
    }


def to_json(rep: SolReport) -> dict[str, Any]:
    g = rep.gpu
    return SOL.make({
        "run": rep.run,
        "estimate": True,
        "model": {"name": rep.model, "source": rep.model_source, "architecture": rep.architecture, "quant": rep.quant},
        "gpu": {"name": g.name, "chosen_by": rep.gpu_source, "hbm_bytes_per_s": g.hbm_Bps,
                "flops_per_s": dict(g.flops), "achievable": g.achievable, "link": g.link,
                "link_bytes_per_s": g.link_Bps, "source": g.source},
        "layout": {"tp": rep.layout.tp, "engine": rep.layout.engine, "dp_attention": rep.layout.dp_attention,
                   "ep": rep.layout.ep},
        "allreduce_model": {"source": rep.ring.source, "alpha_ns": rep.ring.alpha_ns,
                            "beta_bytes_per_s": rep.ring.beta_Bps, "fixed_ns": rep.ring.fixed_ns,
                            "detail": rep.ring.detail},
        "phases": [_phase_json(p) for p in rep.phases],
        "floor_beaten": rep.beaten,
        "notes": list(rep.notes),
        "definitions": DEFINITIONS,
    })


# ---- "% of SOL" in the other analyses (attribute, gap, spec, diff) -------------------------------------------

SOL_NOTE: Final = "floors: estimates of tracekit sol's model, docs/sol.md"


def why_line(why: str | None) -> str | None:
    """One line where an analysis shows no "% of SOL"."""
    return None if why is None else f"% of SOL: not shown: {why} (tracekit sol RUN --model CONFIG --gpu NAME)"


def attribute_line(rep: SolReport | None, phase: str) -> str | None:
    """attribute's per-phase line: the phase's % of SOL and each modelled bucket's."""
    p = None if rep is None else rep.phase(phase)
    if p is None:
        return None
    parts = ", ".join(f"{SOL_LABELS.get(b.bucket, b.bucket)} {_pct(b.pct)}" for b in p.buckets
                      if b.floor_ns > 0 and b.measured_ns)
    line = (f"  % of SOL: {_pct(p.pct)} (floor {ms(p.floor.floor_ns, 2)}, an estimate, bound by {p.floor.bound}; "
            f"measured {ms(p.measured_ns, 2)}, {p.clock}); by bucket (profiled medians): {parts}")
    if p.beaten or any(b.beaten for b in p.buckets):
        line += "  WRONG FLOOR: a measurement beats it (tracekit sol RUN)"
    return line


def gap_lines(splits: tuple[SolSplit, ...], a: str, b: str, stat: str) -> list[str]:
    """gap's floor difference vs excess, the phase then each bucket with a difference."""
    if not splits:
        return []
    ph = next(s for s in splits if s.bucket == "phase")
    out = [f"speed of light, {SOL_NOTE}: {a} must cost {dur(ph.floor_delta_ns, signed=True)} more than {b} at the "
           f"floor (floors {ms(ph.floor_a_ns, 2)} vs {ms(ph.floor_b_ns, 2)}); of the {dur(ph.measured_delta_ns, signed=True)}"
           f" measured ({stat} per instance), {dur(ph.excess_ns, signed=True)} is excess"]
    for s in splits:
        if s.bucket in ("phase", "gpu_window") or (abs(s.measured_delta_ns) < 1 and s.floor_delta_ns == 0):
            continue
        label = LABELS.get(s.bucket, s.bucket)
        out.append(f"  {label}: {dur(s.measured_delta_ns, signed=True)} = floor difference "
                   f"{dur(s.floor_delta_ns, signed=True)} + excess {dur(s.excess_ns, signed=True)}")
    return out


def gap_json(splits: tuple[SolSplit, ...]) -> list[dict[str, Any]]:
    return [{"bucket": s.bucket, "floor_a_ns": s.floor_a_ns, "floor_b_ns": s.floor_b_ns,
             "floor_delta_ns": s.floor_delta_ns, "measured_delta_ns": s.measured_delta_ns, "excess_ns": s.excess_ns}
            for s in splits]


def spec_lines(econ: SolEconomics | None, measured_break_even: float | None) -> list[str]:
    """spec's figures at the floor beside the measured ones."""
    if econ is None:
        return []
    be = f" (measured {measured_break_even:.2f})" if measured_break_even is not None else ""
    out = [f"at the floor ({SOL_NOTE}): SOL break-even {econ.break_even_tokens:.2f} tokens per cycle{be} = "
           f"{' + '.join(econ.parts)} floors {ms(econ.cycle_floor_ns, 2)} / decode floor {ms(econ.decode_floor_ns, 2)}"]
    if econ.tps_at_floor is not None and econ.tokens_per_cycle is not None:
        out.append(f"  at the measured {econ.tokens_per_cycle:.2f} tokens per cycle, the floor gives "
                   f"{econ.tps_at_floor:.1f} tok/s per sequence (plain decode at its floor: "
                   f"{econ.decode_tps_at_floor:.1f} tok/s)")
    return out


def spec_json(econ: SolEconomics | None) -> dict[str, Any] | None:
    if econ is None:
        return None
    return {"estimate": True, "break_even_tokens": econ.break_even_tokens, "cycle_floor_ns": econ.cycle_floor_ns,
            "decode_floor_ns": econ.decode_floor_ns, "parts": list(econ.parts),
            "tokens_per_cycle": econ.tokens_per_cycle, "tps_per_seq_at_floor": econ.tps_at_floor,
            "decode_tps_at_floor": econ.decode_tps_at_floor}


def _step(p: PhaseSol) -> str:
    s = p.floor.step
    return f"batch {s.batch} x {s.tokens} tokens at context {s.seq_len}"


def diff_lines(old: SolReport | None, new: SolReport | None, phases: list[str]) -> list[str]:
    """diff: the floor of both runs per compared phase (a change of context or batch moves the floor, not the
    efficiency) and % of SOL of each."""
    if old is None or new is None:
        return []
    out = []
    for ph in phases:
        a, b = old.phase(ph), new.phase(ph)
        if a is None or b is None:
            continue
        out.append(f"{ph} floor ({SOL_NOTE}): old {ms(a.floor.floor_ns, 2)} ({_step(a)}) -> new "
                   f"{ms(b.floor.floor_ns, 2)} ({_step(b)}): {dur(b.floor.floor_ns - a.floor.floor_ns, signed=True)}; "
                   f"% of SOL {_pct(a.pct)} -> {_pct(b.pct)}")
    return out


def diff_json(old: SolReport | None, new: SolReport | None) -> dict[str, Any] | None:
    if old is None or new is None:
        return None
    return {"estimate": True, "phases": [
        {"phase": p.phase, "old_floor_ns": p.floor.floor_ns, "old_pct_of_sol": p.pct,
         "new_floor_ns": q.floor.floor_ns, "new_pct_of_sol": q.pct}
        for p in old.phases if (q := new.phase(p.phase)) is not None]}


def attribute_json(rep: SolReport | None) -> list[dict[str, Any]] | None:
    if rep is None:
        return None
    return [{"phase": p.phase, "floor_ns": p.floor.floor_ns, "bound": p.floor.bound, "measured_ns": p.measured_ns,
             "clock": p.clock, "pct_of_sol": p.pct, "floor_beaten": p.beaten or any(b.beaten for b in p.buckets),
             "buckets": {b.bucket: {"floor_ns": b.floor_ns, "measured_ns": b.measured_ns, "pct_of_sol": b.pct}
                         for b in p.buckets},
             "instances": [{"rank": i.rank, "cycle": i.cycle, "seq_len": i.seq_len, "floor_ns": i.floor_ns,
                            "window_ns": i.window_ns, "pct_of_sol": i.pct} for i in p.per_instance]}
            for p in rep.phases]
