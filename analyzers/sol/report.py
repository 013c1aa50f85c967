"""The ``tracekit sol`` report: floors per phase and bucket, beside the measured times of a run
(``analyzers/sol/run.py``) or alone (the what-if form, ``what_if``). Frozen, typed; renderers
(tracekit/render/sol.py) only read it.

% of SOL = floor / measured (100% = at the floor). A measured time BELOW its floor means the
floor is wrong (a real kernel cannot beat the speed of light): ``PhaseSol.beaten`` and
``BucketSol.beaten`` say so and the renderers print it loudly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

from tracekit.analyzers.sol.allreduce import RingModel, ring_model
from tracekit.analyzers.sol.config import ModelShape
from tracekit.analyzers.sol.floor import FLOOR_BUCKETS, PhaseFloor, phase_floor, repeated
from tracekit.analyzers.sol.gpus import GpuSpec
from tracekit.analyzers.sol.model import Layout, Step

MODELLED: Final = FLOOR_BUCKETS  # the attribution buckets with a floor


def pct_of_sol(floor_ns: int, measured_ns: int | None) -> float | None:
    """floor / measured in percent; None without a measurement (or a zero one)."""
    if not measured_ns or measured_ns <= 0:
        return None
    return 100.0 * floor_ns / measured_ns


@dataclass(frozen=True)
class BucketSol:
    bucket: str  # attention | moe | gemm | allreduce | comm | launch_idle | other
    floor_ns: int
    bound: str
    measured_ns: int | None  # median per instance, profiled window
    pct: float | None
    beaten: bool


@dataclass(frozen=True)
class InstanceSol:
    """One phase instance of a run: its own floor (its batch, tokens, context) beside its profiled GPU window."""

    rank: int
    cycle: int | None
    seq_len: int
    floor_ns: int
    window_ns: int  # profiled GPU window

    @property
    def pct(self) -> float | None:
        return pct_of_sol(self.floor_ns, self.window_ns)


@dataclass(frozen=True)
class PhaseSol:
    phase: str
    floor: PhaseFloor
    measured_ns: int | None  # median instance
    clock: str | None  # unprofiled timer (cuda_event / perf_counter) or "profiled window"
    instances: int
    pct: float | None
    beaten: bool
    buckets: tuple[BucketSol, ...]
    note: str | None = None
    per_instance: tuple[InstanceSol, ...] = ()  # a run's instances (none in the what-if form)


@dataclass(frozen=True)
class SolReport:
    run: str | None  # None: what-if
    model: str
    model_source: str  # the config file, or the run's manifest
    architecture: str
    quant: str
    gpu: GpuSpec
    gpu_source: str  # how the GPU was chosen
    layout: Layout
    ring: RingModel
    phases: tuple[PhaseSol, ...]
    notes: tuple[str, ...]

    @property
    def beaten(self) -> bool:
        return any(p.beaten or any(b.beaten for b in p.buckets) for p in self.phases)

    def phase(self, name: str) -> PhaseSol | None:
        return next((p for p in self.phases if p.phase == name), None)

    def break_even_at_floor(self) -> tuple[float, tuple[str, ...]] | None:
        """SOL break-even tokens per cycle: the speculative cycle's floor (draft + verify + draft_extend, the
        phases the run has) / the decode step's floor; None without verify and decode."""
        verify, decode = self.phase("verify"), self.phase("decode")
        if verify is None or decode is None or decode.floor.floor_ns <= 0:
            return None
        found = [(name, ph) for name in ("draft", "verify", "draft_extend") if (ph := self.phase(name)) is not None]
        cycle = sum(ph.floor.floor_ns for _, ph in found)
        return cycle / decode.floor.floor_ns, tuple(name for name, _ in found)


def floor_only(phase: str, f: PhaseFloor) -> PhaseSol:
    """A phase with its floor and no measurement (the what-if form)."""
    buckets = tuple(BucketSol(b.bucket, b.floor_ns, b.bound, None, None, False) for b in f.buckets)
    return PhaseSol(phase, f, None, None, 0, None, False, buckets)


