"""The AROUND hooks tracekit puts on SGLang's speculative workers, and their installers.

A hook has SGLang's plugin calling convention, ``hook(original, *args, **kwargs)``
(``HookRegistry.register(target, hook, HookType.AROUND)``), so the same function
serves the plugin path (plugin.py), the launcher and the import hook (direct
patching by ``install_direct``).

What a hook emits, per phase instance, on the calling thread, through the
collectors' phase API (tracekit.collectors.hooks.phase / emit_facts):
- a range ``tracekit:<phase>|cycle=N|bs=..|tok=..|seq=..`` (phases.format_label)
  through ``torch.profiler.record_function`` when a torch profiler is active
  (SGLang's ``/start_profile``), and an NVTX range under Nsight or ``TRACEKIT_NVTX=1``;
- after the phase, a late facts marker (phases.format_facts) with what SGLang
  returned: ``graphed`` and, for v1 verify, the accept length. v2 hands the
  accept lengths over later, in ``on_verify_complete_cpu`` after its own
  asynchronous copy: the marker is emitted then, for the oldest verify waiting.
In profile modes ``lite`` and ``timing`` the ranges and markers go into tracekit's own
recorder instead (window.py): every cycle boundary (``Recorder.tick``) lets that window
start or stop.
Nothing here calls ``.cpu()``, ``.item()`` or ``.tolist()`` on a device tensor.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import pkgutil
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors import hooks
from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.sglang import facts as F
from tracekit.collectors.sglang.hooktable import installed_version, specs_for

log = logging.getLogger("tracekit.sglang")

Hook = Callable[..., Any]
WRAPPED_ATTR = "__tracekit_hook__"
_PENDING_MAX = 64  # v2 verify cycles waiting for their accept lengths


def enabled() -> bool:
    """Hooks are on unless ``TRACEKIT_SGLANG=0``."""
    return os.environ.get("TRACEKIT_SGLANG", "1") != "0"


@dataclass
class Recorder:
    """Per-process hook state: the cycle counter, open phases per thread, pending v2 verifies."""

    cycle: int = -1
    rank: int | None = None
    spec: dict[str, int] = field(default_factory=dict)
    pending_accept: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=_PENDING_MAX))
    on_first_call: Callable[[Recorder, Any], None] | None = None
    installed_by: str | None = None  # "plugin" | "launcher" | "autoload": the first path wins
    window: Any = None  # window.Agent (profile modes lite / timing), made at the first cycle boundary
    _local: threading.local = field(default_factory=threading.local)
    _seen_first: bool = False

    def depth(self) -> int:
        return int(getattr(self._local, "depth", 0))

    def _enter(self) -> None:
        self._local.depth = self.depth() + 1

    def _leave(self) -> None:
        self._local.depth = max(0, self.depth() - 1)

    def first_call(self, obj: Any) -> None:
        """Learn rank and speculative config from the hooked objects; call the rank callback once
        (and once more when the speculative config becomes known)."""
        if self._seen_first and self.spec:
            return
        if self.rank is None:
            self.rank = rank_of(obj)
        new_spec = F.spec_config(obj) if not self.spec else {}
        learned = bool(new_spec) and "draft_tokens" in new_spec
        if learned:
            self.spec = new_spec
        if (not self._seen_first or learned) and self.on_first_call is not None:
            self._seen_first = True
            try:
                self.on_first_call(self, obj)
            except Exception:  # a manifest must never break serving
                log.exception("tracekit: rank manifest failed")
        self._seen_first = True

    def tick(self) -> None:
        """A cycle boundary: let tracekit's own window (window.py) start or stop here."""
        try:
            if self.window is None:
                from tracekit.collectors.sglang.window import Agent

                self.window = Agent(self)
            self.window.tick()
        except Exception as exc:
            warn_once("window", f"profile-mode window skipped: {exc!r}")

    def run_phase(self, phase: str, original: Hook, args: tuple[Any, ...], kwargs: dict[str, Any],
                  facts: dict[str, Any], after: Callable[[Any], None] | None = None) -> Any:
        self._enter()
        try:
            with hooks.phase(phase, **facts):
                result = original(*args, **kwargs)
        finally:
            self._leave()
        if after is not None:
            try:
                after(result)
            except Exception as exc:
                warn_once(("after", phase), f"late facts of {phase} skipped: {exc!r}")
        return result


