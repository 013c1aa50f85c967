"""The unprofiled estimate of the buckets beside the measured table (``tracekit attribute``), in words:
the estimate is ``AttributionReport.estimates`` (``analyzers.analyses.phase_estimate``).

Method: ``analyzers.unprofiled.estimate_buckets`` and docs/attribution.md ("Unprofiled estimate").
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from tracekit.analyzers.reports import ChangeEstimate, PhaseEstimate
from tracekit.analyzers.unprofiled import Estimate
from tracekit.buckets import BUCKETS
from tracekit.render.attribute import LABELS, instance_where
from tracekit.render.units import dur

METHOD = ("estimate: the typical instance (median GPU window) with its kernel time as measured; launch overhead, "
          "GPU idle and the allreduce time spent waiting for another rank scaled by one factor so that the buckets add "
          "up to the unprofiled time per instance (capture timer median); docs/attribution.md section 10")


def estimate_json(pe: PhaseEstimate) -> dict[str, Any]:
    est, timer, inst = pe.estimate, pe.timer, pe.instance
    return {
        "estimate": True,
        "method": METHOD,
        "typical_instance": {"rank": inst["rank"], "cycle": inst.get("cycle"), "phase_id": inst.get("phase_id")},
        "unprofiled_ns": est.unprofiled_ns,
        "unprofiled_clock": timer.clock,
        "unprofiled_ranks": timer.ranks,
        "measured_window_ns": round(est.measured_window_ns),
        "window_ns": est.window_ns,
        "buckets_ns": est.buckets_ns,
        "kernel_ns": round(est.kernel_ns),
        "host_bound_ns": round(est.host_bound_ns),
        "scale": est.scale,
        "kernels_exceed_ns": round(est.kernels_exceed_ns),
    }


def estimate_table(pe: PhaseEstimate) -> Table:
    phase, inst, est, timer = pe.phase, pe.instance, pe.estimate, pe.timer
    where = instance_where(inst["rank"], inst.get("cycle"))
    t = Table(title=f"{phase}: unprofiled ESTIMATE beside the typical instance's measured buckets ({where}, median "
                    f"GPU window; host-bound part x{est.scale:.2f})", title_justify="left")
    t.add_column("bucket", no_wrap=True)
    t.add_column("measured (profiled)", justify="right")
    t.add_column("estimate (unprofiled)", justify="right")
    for b in BUCKETS:
        v = inst[f"{b}_ns"]
        if v == 0 and est.buckets_ns[b] == 0:
            continue
        t.add_row(LABELS[b], dur(v, digits=3), dur(est.buckets_ns[b], digits=3))
    t.add_row("GPU window / unprofiled time", dur(est.measured_window_ns, digits=3),
              f"{dur(est.window_ns, digits=3)} ({timer.clock} median)", style="bold")
    return t


def estimate_lines(est: Estimate) -> list[str]:
    lines = [f"  {METHOD}"]
    if est.kernels_exceed_ns > 0:
        lines.append(f"  the measured kernel work alone exceeds the unprofiled time by {dur(est.kernels_exceed_ns)}: "
                     "host-bound buckets set to 0 and the estimate is longer than the unprofiled time")
    return lines


CHANGE_METHOD = ("estimate: each side's buckets (in the comparison's statistic) with kernel time as measured and "
                 "launch overhead, GPU idle and the allreduce time waiting for another rank scaled by one factor "
                 "so that they add up to that side's unprofiled time (capture timer median); docs/attribution.md "
                 "section 10")


def change_json(est: ChangeEstimate) -> dict[str, Any]:
    """A change's unprofiled estimate in a document (gap: a = A, b = B; diff: a = new, b = old)."""
    return {"estimate": True, "method": CHANGE_METHOD, "a_buckets_ns": est.a.buckets_ns,
            "b_buckets_ns": est.b.buckets_ns, "delta_ns": est.delta_ns, "a_window_ns": est.a.window_ns,
            "b_window_ns": est.b.window_ns, "window_delta_ns": est.window_delta_ns}


def change_table(title: str, profiled: dict[str, float | None], est: ChangeEstimate, total: float | None) -> Table:
    """The change by bucket on both clocks: the profiled delta beside its unprofiled ESTIMATE."""
    t = Table(title=f"{title}: the change by bucket, profiled beside the unprofiled ESTIMATE", title_justify="left")
    t.add_column("bucket", no_wrap=True)
    t.add_column("delta (profiled)", justify="right")
    t.add_column("delta (unprofiled ESTIMATE)", justify="right")
    delta = est.delta_ns
    for b in BUCKETS:
        p = profiled.get(b)
        if not p and not delta[b]:
            continue
        t.add_row(LABELS[b], dur(p, signed=True), dur(delta[b], signed=True))
    t.add_row("window / unprofiled time", dur(total, signed=True), dur(est.window_delta_ns, signed=True), style="bold")
    return t
