"""The typed reports every analysis returns, and the one mode switch.

An analysis (``analyzers/analyses.py``) returns one frozen report; the text renderers, the
``--json`` documents and the HTML report all read that object and compute nothing of their
own. The frames inside a report are the analyzer's tables (exact integer ns where they are
measurements); everything a renderer needs beside them (the mode, the unprofiled timers,
the dilation, the estimates, the timer comparisons) is a field here, computed once.

``Mode`` is decided once per run (``detect_mode``): ``timing`` (a capture with
``--profile timing``: no profiler ran, phase times per instance), ``host`` (the selected
ranks have no GPU events: the phases' host time is attributed to CPU ops), ``gpu``
(exclusive GPU buckets).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import polars as pl

from .gap import Explanation
from .nccl_mix import MixChange, NcclMix
from .sol.report import SolEconomics, SolReport, SolSplit
from .unprofiled import Estimate, PhaseTimer


class Mode(Enum):
    """What a run lets an analysis attribute (module doc)."""

    GPU = "gpu"
    HOST = "host"
    TIMING = "timing"


def detect_mode(events: Iterable[pl.DataFrame | None], manifest: Mapping[str, Any] | None = None,
                ranks: Sequence[int] | None = None) -> Mode:
    """The run's mode: ``TIMING`` when ``manifest`` says the capture ran without a profiler, ``HOST``
    when none of ``events`` (one frame per run compared) has a GPU event on ``ranks``, else ``GPU``.
    ``manifest`` None: only GPU or host (a comparison that reads the events, not the capture mode)."""
    from .host_attribution import has_gpu_events
    from .timing_view import is_timing_run

    if manifest is not None and is_timing_run(dict(manifest)):
        return Mode.TIMING
    frames = [ev for ev in events if ev is not None]
    return Mode.GPU if any(has_gpu_events(ev, ranks) for ev in frames) else Mode.HOST


@dataclass(frozen=True)
class PhaseEstimate:
    """The unprofiled estimate of one phase's buckets (``analyzers.unprofiled.estimate_buckets``), from its
    typical instance: the one with the median GPU window (the lower one of an even count)."""

    phase: str
    rank: int | None  # None: over every rank
    instance: Mapping[str, Any]  # the typical instance's row (instances table)
    timer: PhaseTimer
    estimate: Estimate


@dataclass(frozen=True)
class ChangeEstimate:
    """The unprofiled estimate beside a profiled decomposition of a change (``gap`` A vs B, ``diff`` old vs
    new): each side's buckets (in the comparison's statistic) scaled to that side's unprofiled timer by
    ``analyzers.unprofiled.estimate_buckets``; ``delta_ns[b]`` = a minus b (gap) or new minus old (diff)."""

    a: Estimate
    b: Estimate

    @property
    def delta_ns(self) -> dict[str, int]:
        return {k: self.a.buckets_ns[k] - self.b.buckets_ns[k] for k in self.a.buckets_ns}

    @property
    def window_delta_ns(self) -> int:
        return self.a.window_ns - self.b.window_ns


@dataclass(frozen=True)
class AttributionReport:
    """``tracekit attribute``: where each phase's time went (GPU buckets, host buckets, or timing-mode times).

    Frames: ``instances`` (one row per phase instance), ``by_rank`` (per phase x rank), ``by_phase``
    (per phase over the selected ranks), ``by_seq`` (sequence-length buckets), ``stragglers`` (per phase,
    GPU mode), ``outliers`` (``analyzers.robust.outliers``). Timing mode has ``instances`` and ``by_rank``
    only."""

    mode: Mode
    instances: pl.DataFrame
    by_rank: pl.DataFrame
    manifest: Mapping[str, Any]  # the run's manifest (descriptive facts: the profile mode's own words)
    by_phase: pl.DataFrame | None = None
    by_seq: pl.DataFrame | None = None
    stragglers: pl.DataFrame | None = None
    outliers: pl.DataFrame | None = None
    issues: tuple[str, ...] = ()
    whole_trace: bool = False
    ranks: tuple[int, ...] | None = None  # the rank selection (None: every rank)
    has_timers: bool = False  # the manifest has an unprofiled phase timer (else the clock note applies)
    dilation: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    timers: Mapping[str, PhaseTimer] = field(default_factory=dict)  # every rank's timers, per phase
    estimates: tuple[PhaseEstimate, ...] = ()  # per (phase, rank) row of by_rank, then per phase (rank None)
    sol: SolReport | None = None  # "% of SOL" per phase and bucket (analyzers/sol), GPU mode
    sol_why: str | None = None  # why there is none

    def estimate(self, phase: str, rank: int | None = None) -> PhaseEstimate | None:
        """The estimate of ``phase`` on ``rank`` (None: over every rank), if the run has one."""
        return next((e for e in self.estimates if e.phase == phase and e.rank == rank), None)


@dataclass(frozen=True)
class GapReport:
    """``tracekit gap``: why phase A costs more than phase B, in one statistic (``stat``) per instance.

    ``a`` / ``b``: side summaries (``stat`` per instance); ``buckets``: one row per bucket (a_ns, b_ns,
    delta_ns, ...); ``explanations``: the ranked material buckets with their evidence (GPU mode:
    ``Explanation`` items; host mode: ``host_ranked``, rows of ``buckets``); ``timing``: the capture
    timers' comparison (``analyzers.unprofiled.compare_timers``)."""

    mode: Mode
    stat: str
    a: Mapping[str, Any]
    b: Mapping[str, Any]
    buckets: pl.DataFrame
    total_delta_ns: float
    seq_check: str | None
    timing: Mapping[str, Any]
    explanations: tuple[Explanation, ...] = ()
    host_ranked: pl.DataFrame | None = None
    estimate: ChangeEstimate | None = None  # GPU mode, both phases with an unprofiled timer
    kernels: pl.DataFrame = field(default_factory=pl.DataFrame)  # GPU mode (empty in host mode)
    seq: pl.DataFrame = field(default_factory=pl.DataFrame)  # GPU mode
    by_rank: pl.DataFrame = field(default_factory=pl.DataFrame)  # GPU mode
    ranks: tuple[int, ...] | None = None
    sol: tuple[SolSplit, ...] = ()  # per bucket and the phase: floor difference and excess (analyzers/sol)
    sol_why: str | None = None  # why there is no split


