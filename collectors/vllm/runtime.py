"""The hooks tracekit puts in vLLM's worker processes (rows of hooktable.HOOKS), and their state.

``install()`` wraps the hooked methods on their classes (once per process; every model runner
of the process goes through them). Per engine step (``execute_model``) the hooks decide the
phase from the scheduler's output (host dicts: no device read): ``verify`` when a request carries
draft tokens, ``decode`` when every request schedules one token, else ``prefill``; the target
forward (``_model_forward``) is that phase's range, the drafter's ``propose_draft_token_ids``
the ``draft`` range of the same cycle. The rejection sampler's output gives the accepted drafts
per request: counted on the device (no sync) and read at the next step or at :func:`flush`,
after vLLM's own synchronisation, then emitted as the verify instance's ``accept`` fact (mean
over the requests that carried drafts, bonus token excluded) and summed in :class:`Counts`,
the figures vLLM's own ``vllm:spec_decode_*`` counters hold for the same steps.

The ranges go through tracekit.collectors.hooks (record_function while a torch profiler records,
a RangeRecorder in lite/timing), and each phase is timed by a PhaseTimer whose window the capture
sets (the unprofiled reference and the profiled window: dilation). Forwards outside a scheduled
step (vLLM's warm-up and profiling dummy runs) are not phases.
"""

from __future__ import annotations

import functools
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.hooks import emit_facts, phase
from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.timing import PhaseTimer
from tracekit.collectors.vllm.hooktable import installed_version, specs_for


@dataclass
class Counts:
    """Speculation counters over the steps a window saw (vLLM's spec-decode metrics' definitions)."""

    drafts: int = 0  # requests that carried draft tokens, summed over steps (num_drafts)
    draft_tokens: int = 0  # num_draft_tokens
    accepted: int = 0  # num_accepted_tokens (bonus tokens excluded)
    accepted_per_pos: list[int] = field(default_factory=list)  # num_accepted_tokens_per_pos

    def add(self, accepted: list[int], drafted: list[int]) -> None:
        for a, d in zip(accepted, drafted, strict=True):
            if d <= 0:
                continue
            self.drafts += 1
            self.draft_tokens += d
            self.accepted += a
            if len(self.accepted_per_pos) < d:
                self.accepted_per_pos.extend([0] * (d - len(self.accepted_per_pos)))
            for i in range(a):
                self.accepted_per_pos[i] += 1

    def to_dict(self) -> dict[str, Any]:
        return {"num_drafts": self.drafts, "num_draft_tokens": self.draft_tokens,
                "num_accepted_tokens": self.accepted, "num_accepted_tokens_per_pos": list(self.accepted_per_pos)}


@dataclass
class _Step:
    cycle: int
    name: str  # verify | decode | prefill
    bs: int
    tok: int
    drafts: int


