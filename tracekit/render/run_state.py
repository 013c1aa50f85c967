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


__all__ = ["interrupted_line", "missing_line", "resolution_line", "run_state_lines"]
