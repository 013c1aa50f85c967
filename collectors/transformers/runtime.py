"""The hooks tracekit puts on transformers' generation loops (rows of hooktable.HOOKS), and their state.

``GenerationHooks(target, timer).install(version)`` wraps, for the one target
model object:
- ``GenerationMixin._assisted_decoding`` / ``_sample`` / ``_prefill`` (class
  attributes; a call on any other object, or from inside a draft, passes through):
  they only say which loop is running;
- the candidate generator ``_get_candidate_generator`` returns: its
  ``get_candidates`` (a ``draft`` phase) and ``update_candidate_strategy`` (the
  accept length) on that instance;
- the target's forward, through torch module hooks: ``prefill``, ``verify`` or
  ``decode`` depending on the loop.

Every phase goes through the collectors' phase API (``hooks.phase`` ranges,
``hooks.emit_facts`` late facts) and the engine's ``PhaseTimer`` (profiler
dilation; in every profile mode): each phase, and under ``timing.CYCLE`` each
speculative cycle from its draft to the next draft (or the end of the loop), the
prefill iteration excluded. Facts are host values only: tensor shapes, Python ints and the KV
cache's ``get_seq_length()`` (a shape or a Python counter in every cache class);
nothing here reads a device tensor's value, so no device sync is added.

Sequence length (``seq``): the target's KV cache length when the phase starts,
i.e. every committed token but the last one (which the verify or decode feeds
again); a draft carries its iteration's value, a prefill 0.

Cycles: the per-rank counter advances at every draft (speculation on; that
iteration's target forward shares its number) or at every target forward
(speculation off). Every rank runs the same generate calls, so the numbers agree
across ranks.
"""

from __future__ import annotations

import functools
import importlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.hooks import emit_facts, phase
from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.timing import CYCLE
from tracekit.collectors.transformers.hooktable import cache_kwarg, specs_for


class HookPointMissing(RuntimeError):
    """A hook-table row names something the installed transformers does not have."""


def resolve(spec: HookSpec) -> tuple[Any, Any]:
    """(class object, function) of a class-level row."""
    module = importlib.import_module(spec.module)
    cls = getattr(module, spec.cls.rsplit(".", 1)[1], None)
    fn = getattr(cls, spec.method, None) if cls is not None else None
    if fn is None:
        raise HookPointMissing(f"{spec.target} not found in the installed transformers (hook table row {spec.role})")
    return cls, fn


@dataclass
class _Open:
    name: str
    cycle: int
    rng: phase
    token: Any


