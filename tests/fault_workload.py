"""The capture fault tests' failing rank: a workload that wraps the built-in one and, on one rank,
exits, hangs or raises before a given cycle. Given as ``CaptureConfig.workload`` (an engine config
with ``build``, the hook every engine uses); the rank processes import this module by name (spawn
hands them the test's sys.path), so nothing of it is in tracekit."""

from __future__ import annotations

import os
import threading
from typing import Any

FAULTS = ("exit", "hang", "raise")


class FaultyWorkload:
    """``inner`` (a WorkloadConfig) on every rank; on ``rank``, ``kind`` at cycle ``cycle``."""

    def __init__(self, inner: Any, rank: int, cycle: int, kind: str) -> None:
        assert kind in FAULTS
        self.inner, self.rank, self.cycle, self.kind = inner, rank, cycle, kind

    def __getattr__(self, name: str) -> Any:  # the workload's own fields (validate, engine, ...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def build(self, rank: int, world: int, device: Any, cycles_total: int) -> Any:
        from tracekit.collectors.workload.runner import Workload

        wl = Workload(self.inner, rank, world, device, cycles_total)
        return _Failing(wl, self.cycle, self.kind) if rank == self.rank else wl


class _Failing:
    def __init__(self, wl: Any, cycle: int, kind: str) -> None:
        self._wl, self._cycle, self._kind = wl, cycle, kind

    def __getattr__(self, name: str) -> Any:
        if name == "_wl":
            raise AttributeError(name)
        return getattr(self._wl, name)

    def run_cycle(self, cycle: int) -> None:
        if cycle == self._cycle:
            if self._kind == "exit":
                os._exit(17)
            if self._kind == "hang":
                threading.Event().wait()  # until the launcher kills this rank
            raise RuntimeError(f"injected failure at cycle {cycle}")
        self._wl.run_cycle(cycle)