RECORDER = Recorder()


def recording() -> bool:
    """Whether a phase range would be recorded now (torch profiler on, an NVTX consumer, or tracekit's window).

    Uses the collectors' hook backend so both agree; when False the hooks do only
    their bookkeeping (cycle counter, v2 accept queue) and call straight through.
    """
    b = hooks._Backend
    if not b.resolved:
        b.resolve()
    en = b.enabled
    return b.nvtx is not None or b.recorder is not None or (en is not None and bool(en()))
_WARNED: set[Any] = set()


def warn_once(key: Any, msg: str) -> None:
    """Log a hook-machinery problem once; the hooked SGLang call always goes on."""
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning("tracekit: %s", msg)


def rank_of(obj: Any) -> int | None:
    """TP rank of a worker / model runner: ``tp_rank`` on it or its runner, else torch.distributed."""
    for cand in (obj, getattr(obj, "model_runner", None), getattr(obj, "target_worker", None)):
        r = getattr(cand, "tp_rank", None)
        if isinstance(r, int) and not isinstance(r, bool):
            return r
    dist = getattr(sys.modules.get("torch"), "distributed", None)
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        return None
    return None


def _batch_facts(rec: Recorder, batch: Any) -> dict[str, Any]:
    return {"cycle": rec.cycle, "bs": F.batch_size(batch), "seq": F.mean_seq_len(batch)}


def _forward_plan(r: Recorder, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, int | None, dict[str, Any]] | None:
    """For ModelRunner.forward: (phase, cycle, facts) on the target runner outside any phase, else None."""
    runner = args[0] if args else None
    if r.depth() > 0 or getattr(runner, "is_draft_worker", False):
        return None
    fb = F.first_batch(args, kwargs, "forward_batch")
    mode = F.mode_name(fb)
    cycle: int | None
    if mode == "DECODE":
        phase = "decode"
        r.cycle += 1
        cycle = r.cycle
        r.tick()
    elif mode in ("EXTEND", "MIXED", "SPLIT_PREFILL"):
        phase, cycle = "prefill", None
    else:
        return None
    if not recording():
        return None
    r.first_call(runner)
    bs = F.batch_size(fb)
    facts: dict[str, Any] = {"cycle": cycle, "bs": bs, "seq": F.mean_seq_len(fb)}
    if phase == "decode":
        facts["tok"] = bs
    else:
        ext = getattr(fb, "extend_num_tokens", None)
        facts["tok"] = ext if isinstance(ext, int) and not isinstance(ext, bool) else None
    return phase, cycle, facts


