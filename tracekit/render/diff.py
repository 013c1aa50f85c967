"""Render ``tracekit diff``: tables, a ranked plain-language explanation, a stable JSON document."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table

from tracekit.analyzers.reports import DiffReport
from tracekit.buckets import LABELS
from tracekit.documents import DIFF
from tracekit.ranklist import rank_noun
from tracekit.render import sol as render_sol
from tracekit.render.nccl import change_lines, mix_line
from tracekit.render.units import dur

SUB_BUCKETS: Final = ("allreduce_wait", "allreduce_transfer", "queue_delay", "overlapped_comm")
SUB_LABELS: Final = {"allreduce_wait": "allreduce: waiting for the last rank", "allreduce_transfer": "allreduce: transfer",
                     "queue_delay": "queue delay (beside)", "overlapped_comm": "overlapped comm (beside)"}


def bucket_label(bucket: str) -> str:
    """A diff bucket in the words of ``tracekit attribute`` (``tracekit.buckets.LABELS``)."""
    return LABELS.get(bucket) or SUB_LABELS.get(bucket) or bucket
KERNEL_LINES: Final = 5
KERNEL_ROWS: Final = 20
SMALL_SHARE: Final = 0.01  # explanation items under 1% of the phase's delta are summarised


def ranks_text(scopes: list[str]) -> str:
    """["0","1","2","5"] -> "ranks 0-2,5" (tracekit.ranklist); non-rank scopes by name."""
    nums = [s for s in scopes if s.isdigit()]
    named = [s for s in scopes if not s.isdigit()]
    out = [rank_noun(nums)] if nums else []
    out += named
    return ", ".join(out)


def _val(v: str | None) -> str:
    if v is None:
        return "absent"
    try:
        x = json.loads(v)
    except json.JSONDecodeError:
        return v
    return x if isinstance(x, str) else v


def manifest_lines(changes: pl.DataFrame) -> list[str]:
    """One line per collapsed manifest difference (``DiffReport.manifest_changes``), most important first."""
    lines = []
    for r in changes.iter_rows(named=True):
        r["old"], r["new"] = _short(r["old"]), _short(r["new"])
        where = ranks_text(r["scopes"])
        key = r["key"]
        if r["section"] == "rank":
            lines.append(f"{where}: present only in the {'old' if r['status'] == 'only_old' else 'new'} run")
        elif r["status"] == "only_old":
            lines.append(f"{r['section']}: {key} = {_val(r['old'])} in the old run, absent in the new ({where})")
        elif r["status"] == "only_new":
            lines.append(f"{r['section']}: {key} absent in the old run, = {_val(r['new'])} in the new ({where})")
        else:
            lines.append(f"{r['section']}: {key} changed {_val(r['old'])} -> {_val(r['new'])} ({where})")
    return lines


def _short(v: str | None, limit: int = 160) -> str | None:
    return v if v is None or len(v) <= limit else v[: limit - 3] + "..."


def _pct(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return ""
    return f", {(b - a) / a * 100:+.0f}%"


def _stat(ph: dict[str, object]) -> str:
    """The per-instance statistic a phase row compares (median unless the row says mean)."""
    return "mean" if ph.get("statistic") == "mean" else "median"


def explanation(rep: DiffReport) -> list[str]:
    """Ranked plain-language lines: per phase a headline and the sequence-length check,
    then the contributions ranked by size, then the manifest differences."""
    lines: list[str] = []
    for ph in rep.phases.iter_rows(named=True):
        p = ph["phase"]
        basis = "GPU window" if ph["time_basis"] == "gpu_window_ns" else "host time"
        st = _stat(ph)
        lines.append(
            f"{p}: {dur(ph[f'old_{st}_ns'])} -> {dur(ph[f'new_{st}_ns'])} per instance"
            f" ({dur(ph['delta_ns'], True)}{_pct(ph[f'old_{st}_ns'], ph[f'new_{st}_ns'])}; {basis},"
            f" {st} over {ph['old_instances']} old / {ph['new_instances']} new instances on"
            f" {ph['old_ranks']} / {ph['new_ranks']} ranks"
            + (f"; means {dur(ph['old_mean_ns'])} -> {dur(ph['new_mean_ns'])})" if st == "median" else ")")
        )
        seq_known = ph["old_seq_mean"] is not None and ph["new_seq_mean"] is not None
        if seq_known:
            seq = (
                f"sequence length old {ph['old_seq_min']}-{ph['old_seq_max']} (mean {ph['old_seq_mean']:.0f}),"
                f" new {ph['new_seq_min']}-{ph['new_seq_max']} (mean {ph['new_seq_mean']:.0f})"
            )
        else:
            seq = "sequence length unknown in at least one run (no seq facts): compared overall, not matched"
        fit = ""
        span = None if ph["fit_seq_min"] is None else ph["fit_seq_max"] - ph["fit_seq_min"]
        shift = None if not seq_known else abs(ph["new_seq_mean"] - ph["old_seq_mean"])
        phase_ns = max(abs(ph[f"old_{st}_ns"] or 0.0), abs(ph[f"new_{st}_ns"] or 0.0))
        too_big = ph["fit_shift_ns"] is not None and ph["extrapolated"] and abs(ph["fit_shift_ns"]) > phase_ns
        if too_big:  # an extrapolation larger than the phase itself says nothing about the phase
            fit = (
                f"a fit over sequence lengths {ph['fit_seq_min']:.0f}-{ph['fit_seq_max']:.0f} ({dur(ph['fit_slope_ns_per_token'])}/token)"
                f" extrapolated to the other run would put {dur(ph['fit_shift_ns'], True)} on the sequence-length shift,"
                f" more than the whole phase ({dur(phase_ns)}): it cannot say what the shift costs;"
                " capture both runs at the same sequence lengths"
            )
        elif ph["fit_shift_ns"] is not None and span is not None and shift is not None and ph["extrapolated"] and shift > 2 * span:
            fit = (
                f"a fit over sequence lengths {ph['fit_seq_min']:.0f}-{ph['fit_seq_max']:.0f} ({dur(ph['fit_slope_ns_per_token'])}/token)"
                f" cannot say what a shift of {shift:.0f} tokens costs (it would put {dur(ph['fit_shift_ns'], True)} on it):"
                " capture both runs at the same sequence lengths"
            )
        elif ph["fit_shift_ns"] is not None:
            fit = (
                f"the {ph['fit_basis']} run's fit ({dur(ph['fit_slope_ns_per_token'])}/token) puts"
                f" {dur(ph['fit_shift_ns'], True)} on the sequence-length shift alone"
                + (" (extrapolated beyond the fitted range)" if ph["extrapolated"] else "")
            )
        if ph["matched_delta_ns"] is not None:
            lines.append(
                f"  {seq}; at matched sequence length and batch size ({ph['matched_buckets']} buckets of"
                f" {ph['seq_width']} tokens, {ph['matched_new_share'] * 100:.0f}% of new instances) {p} changed"
                f" {dur(ph['matched_delta_ns'], True)}; the shift of the mix explains {dur(ph['mix_shift_ns'], True)}"
                f" (both {st}s of the same buckets)"
                + ("" if not ph.get("mix_residual_ns") else
                   f"; the overall {st}s differ from their buckets' weighted {st}s by {dur(ph['mix_residual_ns'], True)}"
                   " (not the mix: the spread of instances inside the buckets)")
                + (f"; {fit}" if fit else "")
            )
        elif seq_known and not ph["overlap"]:
            lines.append(
                f"  {seq}: the runs DO NOT OVERLAP in sequence length, no matched comparison"
                + (f"; {fit}" if fit else "; too few distinct lengths to fit the shift")
            )
        elif seq_known:
            lines.append(f"  {seq}: no bucket has both runs at the same batch size" + (f"; {fit}" if fit else ""))
        else:
            lines.append(f"  {seq}")
        ranked: list[tuple[float, str]] = []
        b = rep.buckets.filter(pl.col("phase") == p)
        sub = {r["bucket"]: r for r in b.filter(pl.col("bucket").is_in(list(SUB_BUCKETS))).iter_rows(named=True)}
        for r in b.filter(~pl.col("bucket").is_in(list(SUB_BUCKETS))).iter_rows(named=True):
            d = r["delta_ns"]
            if d is None or d == 0:
                continue
            text = f"{dur(d, True)} {bucket_label(r['bucket'])} ({dur(r['old_ns'])} -> {dur(r['new_ns'])} per instance, {r['basis']})"
            if r["bucket"] == "allreduce" and sub.get("allreduce_wait", {}).get("delta_ns") is not None:
                text += (
                    f" of which waiting for the slowest rank {dur(sub['allreduce_wait']['delta_ns'], True)},"
                    f" transfer {dur(sub['allreduce_transfer']['delta_ns'], True)}"
                )
            ranked.append((abs(d), text))
        og, ng = ph["old_graphed_share"], ph["new_graphed_share"]
        ol, nl = ph["old_launches_per_instance"], ph["new_launches_per_instance"]
        if (og != ng) or (ol != nl):
            lo = b.filter(pl.col("bucket") == "launch_overhead").get_column("delta_ns")
            weight = abs(lo[0]) if lo.len() and lo[0] is not None else 0.0
            g = "" if og is None or ng is None or og == ng else f"graphed {og * 100:.0f}% -> {ng * 100:.0f}% of instances; "
            ranked.append((
                weight,
                f"{g}launches per instance {ol:.1f} -> {nl:.1f} (eager {ph['old_eager_launches_per_instance']:.1f}"
                f" -> {ph['new_eager_launches_per_instance']:.1f}, graph {ph['old_graph_launches_per_instance']:.1f}"
                f" -> {ph['new_graph_launches_per_instance']:.1f})",
            ))
        k = rep.kernels.filter(pl.col("phase") == p).head(KERNEL_LINES)
        for r in k.iter_rows(named=True):
            d = r["delta_per_instance_ns"]
            if d == 0:
                continue
            if r["status"] == "appeared":
                text = f"kernel {r['family']} appeared: {r['new_count_per_instance']:.1f} per instance, {dur(r['new_mean_ns'])} each ({dur(d, True)} per instance, {st})"
            elif r["status"] == "vanished":
                text = f"kernel {r['family']} vanished: was {r['old_count_per_instance']:.1f} per instance, {dur(r['old_mean_ns'])} each ({dur(d, True)} per instance, {st})"
            else:
                text = (
                    f"kernel {r['family']}: {dur(d, True)} per instance ({st}; each launch {dur(r['old_mean_ns'])} -> {dur(r['new_mean_ns'])} on average,"
                    f" {r['old_count_per_instance']:.1f} -> {r['new_count_per_instance']:.1f} per instance)"
                )
            ranked.append((abs(d), text))
        ranked.sort(key=lambda t: -t[0])
        floor = SMALL_SHARE * abs(ph["delta_ns"] or 0.0)
        shown = [(w, t) for w, t in ranked if w >= floor or w == ranked[0][0]]
        lines += [f"  {i}. {t}" for i, (_, t) in enumerate(shown, 1)]
        if len(shown) < len(ranked):
            lines.append(f"  ({len(ranked) - len(shown)} smaller items under {dur(floor)} each left out; see the tables)")
        if not ranked and ph["time_basis"] == "host_ns":
            lines.append("  no GPU events in the phase in at least one run: host time compared; no buckets or kernels")
        elif not ranked:
            lines.append("  no difference in buckets, kernels or launches")
    pres = rep.presence
    if pres.height:
        for col, which in (("in_old", "old"), ("in_new", "new")):
            missing = pres.filter(~pl.col(col)).get_column("phase").to_list()
            if missing:
                lines.append(f"not in the {which} run (not compared): {', '.join(missing)}")
    ml = manifest_lines(rep.manifest_changes)
    if ml:
        lines.append(f"manifest differences ({len(ml)}), most telling first:")
        lines += [f"  - {m}" for m in ml]
    else:
        lines.append("manifests: no difference in environment, versions, GPU state, PCIe, world size or config")
    return lines


def to_json(rep: DiffReport, old: str, new: str) -> dict[str, Any]:
    from tracekit.render.estimate import change_json

    """The stable ``--json`` document: ``phases``, ``buckets`` (bucket -> {old_ns, new_ns,
    delta_ns, basis} for the first phase compared), ``buckets_by_phase``, ``seq_buckets``,
    ``kernels``, ``manifest_diff`` and ``explanation``; ``timing_source`` ("unprofiled" when every compared
    phase has capture timers in both manifests) and ``unprofiled`` (phase -> ``compare_timers``, a = old, b = new)."""
    by_phase: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rep.buckets.iter_rows(named=True):
        by_phase.setdefault(r["phase"], {})[r["bucket"]] = {
            "old_ns": r["old_ns"],
            "new_ns": r["new_ns"],
            "delta_ns": r["delta_ns"],
            "basis": r["basis"],
            "overall_old_ns": r["overall_old_ns"],
            "overall_new_ns": r["overall_new_ns"],
            "overall_delta_ns": r["overall_delta_ns"],
        }
    phases = rep.phases.get_column("phase").to_list()
    stats = rep.phases.get_column("statistic").unique().to_list() if "statistic" in rep.phases.columns else []
    return DIFF.make({
        "old": old,
        "new": new,
        "statistic": stats[0] if stats else "median",
        "phase": phases[0] if phases else None,
        "phases": rep.phases.to_dicts(),
        "presence": rep.presence.to_dicts(),
        "buckets": by_phase.get(phases[0], {}) if phases else {},
        "buckets_by_phase": by_phase,
        "seq_buckets": rep.seq_buckets.to_dicts(),
        "kernels": rep.kernels.to_dicts(),
        "manifest_diff": rep.manifest_diff.to_dicts(),
        "explanation": explanation(rep),
        "timing_source": "unprofiled" if rep.timing and all(t["timing_source"] == "unprofiled" for t in rep.timing.values())
        else "profiled",
        "unprofiled": {p: dict(t) for p, t in rep.timing.items()},
        "unprofiled_estimate": {p: change_json(e) for p, e in rep.estimates.items()},
        "nccl": nccl_doc(rep),
        "sol": render_sol.diff_json(rep.sol_old, rep.sol_new),
        "sol_why": rep.sol_why,
    })


def nccl_doc(rep: DiffReport) -> dict[str, Any]:
    """The document's ``nccl``: each run's rows (as in ``info``) and the ranks whose settings changed."""
    return {"old": [asdict(r) for r in rep.nccl_old.rows], "new": [asdict(r) for r in rep.nccl_new.rows],
            "changes": [{"rank": c.rank, "old": c.old, "new": c.new} for c in rep.nccl_changes]}


def render(rep: DiffReport, console: Console) -> None:
    """Print the tables and the explanation."""
    for ph in rep.phases.iter_rows(named=True):
        p = ph["phase"]
        tm = rep.timing.get(p)
        if tm and tm["timing_source"] == "unprofiled":
            console.print(f"{p} unprofiled [U] (capture timers, {tm['clock']}, median per instance): old {dur(tm['a_ns'])} -> "
                          f"new {dur(tm['b_ns'])} ({dur(tm['b_ns'] - tm['a_ns'], True)}); the tables below are profiled",
                          soft_wrap=True, highlight=False)
        elif tm:
            console.print(f"{p}: profiled times only ({tm['why']})", soft_wrap=True, highlight=False)
        t = Table(title=f"{p}: {_stat(ph)} per instance, all ranks (old -> new)", title_justify="left")
        for c in ("", "old", "new", "delta"):
            t.add_column(c, justify="left" if not c else "right")
        t.add_row("instances", str(ph["old_instances"]), str(ph["new_instances"]), "")
        tb = "GPU window" if ph["time_basis"] == "gpu_window_ns" else "host time"
        stat = _stat(ph)
        t.add_row(tb, dur(ph[f"old_{stat}_ns"]), dur(ph[f"new_{stat}_ns"]), dur(ph["delta_ns"], True))
        ho, hn = ph[f"old_host_{stat}_ns"], ph[f"new_host_{stat}_ns"]
        t.add_row("host range", dur(ho), dur(hn), dur(None if ho is None or hn is None else hn - ho, True))
        t.add_row("at matched seq/bs", dur(ph["matched_old_ns"]), dur(ph["matched_new_ns"]), dur(ph["matched_delta_ns"], True))
        t.add_row("seq len (mean)", "n/a" if ph["old_seq_mean"] is None else f"{ph['old_seq_mean']:.0f}",
                  "n/a" if ph["new_seq_mean"] is None else f"{ph['new_seq_mean']:.0f}", "")
        for c, label in (("launches", "launches"), ("eager_launches", "eager launches"), ("graph_launches", "graph launches")):
            a, b = ph[f"old_{c}_per_instance"], ph[f"new_{c}_per_instance"]
            t.add_row(label, f"{a:.1f}", f"{b:.1f}", f"{b - a:+.1f}")
        og, ng = ph["old_graphed_share"], ph["new_graphed_share"]
        t.add_row("graphed instances", "n/a" if og is None else f"{og * 100:.0f}%", "n/a" if ng is None else f"{ng * 100:.0f}%", "")
        console.print(t)
        bt = Table(title=f"{p}: time per instance by bucket ({stat}; {'matched seq/bs' if ph['matched_delta_ns'] is not None else 'overall'})", title_justify="left")
        for c in ("bucket", "old", "new", "delta"):
            bt.add_column(c, justify="left" if c == "bucket" else "right")
        for r in rep.buckets.filter(pl.col("phase") == p).iter_rows(named=True):
            if r["old_ns"] == 0 and r["new_ns"] == 0:
                continue
            bt.add_row(bucket_label(r["bucket"]), dur(r["old_ns"]), dur(r["new_ns"]), dur(r["delta_ns"], True))
        console.print(bt)
        sq = rep.seq_buckets.filter(pl.col("phase") == p)
        if sq.height > 1 or ph["old_seq_mean"] is not None:
            st = Table(title=f"{p} by batch size and sequence length ({_stat(ph)} per instance)", title_justify="left")
            for c in ("bs", "seq len", "old n", "new n", "old", "new", "delta"):
                st.add_column(c, justify="right")
            for r in sq.iter_rows(named=True):
                st.add_row(str(r["batch_size"]), "n/a" if r["seq_lo"] is None else f"{r['seq_lo']}-{r['seq_hi']}",
                           str(r["old_n"]), str(r["new_n"]), dur(r["old_ns"]), dur(r["new_ns"]), dur(r["delta_ns"], True))
            console.print(st)
        kt = Table(title=f"{p}: kernel families, largest change per instance first", title_justify="left")
        for c in ("family", "status", "count/inst old", "new", "mean old", "mean new", f"per inst delta ({stat})"):
            kt.add_column(c, justify="left" if c in ("family", "status") else "right")
        for r in rep.kernels.filter(pl.col("phase") == p).head(KERNEL_ROWS).iter_rows(named=True):
            kt.add_row(
                r["family"][:60], r["status"],
                "-" if r["old_count_per_instance"] is None else f"{r['old_count_per_instance']:.1f}",
                "-" if r["new_count_per_instance"] is None else f"{r['new_count_per_instance']:.1f}",
                dur(r["old_mean_ns"]), dur(r["new_mean_ns"]), dur(r["delta_per_instance_ns"], True),
            )
        console.print(kt)
        est = rep.estimates.get(p)
        if est is not None:
            from tracekit.render.estimate import CHANGE_METHOD, change_table

            prof = {str(r["bucket"]): r["delta_ns"] for r in rep.buckets.filter(pl.col("phase") == p).iter_rows(named=True)}
            console.print(change_table(f"{p}, old -> new ({stat} per instance)", prof, est, ph["delta_ns"]))
            console.print(f"  {CHANGE_METHOD}", soft_wrap=True, highlight=False, markup=False)
    for line in explanation(rep):
        console.print(line, highlight=False, markup=False)
    from tracekit.render.attribute import TIMES_KEY

    console.print(TIMES_KEY, soft_wrap=True, highlight=False, markup=False)
    nccl = nccl_doc(rep)
    if nccl["old"] or nccl["new"]:
        changed = change_lines(nccl["changes"])
        console.print(f"NCCL kernels (from their names), old: {mix_line(nccl['old'])}", highlight=False, markup=False)
        console.print(f"NCCL kernels (from their names), new: {mix_line(nccl['new'])}", highlight=False, markup=False)
        for line in changed or ["NCCL kernel settings: the same on every rank in both runs"]:
            console.print(line, highlight=False, markup=False, style="bold yellow" if changed else "")
    phases = rep.phases.get_column("phase").to_list()
    for line in render_sol.diff_lines(rep.sol_old, rep.sol_new, phases) or [
            x for x in [render_sol.why_line(rep.sol_why)] if x]:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