@dataclass
class GenerationHooks:
    target: Any
    timer: Any  # tracekit.collectors.timing.PhaseTimer
    mode: str | None = None  # "assisted" | "plain" while the target's loop runs
    cycle: int = -1
    draft_depth: int = 0
    in_prefill: bool = False
    first_forward: bool = False
    len_at_draft: int | None = None
    iter_phase: str | None = None  # the phase of this iteration's target forward (prefill | verify)
    accepts: list[int] = field(default_factory=list)  # per verify, measured (host metadata)
    drafts: list[int] = field(default_factory=list)  # draft tokens proposed per draft call
    calls: Counter[str] = field(default_factory=Counter)
    generator: str | None = None  # class name of the candidate generator transformers picked
    _open: _Open | None = None
    _undo: list[Callable[[], None]] = field(default_factory=list)
    _cycle_token: Any = None  # the timer's whole-cycle entry, open from a draft to the next (or the loop's end)
    _instance_specs: dict[str, HookSpec] = field(default_factory=dict)
    _cache_kw: str = "cache"

    # ---- installation ----------------------------------------------------------------------
    def install(self, version: str) -> list[str]:
        """Install every row of ``version``'s table; returns the targets hooked."""
        done: list[str] = []
        roles: dict[str, Callable[..., Any]] = {
            "assisted_loop": self._loop("assisted"),
            "plain_loop": self._loop("plain"),
            "prefill_call": self._prefill_wrap,
            "candidate_factory": self._factory_wrap,
        }
        for spec in specs_for(version):
            if spec.install != "class":
                continue
            cls, fn = resolve(spec)
            wrapper = functools.wraps(fn)(roles[spec.role](fn))
            setattr(cls, spec.method, wrapper)
            self._undo.append(functools.partial(setattr, cls, spec.method, fn))
            done.append(spec.target)
        self._instance_specs = {s.role: s for s in specs_for(version) if s.install == "instance"}
        self._cache_kw = cache_kwarg(version)
        pre = self.target.register_forward_pre_hook(self._pre, with_kwargs=True)
        post = self.target.register_forward_hook(self._post, with_kwargs=True, always_call=True)
        self._undo.extend([pre.remove, post.remove])
        done.append(f"{type(self.target).__name__}.forward (torch module hooks)")
        return done

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    # ---- loops ------------------------------------------------------------------------------
    def _mine(self, model: Any) -> bool:
        return model is self.target and self.draft_depth == 0

    def _loop(self, mode: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def make(fn: Callable[..., Any]) -> Callable[..., Any]:
            def loop(model: Any, *args: Any, **kwargs: Any) -> Any:
                if not self._mine(model) or self.mode is not None:
                    return fn(model, *args, **kwargs)
                self.mode, self.first_forward = mode, True
                self.calls[f"{mode}_loop"] += 1
                try:
                    return fn(model, *args, **kwargs)
                finally:
                    self._close()
                    self._close_cycle()
                    self.mode, self.len_at_draft, self.iter_phase = None, None, None
            return loop
        return make

    def _prefill_wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def prefill(model: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._mine(model) or self.mode != "plain":
                return fn(model, *args, **kwargs)
            self.in_prefill = True
            try:
                return fn(model, *args, **kwargs)
            finally:
                self.in_prefill = False
        return prefill

    def _factory_wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def factory(model: Any, *args: Any, **kwargs: Any) -> Any:
            gen = fn(model, *args, **kwargs)
            if self._mine(model) and self.mode == "assisted":
                self.generator = type(gen).__name__
                for role, wrap in (("draft", self._draft), ("accept", self._accept)):
                    name = self._instance_specs[role].method
                    setattr(gen, name, functools.partial(wrap, getattr(gen, name)))
            return gen
        return factory

    # ---- draft / accept (instance level) ---------------------------------------------------------
    def _draft(self, orig: Callable[..., Any], input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if self.draft_depth:
            return orig(input_ids, *args, **kwargs)
        self.cycle += 1
        c, bs, length = self.cycle, int(input_ids.shape[0]), int(input_ids.shape[1])
        self.len_at_draft = length
        seq = length - 1  # the verify's KV cache length: every committed token but the last (fed again)
        self.calls["draft"] += 1
        self._close_cycle()
        if not self.first_forward:  # a speculative cycle (draft .. verify .. accept .. next draft); not the prefill's
            self._cycle_token = self.timer.begin(CYCLE)
        token = self.timer.begin("draft")
        self.draft_depth += 1
        try:
            with phase("draft", cycle=c, bs=bs, seq=seq, graphed=False):
                out = orig(input_ids, *args, **kwargs)
        finally:
            self.draft_depth -= 1
            self.timer.end(token)
        k = int(out[0].shape[1]) - length
        self.drafts.append(k)
        emit_facts("draft", c, tok=bs * k)
        return out

    def _accept(self, orig: Callable[..., Any], input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.draft_depth and self.mode == "assisted" and self.len_at_draft is not None:
            accepted = int(input_ids.shape[1]) - self.len_at_draft - 1  # bonus token excluded
            self.calls["accept"] += 1
            if self.iter_phase == "verify":
                self.accepts.append(accepted)
            emit_facts(self.iter_phase or "verify", self.cycle, accept=float(accepted))
            self.len_at_draft = None
        return orig(input_ids, *args, **kwargs)

    # ---- the target's forward (torch module hooks) ------------------------------------------------
    def _pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.mode is None or self.draft_depth or self._open is not None:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        bs, n = int(ids.shape[0]), int(ids.shape[-1])
        cache = kwargs.get(self._cache_kw)
        seq = int(cache.get_seq_length()) if cache is not None else None  # host int: committed context
        if self.mode == "assisted":
            name = "prefill" if self.first_forward else "verify"
            self.iter_phase = name
        else:
            name = "prefill" if self.in_prefill else "decode"
            self.cycle += 1
        self.first_forward = False
        self.calls[name] += 1
        token = self.timer.begin(name)
        rng = phase(name, cycle=self.cycle, bs=bs, tok=bs * n, seq=seq, graphed=False)
        rng.__enter__()
        self._open = _Open(name, self.cycle, rng, token)

    def _post(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        if self.draft_depth == 0:
            self._close()

    def _close_cycle(self) -> None:
        if self._cycle_token is not None:
            tok, self._cycle_token = self._cycle_token, None
            self.timer.end(tok)

    def _close(self) -> None:
        if self._open is not None:
            op, self._open = self._open, None
            op.rng.__exit__(None, None, None)
            self.timer.end(op.token)
