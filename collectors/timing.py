"""Phase timers for profiler dilation: the same phases timed without and with the profiler.

GPU: a CUDA event is recorded on the current stream before and after each phase
(``elapsed_time`` = GPU time between the two points, which includes any queue
the phase waits behind); the host time (``perf_counter_ns``) is kept too.  CPU:
host time only.  Each measurement belongs to a window label (``unprofiled``
before the window, ``profiled`` inside it; ``timed`` inside a timing-mode window,
where no profiler runs). Besides the phases, the workload times its whole
speculative cycle (draft start to draft_extend end) under the name ``cycle``
(``split_cycle`` separates it).

``PhaseTimer.stats()`` gives, per window and phase::

    {"count": n, "mean_ns": x, "median_ns": y, "host_mean_ns": .., "host_median_ns": ..,
     "clock": "cuda_event" | "perf_counter"}

where ``mean_ns``/``median_ns`` are GPU times on GPU and host times on CPU (int ns).

The unprofiled reference of a capture is timed twice, before the window
(``unprofiled``) and after it (``unprofiled_after``), at the workload's own
shapes: ``stats(pool=REFERENCE_POOL)`` adds the pooled window ``reference``
(medians over every reference cycle), which the capture records as its
``unprofiled`` timers; ``reference_spread`` gives, per phase, the two blocks'
medians, so the ratio can be printed beside the spread of its reference.
"""

from __future__ import annotations

import statistics
import time
from typing import Any


class PhaseTimer:
    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.window: str | None = None  # None: not timing
        self._records: list[tuple[str, str, int, Any, Any]] = []
        self._torch: Any = None
        if cuda:
            import torch

            self._torch = torch

    def begin(self, phase: str) -> tuple[str, int, Any] | None:
        if self.window is None:
            return None
        ev = None
        if self.cuda:
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
        return (phase, time.perf_counter_ns(), ev)

    def end(self, token: tuple[str, int, Any] | None) -> None:
        if token is None or self.window is None:
            return
        phase, t0, ev0 = token
        host = time.perf_counter_ns() - t0
        ev1 = None
        if self.cuda:
            ev1 = self._torch.cuda.Event(enable_timing=True)
            ev1.record()
        self._records.append((self.window, phase, host, ev0, ev1))

    def stats(self, pool: dict[str, tuple[str, ...]] | None = None) -> dict[str, dict[str, dict[str, Any]]]:
        """Per window and phase statistics (synchronises the device first on GPU). ``pool``: extra windows
        made of the records of several (``{"reference": ("unprofiled", "unprofiled_after")}``)."""
        if self.cuda:
            self._torch.cuda.synchronize()
        host: dict[str, dict[str, list[int]]] = {}
        dev: dict[str, dict[str, list[int]]] = {}
        for window, phase, h, ev0, ev1 in self._records:
            names = [window, *(p for p, parts in (pool or {}).items() if window in parts)]
            g = None if ev0 is None or ev1 is None else round(ev0.elapsed_time(ev1) * 1e6)
            for w in names:
                host.setdefault(w, {}).setdefault(phase, []).append(h)
                if g is not None:
                    dev.setdefault(w, {}).setdefault(phase, []).append(g)
        return {window: summarize(hs, dev.get(window, {})) for window, hs in host.items()}


def summarize(host: dict[str, list[int]], dev: dict[str, list[int]]) -> dict[str, dict[str, Any]]:
    """Per phase: count, mean/median of the GPU times where ``dev`` has them (else the host times), host mean/median."""
    out: dict[str, dict[str, Any]] = {}
    for phase, hs in host.items():
        main = dev.get(phase) or hs
        out[phase] = {
            "count": len(hs),
            "mean_ns": round(statistics.fmean(main)),
            "median_ns": int(statistics.median(main)),
            "host_mean_ns": round(statistics.fmean(hs)),
            "host_median_ns": int(statistics.median(hs)),
            "clock": "cuda_event" if dev.get(phase) else "perf_counter",
        }
    return out


BEFORE, AFTER, REFERENCE = "unprofiled", "unprofiled_after", "reference"
REFERENCE_POOL: dict[str, tuple[str, ...]] = {REFERENCE: (BEFORE, AFTER)}


def reference_spread(stats: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, int]]:
    """Per phase (and ``cycle``) timed in both reference blocks: ``{"before_ns", "after_ns", "before_count",
    "after_count"}`` (each block's median, the main clock)."""
    b, a = stats.get(BEFORE, {}), stats.get(AFTER, {})
    return {p: {"before_ns": b[p]["median_ns"], "after_ns": a[p]["median_ns"], "before_count": b[p]["count"],
                "after_count": a[p]["count"]} for p in b if p in a}


CYCLE = "cycle"  # the timer's whole-cycle entry (draft start to draft_extend end), not a phase


def split_cycle(window: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """(phase stats, the whole-cycle entry or None) of one window of ``PhaseTimer.stats``."""
    phases = {p: st for p, st in window.items() if p != CYCLE}
    return phases, window.get(CYCLE)


def dilation(unprofiled: dict[str, dict[str, Any]], profiled: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Profiled over unprofiled median per phase present in both.

    Medians, not means: the first profiled cycle carries the profiler's start-up
    (CUPTI activation: +0.4 s once on H200) and eager phases pay once for every
    new shape; both would swamp a mean over a dozen cycles.
    """
    return {
        p: profiled[p]["median_ns"] / unprofiled[p]["median_ns"]
        for p in unprofiled
        if p in profiled and unprofiled[p]["median_ns"] > 0
    }
