"""Every analysis the CLI, the HTML report and ``tracekit.Run`` show: one call, one typed report.

``attribute``, ``gap``, ``spec``, ``diff`` and ``ranks`` take event tables and manifests (a loaded
run's ``events`` and ``manifest``) and return the reports of ``analyzers.reports``, with the mode,
the unprofiled timers, the dilation, the estimates and the timer comparisons already computed:
a caller renders the report and adds nothing to it. Errors are the analyzers' ``AnalysisError``
(``side`` "A"/"B" for two runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import polars as pl

from .buckets import BUCKETS, DEFAULT_LAUNCH_LATENCY_NS
from .reports import (
    AttributionReport,
    ChangeEstimate,
    DiffReport,
    GapReport,
    Mode,
    PhaseEstimate,
    RanksReport,
    SpecReport,
    detect_mode,
)
from .robust import nearest_rank
from .sol.report import SolReport, SolSplit
from .stragglers import MIN_SKEW_NS
from .unprofiled import (
    Estimate,
    PhaseTimer,
    compare_timers,
    dilation_table,
    estimate_buckets,
    phase_timers,
)

Manifest = Mapping[str, Any]


def typical_instance(instances: pl.DataFrame, phase: str, rank: int | None = None) -> dict[str, Any] | None:
    """The instance of ``phase`` (on ``rank``; every rank when None) with the median GPU window (the lower one of
    an even count), as a row dict; None when there is none with a GPU window."""
    sel = instances.filter((pl.col("phase") == phase) & (pl.col("gpu_window_ns") > 0))
    if rank is not None:
        sel = sel.filter(pl.col("rank") == rank)
    if sel.is_empty():
        return None
    return sel.sort(["gpu_window_ns", "rank", "host_start_ns"]).row((sel.height - 1) // 2, named=True)


def instance_estimate(inst: Mapping[str, Any] | None, timer: PhaseTimer | None) -> Estimate | None:
    """The estimate from one instance row (``typical_instance``), or None without one or without a timer."""
    if timer is None or inst is None or inst["gpu_window_ns"] <= 0:
        return None
    per = {b: float(inst[f"{b}_ns"]) for b in BUCKETS}
    return estimate_buckets(per, float(inst["allreduce_wait_ns"] or 0), timer.unprofiled_ns)


def phase_estimate(instances: pl.DataFrame, phase: str, rank: int | None, manifest: Manifest) -> PhaseEstimate | None:
    """The unprofiled estimate of ``phase`` on ``rank`` (every rank when None): its typical instance's buckets
    scaled to the phase's unprofiled timer on those ranks; None without a timer or a GPU window."""
    timer = phase_timers(dict(manifest), None if rank is None else [rank]).get(phase)
    inst = typical_instance(instances, phase, rank)
    est = instance_estimate(inst, timer)
    if est is None or inst is None or timer is None:
        return None
    return PhaseEstimate(phase, rank, inst, timer, est)


def _estimates(by_rank: pl.DataFrame, by_phase: pl.DataFrame, instances: pl.DataFrame,
               manifest: Manifest) -> tuple[PhaseEstimate, ...]:
    keys: list[tuple[str, int | None]] = [(r["phase"], int(r["rank"])) for r in by_rank.iter_rows(named=True)]
    keys += [(r["phase"], None) for r in by_phase.iter_rows(named=True)]
    return tuple(e for p, rk in keys if (e := phase_estimate(instances, p, rk, manifest)) is not None)


def change_estimate(a_buckets: Mapping[str, float | None], a_wait: float | None, a_timer: PhaseTimer | None,
                    b_buckets: Mapping[str, float | None], b_wait: float | None,
                    b_timer: PhaseTimer | None) -> ChangeEstimate | None:
    """Both sides of a change scaled to their unprofiled timers (``ChangeEstimate``); None unless both have a
    timer on the same clock."""
    if a_timer is None or b_timer is None or a_timer.clock != b_timer.clock:
        return None

    def one(bk: Mapping[str, float | None], wait: float | None, timer: PhaseTimer) -> Estimate:
        return estimate_buckets({b: float(bk.get(b) or 0.0) for b in BUCKETS}, float(wait or 0.0), timer.unprofiled_ns)

    return ChangeEstimate(one(a_buckets, a_wait, a_timer), one(b_buckets, b_wait, b_timer))