@dataclass(frozen=True)
class SpecReport:
    """``tracekit spec``: speculation economics of one rank's cycles (``analyzers.spec``).

    ``table``: one row per batch size (``analyzers.spec_model`` figures); the rest says which rank was
    used and why, where the decode step came from, the clock of the figures and each rank's cycles."""

    table: pl.DataFrame
    rank: int
    rank_choice: str
    decode_source: str
    timing: str
    target_tps: float | None
    cycles_by_rank: tuple[Mapping[str, Any], ...]
    sol: SolEconomics | None = None  # break-even and tok/s at the floor (analyzers/sol)
    sol_why: str | None = None


@dataclass(frozen=True)
class DiffReport:
    """``tracekit diff OLD NEW``: what changed (``analyzers.diff.diff_runs``; a = old, b = new).

    ``timing``: per compared phase, the capture timers' comparison (``compare_timers``, a = old).
    ``nccl_old`` / ``nccl_new``: each run's NCCL kernels by what their names say
    (``analyzers.nccl_mix``); ``nccl_changes``: the ranks whose settings changed."""

    presence: pl.DataFrame
    phases: pl.DataFrame
    buckets: pl.DataFrame
    seq_buckets: pl.DataFrame
    kernels: pl.DataFrame
    manifest_diff: pl.DataFrame
    timing: Mapping[str, Mapping[str, Any]]
    stat: str
    nccl_old: NcclMix = field(default_factory=NcclMix)
    nccl_new: NcclMix = field(default_factory=NcclMix)
    nccl_changes: tuple[MixChange, ...] = ()
    sol_old: SolReport | None = None  # the floor of each run's phases (analyzers/sol)
    sol_new: SolReport | None = None
    sol_why: str | None = None
    estimates: Mapping[str, ChangeEstimate] = field(default_factory=dict)  # per phase: a = new, b = old
    # ``manifest_diff`` collapsed across ranks (``analyzers.manifest_diff.collapse``), most telling first
    manifest_changes: pl.DataFrame = field(default_factory=pl.DataFrame)

    @classmethod
    def from_view(cls, view: Mapping[str, pl.DataFrame], manifest_diff: pl.DataFrame,
                  timing: Mapping[str, Mapping[str, Any]] | None = None, stat: str = "median",
                  sol: tuple[SolReport | None, SolReport | None, str | None] = (None, None, None)) -> DiffReport:
        """The report of ``analyzers.diff.diff_runs``' frames and ``analyzers.manifest_diff``'s table."""
        from .manifest_diff import collapse

        return cls(view["presence"], view["phases"], view["buckets"], view["seq_buckets"], view["kernels"],
                   manifest_diff, timing or {}, stat, sol_old=sol[0], sol_new=sol[1], sol_why=sol[2],
                   manifest_changes=collapse(manifest_diff))


@dataclass(frozen=True)
class RanksReport:
    """``tracekit ranks``: stragglers (``analyzers.stragglers.stragglers``) and each rank's GPU state."""

    ranks: pl.DataFrame
    kernels: pl.DataFrame
    collectives: pl.DataFrame
    late: pl.DataFrame
    state: pl.DataFrame
    with_last_rank: int = 0  # collectives whose arrivals spread at least min_skew_ns
    skew_median_ns: int | None = None  # arrival spread over the matched collectives: nearest-rank median
    skew_max_ns: int | None = None


__all__ = ["AttributionReport", "ChangeEstimate", "DiffReport", "GapReport", "Mode", "PhaseEstimate", "RanksReport", "SpecReport",
           "detect_mode"]