@dataclass
class State:
    """Per process: the step in flight, the accept counts waiting to be read, the phase timer."""

    cycle: int = 0
    step: _Step | None = None
    pending: tuple[int, Any, list[int]] | None = None  # (cycle, valid tokens per request (device), drafts)
    timer: PhaseTimer = field(default_factory=lambda: PhaseTimer(False))
    counts: Counts = field(default_factory=Counts)
    calls: dict[str, int] = field(default_factory=dict)
    graphed: dict[str, int] = field(default_factory=dict)  # phase -> instances run from a CUDA graph
    installed: list[str] = field(default_factory=list)
    installed_by: str = ""  # who installed the hooks first: "plugin" (vllm.general_plugins) or "worker extension"
    errors: list[str] = field(default_factory=list)

    def note(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


STATE = State()


def _classify(so: Any) -> _Step | None:
    """The phase of a step: vLLM's own split of the scheduler's output into context and generation
    requests (``compute_iteration_details``, what its step annotations say) and tracekit's one
    vLLM step -> phase mapping (tracekit.finalize.phases.VllmStep: any context request makes it a
    ``prefill``, generation requests of more than one token each a ``verify``, else ``decode``)."""
    from vllm.v1.utils import compute_iteration_details

    from tracekit.finalize.phases import VllmStep

    d = compute_iteration_details(so)
    step = VllmStep(d.num_ctx_requests, d.num_ctx_tokens, d.num_generation_requests, d.num_generation_tokens)
    name = step.phase
    if name is None:
        return None
    drafts = sum(len(v) for v in (getattr(so, "scheduled_spec_decode_tokens", None) or {}).values())
    facts = step.facts()
    return _Step(STATE.cycle, name, int(facts["batch_size"]), int(facts["num_tokens"]), drafts)


def flush() -> None:
    """Read the accept counts of the last verify (host copy after vLLM's own sync) and emit them."""
    if STATE.pending is None:
        return
    cycle, valid, drafted = STATE.pending
    STATE.pending = None
    got = valid.tolist() if hasattr(valid, "tolist") else list(valid)
    accepted = [max(int(v) - 1, 0) for v in got][: len(drafted)]
    STATE.counts.add(accepted, drafted)
    per = [a for a, d in zip(accepted, drafted, strict=True) if d > 0]
    if per:
        emit_facts("verify", cycle, accept=sum(per) / len(per))


def _seq_len(runner: Any) -> int | None:
    """Mean computed context over the batch (host numpy array vLLM keeps)."""
    try:
        batch = runner.input_batch
        n = int(batch.num_reqs)
        if n <= 0:
            return None
        return round(float(batch.num_computed_tokens_cpu[:n].sum()) / n)
    except Exception:
        return None


def _graphed() -> bool | None:
    try:
        from vllm.forward_context import get_forward_context, is_forward_context_available

        if not is_forward_context_available():
            return None
        mode = get_forward_context().cudagraph_runtime_mode
        return str(getattr(mode, "name", mode)) != "NONE"
    except Exception:
        return None


def _execute_model(orig: Callable[..., Any], runner: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
    flush()
    step = _classify(scheduler_output)
    if step is not None:
        STATE.cycle += 1
        step.cycle = STATE.cycle
    STATE.step = step
    try:
        return orig(runner, scheduler_output, *args, **kwargs)
    finally:
        STATE.step = None


def _model_forward(orig: Callable[..., Any], runner: Any, *args: Any, **kwargs: Any) -> Any:
    step = STATE.step
    if step is None:  # dummy / warm-up runs, or the drafter's own forward
        return orig(runner, *args, **kwargs)
    STATE.step = None  # one range per step (a drafter that calls _model_forward is not the target)
    graphed = _graphed()
    if graphed:
        STATE.graphed[step.name] = STATE.graphed.get(step.name, 0) + 1
    STATE.note(step.name)
    token = STATE.timer.begin(step.name)
    try:
        with phase(step.name, cycle=step.cycle, bs=step.bs, tok=step.tok, seq=_seq_len(runner), graphed=graphed):
            return orig(runner, *args, **kwargs)
    finally:
        STATE.timer.end(token)


def _propose(orig: Callable[..., Any], runner: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
    bs = len(getattr(scheduler_output, "num_scheduled_tokens", {}) or {})
    STATE.note("draft")
    token = STATE.timer.begin("draft")
    try:
        with phase("draft", cycle=STATE.cycle, bs=bs or None):
            return orig(runner, scheduler_output, *args, **kwargs)
    finally:
        STATE.timer.end(token)


def _accept(orig: Callable[..., Any], sampler: Any, metadata: Any, *args: Any, **kwargs: Any) -> Any:
    out = orig(sampler, metadata, *args, **kwargs)
    try:
        from vllm.v1.sample.rejection_sampler import PLACEHOLDER_TOKEN_ID

        ids = out.sampled_token_ids
        valid = (ids != int(PLACEHOLDER_TOKEN_ID)).sum(dim=-1)  # on the device: read at the next step
        STATE.pending = (STATE.cycle, valid, [int(d) for d in metadata.num_draft_tokens])
    except Exception as exc:  # never break vLLM
        STATE.errors.append(f"accept: {exc.__class__.__name__}: {exc}")
    return out


WRAPPERS: dict[str, Callable[..., Any]] = {
    "step": _execute_model,
    "forward": _model_forward,
    "draft": _propose,
    "accept": _accept,
}


def _wrap(spec: HookSpec, fn: Callable[..., Any], wrapper: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        return wrapper(fn, self, *args, **kwargs)

    hooked.__tracekit_hook__ = spec.target  # type: ignore[attr-defined]
    return hooked


def install(specs: Iterable[HookSpec] | None = None,
            resolve: Callable[[str], Any] = pkgutil.resolve_name, by: str = "") -> list[str]:
    """Wrap every row's method on its class (idempotent); returns the targets hooked. ``by``: who asks."""
    rows = list(specs) if specs is not None else specs_for(installed_version() or "0.0.0")
    if by and not STATE.installed_by:
        STATE.installed_by = by
    for spec in rows:
        wrapper = WRAPPERS.get(spec.role)
        if wrapper is None or spec.target in STATE.installed:
            continue
        try:
            owner = resolve(spec.cls)
            fn = getattr(owner, spec.method)
        except Exception as exc:
            STATE.errors.append(f"{spec.target}: {exc.__class__.__name__}: {exc}")
            continue
        if getattr(fn, "__tracekit_hook__", None) == spec.target:
            continue
        setattr(owner, spec.method, _wrap(spec, fn, wrapper))
        STATE.installed.append(spec.target)
    return list(STATE.installed)


__all__ = ["STATE", "WRAPPERS", "Counts", "State", "flush", "install"]