def what_if(shape: ModelShape, model_source: str, gpu: GpuSpec, gpu_source: str, layout: Layout,
            steps: Sequence[Step], allreduce_ns: float | None = None, draft: ModelShape | None = None) -> SolReport:
    """The floors of hypothetical steps (``tracekit sol --model --gpu --tp --tokens --seq-len``). With ``draft``
    (``--draft-model``) and one step of T tokens: a speculative cycle, draft (T - 1 draft-model forwards of one
    token), verify (the target over T tokens), draft_extend (the draft model over T tokens), and a decode step
    (the target over 1 token), so the report has the SOL break-even."""
    ring = ring_model(layout.tp, gpu.alpha_ns, gpu.link_Bps, gpu.link, None, "no run to fit", allreduce_ns)
    if draft is not None:
        (s,) = steps
        t = s.tokens
        cyc = (("draft", draft, 1, t - 1), ("verify", shape, t, 1), ("draft_extend", draft, t, 1), ("decode", shape, 1, 1))
        phases = tuple(
            replace(floor_only(name, repeated(phase_floor(m, layout, replace(s, phase=name, tokens=tok, distinct_experts=(
                s.distinct_experts if tok == t else None)), gpu, ring), n)),
                note=f"{n} draft-model forwards of one token (the --draft-model config)" if name == "draft" else
                "the --draft-model config" if name == "draft_extend" else None)
            for name, m, tok, n in cyc)
    else:
        phases = tuple(floor_only(s.phase, phase_floor(shape, layout, s, gpu, ring)) for s in steps)
    notes = []
    if shape.experts and any(s.distinct_experts is None for s in steps):
        notes.append(f"distinct experts per MoE layer: expected value under uniform routing, U(T) = E (1 - (1 - k/E)^T)"
                     f" with E={shape.experts}, k={shape.top_k} (real routing is correlated: fewer experts, lower floor)")
    return SolReport(None, shape.name, model_source, shape.architecture, shape.quant.description, gpu, gpu_source,
                     layout, ring, phases, tuple(notes))


@dataclass(frozen=True)
class SolSplit:
    """``gap``: one bucket's difference A - B split into what the floor must cost more ("floor difference": more
    tokens, more distinct experts, more KV reads) and the rest ("excess": launch overhead, eager, waits, ...).
    Buckets the model does not cover have floor 0 on both sides: all of their difference is excess."""

    bucket: str  # an attribution bucket, or "phase" for the whole phase
    floor_a_ns: int
    floor_b_ns: int
    measured_delta_ns: float

    @property
    def floor_delta_ns(self) -> int:
        return self.floor_a_ns - self.floor_b_ns

    @property
    def excess_ns(self) -> float:
        return self.measured_delta_ns - self.floor_delta_ns


@dataclass(frozen=True)
class SolEconomics:
    """``spec`` at the floor: the SOL break-even (the cycle's floor over the decode step's floor) and the tok/s a
    sequence would get at the floor with the measured tokens per cycle."""

    cycle_floor_ns: int  # draft + verify + draft_extend floors (those the run has)
    decode_floor_ns: int
    parts: tuple[str, ...]
    tokens_per_cycle: float | None  # measured, bonus included

    @property
    def break_even_tokens(self) -> float:
        return self.cycle_floor_ns / self.decode_floor_ns

    @property
    def tps_at_floor(self) -> float | None:
        return None if self.tokens_per_cycle is None else self.tokens_per_cycle * 1e9 / self.cycle_floor_ns

    @property
    def decode_tps_at_floor(self) -> float:
        return 1e9 / self.decode_floor_ns


def sol_splits(a: PhaseSol, b: PhaseSol, measured_delta: dict[str, float], total_delta: float) -> tuple[SolSplit, ...]:
    """Per attribution bucket of ``measured_delta`` (A - B, one statistic) and the phase: the floor difference and
    the excess. A sol bucket that groups several attribution buckets (launch overhead + idle, the unmodelled
    rest) has floor 0 in each."""
    fa = {x.bucket: x.floor_ns for x in a.buckets}
    fb = {x.bucket: x.floor_ns for x in b.buckets}
    out = [SolSplit(bk, fa.get(bk, 0) if bk in MODELLED else 0, fb.get(bk, 0) if bk in MODELLED else 0, d)
           for bk, d in measured_delta.items() if bk != "gpu_window"]  # the window is the phase row below
    out.append(SolSplit("phase", a.floor.floor_ns, b.floor.floor_ns, total_delta))
    return tuple(out)


def economics_at_floor(rep: SolReport, tokens_per_cycle: float | None) -> SolEconomics | None:
    """``spec``'s figures at the floor; None without verify and decode floors."""
    be = rep.break_even_at_floor()
    decode = rep.phase("decode")
    if be is None or decode is None:
        return None
    x, parts = be
    return SolEconomics(round(x * decode.floor.floor_ns), decode.floor.floor_ns, parts, tokens_per_cycle)