def attribute(events: pl.DataFrame, manifest: Manifest, phase: str | None = None, rank: int | None = None, *,
              launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> AttributionReport:
    """``tracekit attribute``: the run's mode decided once (``detect_mode``), its analyzer, the clock facts."""
    sel = None if rank is None else (rank,)
    mode = detect_mode([events], manifest, sel)
    man = dict(manifest)
    if mode is Mode.TIMING:
        from .timing_view import timing_report

        t = timing_report(events, phase, rank)
        return AttributionReport(mode, t["instances"], t["by_rank"], manifest, ranks=sel)
    if mode is Mode.HOST:
        from .host_attribution import host_report

        h = host_report(events, phase, rank)
        return AttributionReport(mode, h["instances"], h["by_rank"], by_phase=h["by_phase"], by_seq=h["by_seq"],
                                 outliers=h["outliers"], **_common(manifest, sel))
    from .attribution import attribute_report
    from .sol.run import try_sol

    g = attribute_report(events, phase, rank, launch_latency_ns=launch_latency_ns)
    sol, sol_why = try_sol(events, man, instances=g["instances"])
    return gpu_attribution(g, manifest, sel, sol, sol_why)


def _common(manifest: Manifest, sel: tuple[int, ...] | None) -> dict[str, Any]:
    """The clock facts every attribution report carries."""
    man = dict(manifest)
    timers = phase_timers(man)
    return {"manifest": manifest, "ranks": sel, "has_timers": bool(timers), "dilation": dilation_table(man),
            "timers": timers}


def gpu_attribution(g: Mapping[str, pl.DataFrame], manifest: Manifest, sel: tuple[int, ...] | None,
                    sol: Any, sol_why: str | None) -> AttributionReport:
    """The GPU-mode ``AttributionReport`` from ``attribution_tables``' frames and the run's "% of SOL"."""
    wt = g["whole_trace"]
    return AttributionReport(
        Mode.GPU, g["instances"], g["by_rank"], by_phase=g["by_phase"], by_seq=g["by_seq"], stragglers=g["stragglers"],
        outliers=g["outliers"], issues=tuple(g["issues"].get_column("issue").to_list()),
        whole_trace=bool(wt.height and wt.item(0, 0)),
        estimates=_estimates(g["by_rank"], g["by_phase"], g["instances"], manifest), sol=sol, sol_why=sol_why,
        **_common(manifest, sel))


def gap(a_events: pl.DataFrame, a_manifest: Manifest | None, b_events: pl.DataFrame | None = None,
        b_manifest: Manifest | None = None, *, a: str = "verify", b: str = "decode", rank: int | None = None,
        launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS, stat: str = "median") -> GapReport:
    """``tracekit gap``: phase ``a`` of the run against phase ``b`` (of ``b_events`` when given, else the same
    run), GPU windows or (no GPU events on either side) host ranges, with the capture timers' comparison."""
    sel = None if rank is None else (rank,)
    mode = detect_mode([a_events, b_events if b_events is not None else a_events], None, sel)
    bm = b_manifest if b_events is not None else a_manifest
    timing = gap_timing(a_manifest, bm, a, b, sel)
    if mode is Mode.HOST:  # CPU runs: compare the phases' host time instead of GPU windows
        from .host_gap import host_gap_report

        h = host_gap_report(a_events, b_events, a=a, b=b, rank=rank, stat=stat)
        return GapReport(mode, stat, h["a"], h["b"], h["buckets"], h["total_delta_ns"], h["seq_check"], timing,
                         host_ranked=h["explanations"], ranks=sel)
    from .gap import gap_report

    g = gap_report(a_events, b_events, a=a, b=b, rank=rank, launch_latency_ns=launch_latency_ns, stat=stat)
    splits, why = _gap_sol(a_events, a_manifest, b_events, bm, a, b, g["buckets"], float(g["total_delta_ns"]))
    return gpu_gap(g, stat, timing, a_manifest, bm, a, b, sel, splits, why)


def gap_timing(a_manifest: Manifest | None, b_manifest: Manifest | None, a: str, b: str,
               sel: tuple[int, ...] | None) -> Any:
    """gap's comparison of the capture timers of phase ``a`` (run A) and ``b`` (run B's manifest)."""
    return compare_timers(None if a_manifest is None else dict(a_manifest), a,
                          None if b_manifest is None else dict(b_manifest), b, None if sel is None else list(sel))


def gpu_gap(g: Mapping[str, Any], stat: str, timing: Any, a_manifest: Manifest | None, b_manifest: Manifest | None,
            a: str, b: str, sel: tuple[int, ...] | None, splits: tuple[SolSplit, ...], why: str | None) -> GapReport:
    """The GPU-mode ``GapReport`` from ``gap_tables``' result, the timers' comparison and the SOL split."""
    bm = b_manifest
    rl = None if sel is None else list(sel)
    sa, sb = g["a"], g["b"]
    est = change_estimate({k: sa[f"{k}_ns"] for k in BUCKETS}, sa["allreduce_wait_ns"],
                          phase_timers(None if a_manifest is None else dict(a_manifest), rl).get(a),
                          {k: sb[f"{k}_ns"] for k in BUCKETS}, sb["allreduce_wait_ns"],
                          phase_timers(None if bm is None else dict(bm), rl).get(b))
    return GapReport(Mode.GPU, stat, sa, sb, g["buckets"], g["total_delta_ns"], g["seq_check"], timing,
                     explanations=tuple(g["explanations"]), estimate=est, kernels=g["kernels"], seq=g["seq"],
                     by_rank=g["by_rank"], ranks=sel, sol=splits, sol_why=why)


def _gap_sol(a_events: pl.DataFrame, a_manifest: Manifest | None, b_events: pl.DataFrame | None,
             b_manifest: Manifest | None, a: str, b: str, buckets: pl.DataFrame,
             total_delta: float, a_instances: pl.DataFrame | None = None,
             b_instances: pl.DataFrame | None = None) -> tuple[tuple[SolSplit, ...], str | None]:
    """gap's floor difference / excess split (analyzers/sol); (), why not, where the runs do not say enough.
    ``*_instances``: each run's whole attribution instances when the caller has them (``try_sol``)."""
    from .sol.report import sol_splits
    from .sol.run import try_sol

    sol_a, why = try_sol(a_events, None if a_manifest is None else dict(a_manifest), instances=a_instances)
    sol_b = sol_a
    if b_events is not None and sol_a is not None:
        sol_b, why = try_sol(b_events, None if b_manifest is None else dict(b_manifest), instances=b_instances)
    if sol_a is None or sol_b is None:
        return (), why
    pa, pb = sol_a.phase(a), sol_b.phase(b)
    if pa is None or pb is None:
        return (), f"no floor for {' and '.join(p for p, x in ((a, pa), (b, pb)) if x is None)}"
    delta = {str(r["bucket"]): float(r["delta_ns"]) for r in buckets.iter_rows(named=True)}
    return sol_splits(pa, pb, delta, total_delta), None


def spec(events: pl.DataFrame, manifest: Manifest | None, *, baseline: pl.DataFrame | None = None,
         baseline_manifest: Manifest | None = None, baseline_tps: float | None = None,
         target_tps: float | None = None, rank: int | None = None, draft_tokens: int | None = None,
         accept_len: float | None = None, sol: tuple[SolReport | None, str | None] | None = None) -> SpecReport:
    """``tracekit spec``: speculation economics on the run's unprofiled timers where its manifest has them.
    ``sol``: the run's ``try_sol`` when the caller has it (a run read rank by rank: ``events`` are then its
    phase rows, ``phase_rows.phase_rows``, all that the cycles and decode steps read)."""
    from .spec import spec_report

    table, ctx = spec_report(events, baseline=baseline, baseline_tps=baseline_tps, target_tps=target_tps, rank=rank,
                             draft_tokens=draft_tokens, accept_len=accept_len,
                             manifest=None if manifest is None else dict(manifest),
                             baseline_manifest=None if baseline_manifest is None else dict(baseline_manifest))
    from .sol.report import economics_at_floor
    from .sol.run import try_sol

    cyc: Any = ctx["cycles_by_rank"]
    tps: Any = ctx["target_tps"]
    floor, why = try_sol(events, None if manifest is None else dict(manifest)) if sol is None else sol
    econ = None
    if floor is not None:
        rows = table.sort("cycles", descending=True).head(1).to_dicts() if "cycles" in table.columns else []
        tpc = rows[0].get("tokens_per_cycle") if rows else None
        econ = economics_at_floor(floor, None if tpc is None else float(tpc))
        why = None if econ is not None else "no verify and decode floors in the run"
    return SpecReport(table, int(str(ctx["rank"])), str(ctx["rank_choice"]), str(ctx["decode_source"]),
                      str(ctx["timing"]), None if tps is None else float(tps), tuple(cyc), econ, why)


def diff(old_events: pl.DataFrame, old_manifest: Manifest, new_events: pl.DataFrame, new_manifest: Manifest, *,
         phase: str | None = "verify", seq_width: int | None = None, stat: str = "median") -> DiffReport:
    """``tracekit diff OLD NEW``: the run diff, the manifests' differences and each phase's capture timers."""
    from .diff import diff_runs
    from .nccl_mix import nccl_mix
    from .sol.run import try_sol

    view = diff_runs(old_events, new_events, phase, seq_width, stat)
    om, nm = dict(old_manifest), dict(new_manifest)
    sol_old, why = try_sol(old_events, om)
    sol_new, why_new = try_sol(new_events, nm) if sol_old is not None else (None, None)
    return diff_report(view, om, nm, stat, (sol_old, sol_new, why or why_new), nccl_mix(old_events),
                       nccl_mix(new_events))


def diff_report(view: Mapping[str, pl.DataFrame], old_manifest: Manifest, new_manifest: Manifest, stat: str,
                sol: tuple[Any, Any, str | None], mix_old: Any, mix_new: Any) -> DiffReport:
    """The ``DiffReport`` from ``diff_tables``' view, the manifests, the runs' SOL and NCCL mixes."""
    from .manifest_diff import manifest_diff
    from .nccl_mix import mix_changes

    om, nm = dict(old_manifest), dict(new_manifest)
    timing = {p: compare_timers(om, p, nm, p) for p in view["phases"].get_column("phase").to_list()}
    rep = DiffReport.from_view(dict(view), manifest_diff(om, nm), timing, stat, sol)
    return replace(rep, nccl_old=mix_old, nccl_new=mix_new, nccl_changes=tuple(mix_changes(mix_old, mix_new)),
                   estimates=_diff_estimates(view["buckets"], om, nm))


def _diff_estimates(buckets: pl.DataFrame, old_manifest: dict[str, Any],
                    new_manifest: dict[str, Any]) -> dict[str, ChangeEstimate]:
    """Per compared phase: the unprofiled estimate of its bucket change (a = new, b = old), where both runs
    have the phase's timer."""
    t_old, t_new = phase_timers(old_manifest), phase_timers(new_manifest)
    out: dict[str, ChangeEstimate] = {}
    for p in buckets.get_column("phase").unique(maintain_order=True).to_list():
        rows = {r["bucket"]: r for r in buckets.filter(pl.col("phase") == p).iter_rows(named=True)}
        wait = rows.get("allreduce_wait", {})
        est = change_estimate({k: rows.get(k, {}).get("new_ns") for k in BUCKETS}, wait.get("new_ns"), t_new.get(p),
                              {k: rows.get(k, {}).get("old_ns") for k in BUCKETS}, wait.get("old_ns"), t_old.get(p))
        if est is not None:
            out[p] = est
    return out


def ranks(events: pl.DataFrame, manifest: Manifest, *, min_skew_ns: int = MIN_SKEW_NS,
          launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> RanksReport:
    """``tracekit ranks``: who arrives last at collectives, what it did before, each rank's GPU state."""
    from .stragglers import stragglers

    return ranks_report(stragglers(events, min_skew_ns, launch_latency_ns=launch_latency_ns), manifest)


def ranks_report(v: Mapping[str, pl.DataFrame], manifest: Manifest) -> RanksReport:
    """The ``RanksReport`` of a straggler view (``stragglers.stragglers`` / ``straggler_tables``)."""
    from .stragglers import rank_state

    coll = v["collectives"]
    skew = [int(x) for x in coll.get_column("skew_ns").drop_nulls()]
    med = nearest_rank(skew, 0.5)
    return RanksReport(v["ranks"], v["kernels"], coll, v["late"], rank_state(dict(manifest)),
                       with_last_rank=coll.filter(pl.col("last_rank").is_not_null()).height,
                       skew_median_ns=None if med is None else int(med), skew_max_ns=max(skew) if skew else None)


__all__ = ["attribute", "diff", "diff_report", "gap", "gap_timing", "gpu_attribution", "gpu_gap", "instance_estimate", "phase_estimate", "ranks",
           "ranks_report", "spec", "typical_instance"]