def make_hook(spec: HookSpec, rec: Recorder | None = None) -> Hook:
    """The AROUND hook for one table row: ``hook(original, *args, **kwargs)``."""
    r = rec if rec is not None else RECORDER
    role = spec.role

    if role == "cycle":

        def cycle_hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
            try:
                r.first_call(args[0] if args else None)
                batch = F.first_batch(args, kwargs, "batch", "model_worker_batch")
                mode = F.mode_name(batch)
                if mode not in ("EXTEND", "MIXED", "SPLIT_PREFILL") and not getattr(batch, "is_extend_in_batch", False):
                    r.cycle += 1
                    r.tick()
            except Exception as exc:
                warn_once(spec.target, f"{spec.target}: cycle bookkeeping skipped: {exc!r}")
            return original(*args, **kwargs)

        return cycle_hook

    if role in ("draft", "verify", "draft_extend"):
        phase = role

        v2_verify = phase == "verify" and spec.worker == "v2"

        def phase_hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
            if v2_verify:
                # v2 accept lengths arrive later, in order, through on_verify_complete_cpu
                r.pending_accept.append(r.cycle)
            if not recording():  # fast path: depth bookkeeping only
                loc = r._local
                d = getattr(loc, "depth", 0)
                loc.depth = d + 1
                try:
                    return original(*args, **kwargs)
                finally:
                    loc.depth = d
            try:
                r.first_call(args[0] if args else None)
                batch = F.first_batch(args, kwargs, "batch", "model_worker_batch")
                facts = _batch_facts(r, batch)
                bs = facts["bs"]
                if bs is not None and phase == "verify" and "draft_tokens" in r.spec:
                    facts["tok"] = bs * r.spec["draft_tokens"]
                elif bs is not None and phase == "draft" and "steps" in r.spec and "topk" in r.spec:
                    facts["tok"] = bs * r.spec["steps"] * r.spec["topk"]
            except Exception as exc:
                warn_once(spec.target, f"{spec.target}: facts skipped: {exc!r}")
                facts = {"cycle": r.cycle}
            cycle = r.cycle
            after = None
            if phase == "verify":

                def after(result: Any) -> None:
                    graphed = F.graphed_of(result)
                    per_req = F.accepted_per_req(result)
                    accept = F.mean_accept(per_req)
                    if graphed is not None or accept is not None:
                        hooks.emit_facts("verify", cycle, graphed=graphed, accept=accept)

            return r.run_phase(phase, original, args, kwargs, facts, after)

        return phase_hook

    if role == "accept":

        def accept_hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
            try:
                per_req = kwargs.get("num_correct_drafts_per_req", args[1] if len(args) > 1 else None)
                if r.pending_accept and isinstance(per_req, list):
                    cycle = r.pending_accept.popleft()
                    if recording():
                        accept = F.mean_accept([int(x) for x in per_req])
                        if accept is not None:
                            hooks.emit_facts("verify", cycle, accept=accept)
            except Exception as exc:
                warn_once(spec.target, f"{spec.target}: accept lengths skipped: {exc!r}")
            return original(*args, **kwargs)

        return accept_hook

    if role == "forward":

        def forward_hook(original: Hook, *args: Any, **kwargs: Any) -> Any:
            try:
                plan = _forward_plan(r, args, kwargs)
            except Exception as exc:
                warn_once(spec.target, f"{spec.target}: decode/prefill marking skipped: {exc!r}")
                plan = None
            if plan is None:
                return original(*args, **kwargs)
            phase, cycle, facts = plan

            def after(result: Any) -> None:
                graphed = F.graphed_of(result)
                if graphed is not None and cycle is not None:
                    hooks.emit_facts(phase, cycle, graphed=graphed)

            return r.run_phase(phase, original, args, kwargs, facts, after)

        return forward_hook

    raise ValueError(f"unknown hook role {role!r} for {spec.target}")


# --- installers -------------------------------------------------------------------

_REPORTED: set[str] = set()


def report_missing(target: str, why: str) -> None:
    """Log a missing target once per process."""
    if target in _REPORTED:
        return
    _REPORTED.add(target)
    log.warning("tracekit: SGLang hook target %s skipped (%s)", target, why)


def resolve_owner(spec: HookSpec, resolve: Callable[[str], Any] = pkgutil.resolve_name) -> Any | None:
    """The class that defines ``spec``'s method, or None (reported once)."""
    owner_path, _, method = spec.target.rpartition(".")
    try:
        owner = resolve(owner_path)
    except Exception as exc:  # ImportError, AttributeError, or a failing import inside sglang
        report_missing(spec.target, f"{exc.__class__.__name__}: {exc}")
        return None
    if method not in getattr(owner, "__dict__", {}):
        report_missing(spec.target, f"{owner_path} has no {method}")
        return None
    return owner


def wrap(original: Hook, hook: Hook) -> Hook:
    """``original`` wrapped by an AROUND hook, marked so it is never wrapped twice."""

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return hook(original, *args, **kwargs)

    setattr(wrapper, WRAPPED_ATTR, True)
    return wrapper


@dataclass
class InstallReport:
    installed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def install_direct(
    version: str | None = None,
    *,
    specs: Iterable[HookSpec] | None = None,
    rec: Recorder | None = None,
    resolve: Callable[[str], Any] = pkgutil.resolve_name,
    entry: str = "direct",
) -> InstallReport:
    """Patch the hook targets in place (launcher and import-hook paths). Idempotent."""
    r = rec if rec is not None else RECORDER
    if r.installed_by is None:
        r.installed_by = entry
    rows = list(specs) if specs is not None else specs_for(version or installed_version() or "0.0.0")
    rep = InstallReport()
    for spec in rows:
        owner = resolve_owner(spec, resolve)
        if owner is None:
            rep.skipped.append(spec.target)
            continue
        method = spec.target.rpartition(".")[2]
        current = owner.__dict__[method]
        if getattr(current, WRAPPED_ATTR, False):
            rep.installed.append(spec.target)
            continue
        setattr(owner, method, wrap(current, make_hook(spec, rec)))
        rep.installed.append(spec.target)
    return rep
