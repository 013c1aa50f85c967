"""``tracekit gap`` on log runs: phase A's time against phase B's, on the engine's own clock.

A and B are phases whose time the log gives (``phase_timing``: a user-pattern field such as
``verify_ms``, or the metrics' device timer), from one log or B from a second (``--b-run``: the
same phase in an older log). One statistic (median or mean over the rows) gives the delta; median,
p90 and mean of both are kept. The rows are not binned by batch or sequence length: ``diff``
compares at matched operating points, and says when a time has no stats line to bin it by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analyzers.logs.spec import Timing, phase_timing
from tracekit.errors import AnalysisError


@dataclass(frozen=True)
class LogGap:
    a_path: str
    b_path: str
    a: Timing
    b: Timing
    statistic: str
    delta_ns: float | None  # A - B in the statistic
    ratio: float | None  # A / B
    timing_source: str  # "engine log" / "engine metrics" (both sides' clocks, joined when they differ)


def log_gap(a_rows: pl.DataFrame, a_man: Mapping[str, Any], a_path: str, a_phase: str,
            b_rows: pl.DataFrame, b_man: Mapping[str, Any], b_path: str, b_phase: str, *,
            stat: str = "median") -> LogGap:
    ta = phase_timing(a_rows, a_man, a_phase)
    tb = phase_timing(b_rows, b_man, b_phase)
    for t, phase, side, path in ((ta, a_phase, "A", a_path), (tb, b_phase, "B", b_path)):
        if t is None or t.ns.n == 0:
            raise AnalysisError(f"the log gives no time for {phase!r} (a user pattern with a field {phase}_ms, or "
                                "metrics snapshots with the device timer)", side=side, path=path)  # type: ignore[arg-type]
    assert ta is not None and tb is not None
    va, vb = ta.ns.stat(stat), tb.ns.stat(stat)
    delta = None if va is None or vb is None else va - vb
    ratio = None if va is None or not vb else va / vb
    clocks = sorted({t.source.split(" (")[0] for t in (ta, tb)})
    return LogGap(a_path=a_path, b_path=b_path, a=ta, b=tb, statistic=stat, delta_ns=delta, ratio=ratio,
                  timing_source=" vs ".join(clocks))


__all__ = ["LogGap", "log_gap"]
