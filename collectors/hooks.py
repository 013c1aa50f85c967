"""Phase hooks: mark any callable or block of code as a phase (draft, verify, ...).

A phase is emitted as
- a ``torch.profiler.record_function`` range (seen by Kineto / torch.profiler,
  hence by ``tracekit capture`` and SGLang's ``/start_profile``), only while a
  torch profiler is recording;
- an NVTX range (package ``nvtx``, for Nsight Systems), only when an NVTX tool is
  attached (``NVTX_INJECTION64_PATH`` set, as nsys does) or ``TRACEKIT_NVTX=1``;
  ``TRACEKIT_NVTX=0`` turns it off.
- a host range in a ``RangeRecorder`` (``collectors/ranges.py``), only while one is
  installed by ``start_recording`` (profile modes ``lite`` and ``timing``, where the
  profiler records no ``record_function`` ranges or does not run);
  ``start_recording(rec, record_function=False)`` also stops the
  ``record_function`` ranges while it lasts.
The label is ``tracekit.finalize.phases.format_label(phase, cycle=.., bs=.., tok=.., seq=..,
graphed=..)``; facts known only afterwards (accept length) go into a zero-length
range named ``tracekit.finalize.phases.format_facts(...)`` emitted right after the phase.

Public API (reused by the SGLang integration):

- ``phase(name, **facts)``: context manager for code you own::

      with phase("verify", cycle=c, bs=4, tok=16, seq=1024, graphed=True):
          run_verify()
      emit_facts("verify", c, accept=2.5)

- ``phase_hook(fn, name, facts=None, late=None)``: wrap any callable. ``facts(args,
  kwargs) -> dict`` gives the label facts before the call, ``late(result, args,
  kwargs) -> dict | None`` the late facts (must include ``cycle``).  Returns a
  ``PhaseHook`` (callable, same signature).  ``install_hook(owner, attr, ...)``
  replaces ``owner.attr`` by its hook and returns the hook (``hook.uninstall()``).

Guarantees: when nothing records, a call costs one ``torch.autograd._profiler_enabled()``
check and a Python frame (bench/capture_overhead.py measures it); exceptions
of the wrapped function propagate unchanged; an exception inside the hook
machinery (a facts callable, the profiler, NVTX) never reaches the host program:
it disables that hook (it then calls straight through) and is logged once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Generic, TypeVar

from tracekit import settings
from tracekit.finalize.phases import format_facts, format_label

log = logging.getLogger("tracekit.collectors.hooks")

R = TypeVar("R")
Facts = Mapping[str, int | float | bool | None]


def _torch_profiler_enabled() -> Callable[[], bool]:
    try:
        import torch

        fn: Callable[[], bool] = torch.autograd._profiler_enabled  # type: ignore[attr-defined]
        return fn
    except Exception:  # torch missing or too old: nothing records through it
        return lambda: False


def _nvtx_module() -> Any:
    """The nvtx module when an NVTX consumer is (or is asked to be) present, else None."""
    flag = settings.current().nvtx
    if flag is False:
        return None
    if flag is None and not os.environ.get("NVTX_INJECTION64_PATH"):
        return None
    try:
        import nvtx

        return nvtx
    except ImportError:
        return None


class _Backend:
    """Lazily resolved recorders, shared by all hooks of the process."""

    enabled: Callable[[], bool] | None = None
    nvtx: Any = None
    resolved = False
    recorder: Any = None  # a RangeRecorder while start_recording is in force
    record_function = True  # False: no record_function ranges (lite mode: the profiler would not keep them)

    @classmethod
    def resolve(cls) -> None:
        if not cls.resolved:
            cls.enabled = _torch_profiler_enabled()
            cls.nvtx = _nvtx_module()
            cls.resolved = True

    @classmethod
    def reset(cls) -> None:
        """Re-read the environment (tests; after attaching a tool)."""
        cls.resolved = False


def start_recording(recorder: Any, record_function: bool = True) -> None:
    """Record every phase range and facts marker of this process into ``recorder`` from now on."""
    _Backend.resolve()
    _Backend.recorder = recorder
    _Backend.record_function = record_function


def stop_recording() -> None:
    """End ``start_recording``: back to record_function (when a profiler records) and NVTX only."""
    _Backend.recorder = None
    _Backend.record_function = True


def _record_function(label: str) -> Any:
    import torch

    return torch.autograd.profiler.record_function(label)


class _Range:
    """One open phase range (record_function, NVTX and/or a recorder range)."""

    __slots__ = ("_nv", "_rec", "_rf", "_tok")

    def __init__(self, name: str, facts: dict[str, Any], torch_on: bool, nv: Any, rec: Any = None) -> None:
        self._rf: Any = None
        self._nv: Any = None
        self._rec: Any = None
        self._tok: Any = None
        # the recorder formats its labels when its frame is built; record_function / NVTX need the text now
        label = format_label(name, **facts) if torch_on or nv is not None else ""
        if rec is not None:
            self._tok = rec.open_phase(name, facts)
            self._rec = rec
        if torch_on:
            rf = _record_function(label)
            rf.__enter__()
            self._rf = rf
        if nv is not None:
            nv.push_range(label)
            self._nv = nv

    def close(self) -> None:
        if self._nv is not None:
            self._nv.pop_range()
            self._nv = None
        if self._rf is not None:
            rf, self._rf = self._rf, None
            rf.__exit__(None, None, None)
        if self._rec is not None:
            rec, self._rec = self._rec, None
            rec.close(self._tok)


def _open(name: str, facts_fn: Callable[[], dict[str, Any]]) -> _Range | None:
    _Backend.resolve()
    on = _Backend.record_function and (_Backend.enabled() if _Backend.enabled is not None else False)
    rec = _Backend.recorder
    if not on and _Backend.nvtx is None and rec is None:
        return None
    return _Range(name, facts_fn(), on, _Backend.nvtx, rec)


def emit_facts(phase_name: str, cycle: int, **facts: int | float | bool | None) -> None:
    """Zero-length facts marker (e.g. accept length) for a phase instance; silent when nothing records."""
    try:
        _Backend.resolve()
        rec = _Backend.recorder
        if rec is not None:
            rec.facts_marker(phase_name, cycle, facts)
        if _Backend.record_function and _Backend.enabled is not None and _Backend.enabled():
            with _record_function(format_facts(phase_name, cycle, **facts)):
                pass
    except Exception as exc:
        _warn_once(("facts", phase_name), f"facts marker for {phase_name!r} failed and is skipped: {exc!r}")


_warned: set[Any] = set()


def _warn_once(key: Any, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning("tracekit: %s", msg)


class phase:
    """Context manager marking a block as one phase instance. Never raises from its own machinery."""

    __slots__ = ("_facts", "_name", "_range")

    def __init__(self, name: str, **facts: int | float | bool | None) -> None:
        self._name = name
        self._facts = facts
        self._range: _Range | None = None

    def __enter__(self) -> phase:
        en = _Backend.enabled
        if en is not None and _Backend.nvtx is None and _Backend.recorder is None and not en():
            return self  # fast path: nothing records
        try:
            self._range = _open(self._name, lambda: self._facts)
        except Exception as exc:
            self._range = None
            _warn_once(("phase", self._name), f"phase range {self._name!r} could not be opened: {exc!r}")
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._range is not None:
            try:
                self._range.close()
            except Exception as exc:
                _warn_once(("phase-close", self._name), f"phase range {self._name!r} could not be closed: {exc!r}")
            self._range = None


class PhaseHook(Generic[R]):
    """A callable that runs ``fn`` inside a phase range; see the module docstring."""

    def __init__(
        self,
        fn: Callable[..., R],
        name: str,
        facts: Callable[[tuple[Any, ...], dict[str, Any]], Facts] | None = None,
        late: Callable[[R, tuple[Any, ...], dict[str, Any]], Facts | None] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.facts = facts
        self.late = late
        self.disabled = False
        self.error: str | None = None
        self.calls = 0
        self._owner: Any = None
        self._attr: str | None = None
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", name)
        self.__doc__ = getattr(fn, "__doc__", None)

    def _disable(self, where: str, exc: BaseException) -> None:
        self.disabled = True
        self.error = f"{where}: {exc!r}"
        _warn_once(("hook", id(self)), f"hook for phase {self.name!r} disabled after an error in {where}: {exc!r}")

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        en = _Backend.enabled
        if self.disabled or (en is not None and _Backend.nvtx is None and _Backend.recorder is None and not en()):
            return self.fn(*args, **kwargs)  # fast path: nothing records
        rng: _Range | None = None
        try:
            self.calls += 1
            rng = _open(self.name, lambda: dict(self.facts(args, kwargs)) if self.facts else {})
        except Exception as exc:
            self._disable("opening the range", exc)
            rng = None
        try:
            result = self.fn(*args, **kwargs)
        finally:
            if rng is not None:
                try:
                    rng.close()
                except Exception as exc:
                    self._disable("closing the range", exc)
        if rng is not None and self.late is not None and not self.disabled:
            try:
                late = self.late(result, args, kwargs)
                if late:
                    lf = dict(late)
                    cycle = lf.pop("cycle", None)
                    if cycle is None:
                        raise ValueError("late facts need a 'cycle'")
                    emit_facts(self.name, int(cycle), **lf)
            except Exception as exc:
                self._disable("the late-facts callable", exc)
        return result

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        """Bind like a function when installed on a class."""
        if obj is None:
            return self
        import functools

        return functools.partial(self.__call__, obj)

    def uninstall(self) -> None:
        if self._owner is not None and self._attr is not None:
            setattr(self._owner, self._attr, self.fn)
            self._owner = None


def phase_hook(
    fn: Callable[..., R],
    name: str,
    facts: Callable[[tuple[Any, ...], dict[str, Any]], Facts] | None = None,
    late: Callable[[R, tuple[Any, ...], dict[str, Any]], Facts | None] | None = None,
) -> PhaseHook[R]:
    """Wrap ``fn`` as phase ``name``; see the module docstring."""
    return PhaseHook(fn, name, facts, late)


def install_hook(
    owner: Any,
    attr: str,
    name: str,
    facts: Callable[[tuple[Any, ...], dict[str, Any]], Facts] | None = None,
    late: Callable[[Any, tuple[Any, ...], dict[str, Any]], Facts | None] | None = None,
) -> PhaseHook[Any]:
    """Replace ``owner.attr`` (class or module attribute) by a phase hook around it."""
    original = getattr(owner, attr)
    hook: PhaseHook[Any] = PhaseHook(original, name, facts, late)
    hook._owner, hook._attr = owner, attr
    setattr(owner, attr, hook)
    return hook


__all__ = ["PhaseHook", "emit_facts", "install_hook", "phase", "phase_hook", "start_recording", "stop_recording"]
