"""Timed blocks of the built-in workload, shared by the benchmarks (capture_overhead.py, profile_modes.py).

``timed_cycles(wl, start, n)``: wall time of each of ``n`` cycles (``perf_counter_ns``; every cycle ends
in a host sync, so the time is the cycle's, queue included).

``ab_blocks(wl, start, rounds, block, switch, drop=0, label=None)``: the same process alternates blocks of
``block`` cycles in state on and off, ``rounds`` times, the order rotated every round (on/off, off/on, ...),
so that a drift (clocks, caches, the KV cache growing) falls on both states alike. ``switch(on)`` sets the
state before a block (start / stop a profiler, hooks on / off); the first ``drop`` cycles of each block
are run but not timed (a profiler's start-up, a state's first cycle). ``label(on)`` names the workload's
phase-timer window of the block (its CUDA-event phase times), None: not timed. Returns the per-cycle
times of each state, each block's median (the reference's spread), and the next cycle index.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


def timed_cycles(wl: Any, start: int, n: int) -> tuple[list[int], int]:
    out = []
    c = start
    for _ in range(n):
        t0 = time.perf_counter_ns()
        wl.run_cycle(c)
        wl.sync()
        out.append(time.perf_counter_ns() - t0)
        c += 1
    return out, c


@dataclass
class AB:
    times: dict[bool, list[int]] = field(default_factory=lambda: {True: [], False: []})
    blocks: dict[bool, list[int]] = field(default_factory=lambda: {True: [], False: []})  # median of each block
    next_cycle: int = 0

    def median(self, on: bool) -> float:
        return float(statistics.median(self.times[on]))

    def summary(self) -> dict[str, Any]:
        on, off = self.median(True), self.median(False)
        return {"on_median_ns": on, "off_median_ns": off, "ratio": on / off, "cost_per_cycle_ns": on - off,
                "cycles_each": len(self.times[True]), "on_blocks_ns": self.blocks[True],
                "off_blocks_ns": self.blocks[False]}


def ab_blocks(wl: Any, start: int, rounds: int, block: int, switch: Callable[[bool], None], drop: int = 0,
              label: Callable[[bool], str | None] | None = None) -> AB:
    res = AB()
    c = start
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            switch(on)
            wl.timer.window = None
            for _ in range(drop):
                wl.run_cycle(c)
                c += 1
            wl.sync()
            wl.timer.window = label(on) if label is not None else None
            t, c = timed_cycles(wl, c, block)
            wl.timer.window = None
            res.times[on].extend(t)
            res.blocks[on].append(int(statistics.median(t)))
    switch(False)
    res.next_cycle = c
    return res
