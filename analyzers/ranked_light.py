"""What the report reads besides the analyses from a run read rank by rank (``analyzers.ranked``): per
rank, in pass 1 (``ranked.scan(light=True)``: the rank is read there anyway), ``tracekit info``'s tables
(``summary.InfoParts``: they add up over ranks) and its phase rows (``phase_rows.phase_rows``: the few
range rows per cycle that phase instances are made of).

From those the driver builds what the report draws besides ``attribute`` / ``gap`` / ``ranks`` /
``diff`` (``analyzers.ranked``): info's document (``summary.info_document``), ``spec``'s cycles and
decode steps and the cycle composition (both read only phase instances). What travels per rank: its
info tables (a row per rank, category, kind, unmatched or NCCL kernel name) and its phase rows; never
its event table.

``tracekit info`` alone reads the same tables rank by rank (``run_info``: one pass, no phase ids),
with each rank's time resolution and launch joins, which add up over ranks too. ``tracekit spec``
reads the phase rows and attribute's "% of SOL" (``spec_inputs``), as the report does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import polars as pl

from tracekit.finalize.categories import Rule
from tracekit.resolution import CoarseRank, time_resolution
from tracekit.store import RankedRun, RankFile, read_ranks
from tracekit.summary import INFO_COLUMNS, InfoParts, info_parts, merge_info_parts

from .joins import JoinProblem, combine_join_problems, join_problems
from .ranked import Scanned, each_rank


@dataclass(frozen=True)
class Light:
    """The run's info tables and phase rows (phase ids as the whole run reads them: ``unique_phase_ids``)."""

    info: InfoParts
    phases: pl.DataFrame


def light_of(s: Scanned) -> Light:
    """``Light`` of a run scanned with ``light=True``."""
    return Light(merge_info_parts([x.info for x in s.scans]), phase_rows_scanned(s))


def phase_rows_scanned(s: Scanned) -> pl.DataFrame:
    """The phase rows of a run scanned with ``light=True`` (``info`` or not), ids as the whole run reads them."""
    from tracekit.finalize.version import shift_phase_ids

    phases = pl.concat([x.phase_rows for x in s.scans if x.phase_rows is not None], how="vertical", rechunk=True)
    return phases if s.top is None else shift_phase_ids(phases, s.top)


@dataclass(frozen=True)
class RunInfo:
    """What ``tracekit info`` prints, of one rank or a run: its tables, the ranks whose times are whole
    microseconds (``resolution.time_resolution``), the GPU events that joined no launch
    (``joins.join_problems``)."""

    parts: InfoParts
    coarse: list[CoarseRank]
    joins: list[JoinProblem]


def info_rank(f: RankFile, rules: list[Rule] | None = None) -> RunInfo:
    """``RunInfo`` of one rank (``info``'s columns only)."""
    ev = read_ranks([f], INFO_COLUMNS)
    return RunInfo(info_parts(ev, rules), time_resolution(ev), join_problems(ev))


def run_info(run: RankedRun, executor: Any, rules: list[Rule] | None = None,
             say: Callable[[str], None] | None = None) -> RunInfo:
    """``RunInfo`` of ``run`` rank by rank: equal to the whole table's (tests/test_ranked.py)."""
    got = each_rank(run, executor, partial(info_rank, rules=rules), say, "info")
    return RunInfo(merge_info_parts([g.parts for g in got]), [c for g in got for c in g.coarse],
                   combine_join_problems([g.joins for g in got]))


def spec_inputs(run: RankedRun, executor: Any, say: Callable[[str], None] | None = None
                ) -> tuple[pl.DataFrame, tuple[Any, str | None]]:
    """What ``analyses.spec`` reads of a run rank by rank: its phase rows (pass 1, ``light``) and the
    "% of SOL" from attribute's instances (``try_sol``, as the whole read computes it; an attribution
    error becomes the reason there is none, as ``try_sol`` makes it), attribute's pass 2 only where the
    manifest allows a floor (``sol_unavailable``). ``ranked.Unsupported`` where ``attribute`` reads the
    run whole."""
    from tracekit.errors import AnalysisError

    from .buckets import DEFAULT_LAUNCH_LATENCY_NS
    from .ranked import attribute, scan
    from .sol.run import sol_unavailable

    s = scan(run, executor, say, "spec: ", light=True, info=False)  # spec reads no info table
    why = sol_unavailable(dict(run.manifest))  # no floor whatever the events: no pass 2
    sol: tuple[Any, str | None] = (None, why)
    if why is None:
        try:
            att, _ = attribute(run, executor, launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say, scanned=s,
                               what="spec: ")
            sol = (att.sol, att.sol_why)
        except AnalysisError as exc:
            sol = (None, exc.message)
    return phase_rows_scanned(s), sol


def phase_rows_of(run: RankedRun, executor: Any, say: Callable[[str], None] | None = None,
                  what: str = "") -> pl.DataFrame:
    """A run's phase rows read rank by rank (``spec --baseline``: the decode steps of a plain-decode run)."""
    from .ranked import scan

    return phase_rows_scanned(scan(run, executor, say, what, light=True, info=False))


__all__ = ["Light", "RunInfo", "info_rank", "light_of", "phase_rows_of", "phase_rows_scanned", "run_info",
           "spec_inputs"]
