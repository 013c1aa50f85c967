"""Unprofiled phase times from a capture's manifest, and the unprofiled estimate of the buckets.

A capture times every phase without the profiler during its warm-up cycles and
again inside the window (``collectors/timing.py``; manifest ``ranks[r].unprofiled``
and ``profiled``, or ``timed`` in timing mode). ``phase_timers`` reduces them
to one figure per phase: each rank's median per instance (its mean where an
older capture has no median), then the median over ranks. The main clock is the
GPU time between CUDA events around the phase on GPU ranks (``cuda_event``),
host time on CPU ranks (``perf_counter``).

``estimate_buckets`` is the unprofiled estimate of docs/attribution.md
("Unprofiled estimate"): kernel time is taken as measured, the host-bound
buckets (launch overhead, GPU idle, and the part of exposed allreduce spent
waiting for another rank) are scaled by one factor so that the buckets add up
to the unprofiled time of the phase. It is an estimate, labelled so wherever it
is shown.

Pure functions over the manifest dict and plain numbers.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Final

from tracekit.buckets import BUCKETS, GAP_BUCKETS
from tracekit.manifest import typed

HOST_BOUND: Final = GAP_BUCKETS  # launch overhead, idle; + the waiting part of exposed allreduce
WINDOWS: Final = ("profiled", "timed")


@dataclass(frozen=True)
class PhaseTimer:
    """One phase's capture timers, median over ranks of each rank's median per instance (ns)."""

    unprofiled_ns: float  # every rank with the timer
    window_ns: float | None  # the same timer inside the captured window (profiled, or timed in timing mode)
    paired_unprofiled_ns: float | None  # unprofiled, over the ranks that have both (the ratio's reference)
    window: str | None  # "profiled" | "timed" | None
    clock: str  # cuda_event | perf_counter
    ranks: int
    # the reference's two blocks (unprofiled cycles before / after the window; manifest ``reference``), median
    # over the ranks that have both; None for captures that timed the reference before the window only
    before_ns: float | None = None
    after_ns: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.window_ns is None or not self.paired_unprofiled_ns:
            return None
        return self.window_ns / self.paired_unprofiled_ns


def _typical(st: Any) -> float | None:
    if not isinstance(st, dict):
        return None
    v = st.get("median_ns") or st.get("mean_ns")
    return float(v) if v else None


def phase_timers(manifest: dict[str, Any] | None, ranks: list[int] | None = None) -> dict[str, PhaseTimer]:
    """Per phase with an unprofiled timer on at least one (selected) rank: ``PhaseTimer``."""
    per: dict[str, tuple[list[float], list[tuple[float, float]], str | None, str]] = {}
    spread: dict[str, list[tuple[float, float]]] = {}
    for r, sec in typed(manifest or {}).ranks.items():
        if ranks is not None and int(r) not in ranks:
            continue
        un = sec.unprofiled or {}
        windows = {"profiled": sec.profiled, "timed": sec.timed}
        win_name = next((w for w in WINDOWS if windows[w] is not None), None)
        win = (windows[win_name] or {}) if win_name else {}
        for ph, st in un.items():
            u = _typical(st)
            if u is None:
                continue
            a, b, _, _ = per.setdefault(ph, ([], [], win_name, str(st.get("clock", "?"))))
            a.append(u)
            w = _typical(win.get(ph))
            if w is not None:
                b.append((u, w))
            ref = (sec.reference or {}).get(ph)
            if isinstance(ref, dict) and ref.get("before_ns") and ref.get("after_ns"):
                spread.setdefault(ph, []).append((float(ref["before_ns"]), float(ref["after_ns"])))
    return {
        ph: PhaseTimer(statistics.median(a), statistics.median(w for _, w in b) if b else None,
                       statistics.median(u for u, _ in b) if b else None, wn if b else None, clock, len(a),
                       statistics.median(x for x, _ in spread[ph]) if ph in spread else None,
                       statistics.median(y for _, y in spread[ph]) if ph in spread else None)
        for ph, (a, b, wn, clock) in per.items()
    }


@dataclass(frozen=True)
class Estimate:
    """Buckets of one phase (ns per instance) scaled to its unprofiled time; see the module doc."""

    buckets_ns: dict[str, int]  # sums to window_ns exactly
    window_ns: int  # sum of the estimated buckets: unprofiled_ns, unless kernels alone exceed it or nothing is host bound
    unprofiled_ns: int  # the unprofiled time the buckets were fitted to
    measured_window_ns: float
    kernel_ns: float  # measured work kept as is
    host_bound_ns: float  # launch overhead + idle + allreduce waiting, as measured
    scale: float  # factor applied to the host-bound part (0 when kernels alone exceed the unprofiled time)
    kernels_exceed_ns: float  # > 0: measured kernel work exceeds the unprofiled time by this much


def estimate_buckets(buckets_ns: dict[str, float], allreduce_wait_ns: float, unprofiled_ns: float) -> Estimate:
    """Scale the host-bound buckets of one phase so that all buckets sum to ``unprofiled_ns``.

    ``buckets_ns``: measured buckets per instance (every BUCKETS name); ``allreduce_wait_ns``: measured allreduce
    kernel time waiting for the last rank per instance (its exposed part, at most the allreduce bucket, is host
    bound: the other rank was late). Integer result; rounding goes to the largest host-bound bucket."""
    wait = max(0.0, min(allreduce_wait_ns, buckets_ns.get("allreduce", 0.0)))
    host = {b: float(buckets_ns.get(b, 0.0)) for b in HOST_BOUND}
    host["allreduce_wait"] = wait
    h = sum(host.values())
    measured = float(sum(buckets_ns.get(b, 0.0) for b in BUCKETS))
    k = measured - h
    target = round(unprofiled_ns)
    exceed = max(0.0, k - target)
    s = 0.0 if h <= 0 else max(0.0, (target - k) / h)
    out: dict[str, float] = {}
    for b in BUCKETS:
        v = float(buckets_ns.get(b, 0.0))
        if b in HOST_BOUND:
            out[b] = v * s
        elif b == "allreduce":
            out[b] = (v - wait) + wait * s
        else:
            out[b] = v
    ints = {b: round(v) for b, v in out.items()}
    rest = target - sum(ints.values())
    if rest and exceed == 0 and h > 0:
        top = max(("launch_overhead", "idle", "allreduce"), key=lambda b: out[b])
        ints[top] += rest
    return Estimate(ints, sum(ints.values()), target, measured, k, h, s, exceed)


def compare_timers(a_manifest: dict[str, Any] | None, a_phase: str, b_manifest: dict[str, Any] | None, b_phase: str,
                   ranks: list[int] | None = None) -> dict[str, Any]:
    """Phase A against phase B on their capture timers (``gap``, ``diff``): ``timing_source`` "unprofiled" with
    a_ns, b_ns, delta_ns (median per instance, median over ranks; same clock on both sides), else "profiled" with
    the reason (the caller's profiled comparison then stands alone)."""
    ta = phase_timers(a_manifest, ranks).get(a_phase)
    tb = phase_timers(b_manifest, ranks).get(b_phase)
    if ta is None or tb is None:
        missing = " and ".join(p for p, t in ((a_phase, ta), (b_phase, tb)) if t is None)
        return {"timing_source": "profiled", "why": f"no unprofiled timer for {missing} in the manifest"}
    if ta.clock != tb.clock:
        return {"timing_source": "profiled", "why": f"unprofiled timers on different clocks ({ta.clock} vs {tb.clock})"}
    return {
        "timing_source": "unprofiled",
        "clock": ta.clock,
        "statistic": "median per instance on each rank, median over ranks (capture warm-up timers)",
        "a_ns": ta.unprofiled_ns,
        "b_ns": tb.unprofiled_ns,
        "delta_ns": ta.unprofiled_ns - tb.unprofiled_ns,
        "a_dilation": ta.ratio,
        "b_dilation": tb.ratio,
        "ranks": min(ta.ranks, tb.ranks),
    }


def dilation_table(manifest: dict[str, Any] | None) -> dict[str, dict[str, float]]:
    """Per phase: unprofiled and profiled time per instance from the capture manifest (``phase_timers``: each
    rank's median per instance, then the median over ranks), their ratio, and the reference's two blocks."""
    return {ph: {"unprofiled_ns": t.paired_unprofiled_ns, "profiled_ns": t.window_ns, "ratio": t.ratio,
                 **({"before_ns": t.before_ns, "after_ns": t.after_ns}
                    if t.before_ns is not None and t.after_ns is not None else {})}
            for ph, t in phase_timers(manifest).items()
            if t.ratio is not None and t.paired_unprofiled_ns is not None and t.window_ns is not None}


__all__ = ["Estimate", "PhaseTimer", "compare_timers", "dilation_table", "estimate_buckets", "phase_timers"]
