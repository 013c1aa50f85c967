"""One line on a run that is not whole: missing ranks (partial), an interrupted capture, 1 us time stamps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracekit.manifest import typed
from tracekit.ranklist import rank_noun, ranks_by_reason


def missing_line(path: str, manifest: Mapping[str, Any]) -> str | None:
    """``RUN: partial run: rank 1 missing (killed by SIGKILL ...)`` or None when every rank is there."""
    missing = typed(manifest).missing_ranks
    if not missing:
        return None
    why = "; ".join(f"{rs}: {w}" for rs, w in ranks_by_reason(missing))
    return f"{path}: partial run: {rank_noun(missing)} missing ({why})"


def interrupted_line(path: str, manifest: Mapping[str, Any]) -> str | None:
    """``RUN: interrupted capture: ...`` or None."""
    intr = typed(manifest).interrupted
    if intr is None:
        return None
    return (f"{path}: interrupted capture: the window ended at cycle {intr.get('cycles_done')} of "
            f"{intr.get('cycles_requested')} ({intr.get('signal', 'SIGINT')})")


def dropped_lines(path: str, manifest: Mapping[str, Any]) -> list[str]:
    """One line per input and reason that ingest left events out (``tracekit.ingest.screen``), and one per
    rank whose lite capture lost GPU records (``session.cupti_client.dropped_records``)."""
    out = []
    for d in typed(manifest).ingest.get("dropped") or []:
        if isinstance(d, Mapping):
            out.append(f"{path}: rank {d.get('rank')}: ingest left out {d.get('count')} event(s) of {d.get('source')}: "
                       f"{d.get('reason')} (first: {d.get('first')})")
    for rank, sec in sorted(typed(manifest).ranks.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else -1):
        client = (sec.session or {}).get("cupti_client")
        n = client.get("dropped_records") if isinstance(client, Mapping) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            out.append(f"{path}: rank {rank}: CUPTI dropped {n} activity record(s) during the capture (its buffers "
                       "were full): their GPU time is not in the run")
    return out


def join_lines(path: str, problems: list[Any]) -> list[str]:
    """One line per kind of broken launch join (``tracekit.analyzers.joins.JoinProblem`` items)."""
    out = []
    for p in problems:
        ms = f"{p.gpu_ns / 1e6:,.3f} ms GPU time (profiled window)"
        if p.what == "unjoined":
            out.append(f"{path}: {p.count:,} GPU event(s) joined no launch (their correlation id matches no launch "
                       f"row of their rank; {ms} reaches no phase through a launch); first: {p.first}")
        else:
            out.append(f"{path}: {p.count:,} launch rows share a correlation id with another launch of their rank "
                       f"(their GPU events, {ms}, join the first launch only); first: {p.first}")
    return out


def unphased_line(u: Any) -> str | None:
    """``attribute``: how much GPU time joined no phase (``tracekit.analyzers.joins.Unphased``), or None."""
    if not u.count:
        return None
    share = 100.0 * u.gpu_ns / u.total_ns if u.total_ns else 0.0
    return (f"GPU time in no phase (profiled window, sum of durations): {u.gpu_ns / 1e6:,.3f} ms of "
            f"{u.total_ns / 1e6:,.3f} ms ({share:.1f}%) in {u.count:,} GPU event(s), not in the tables above")


def run_state_lines(path: str, manifest: Mapping[str, Any]) -> list[str]:
    """Every line that says the run is not whole (empty when it is)."""
    return [x for x in (missing_line(path, manifest), interrupted_line(path, manifest)) if x]




def resolution_line(coarse: list[Any]) -> str | None:
    """One line for ranks whose times are whole microseconds (tracekit.resolution.CoarseRank items)."""
    if not coarse:
        return None
    ranks = ", ".join(str(c.rank) for c in coarse)
    k = sum(c.kernels for c in coarse)
    z = sum(c.zero_kernels for c in coarse)
    noun = "rank" if len(coarse) == 1 else "ranks"
    return (f"{noun} {ranks}: time stamps have 1 us resolution (whole microseconds in the trace): "
            f"{z:,} of {k:,} kernels are 0 ns long; kernel times are exact only to 1 us")


__all__ = ["dropped_lines", "interrupted_line", "join_lines", "missing_line", "resolution_line", "run_state_lines", "unphased_line"]
