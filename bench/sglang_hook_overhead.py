"""What tracekit's SGLang hooks cost when no profiler records (the state a server is in between captures).

    python bench/sglang_hook_overhead.py [--cycles 200] [--blocks 10]

Prints, each against a reference measured in the same run:
1. per call: an AROUND-hooked no-op method (the real hook of the verify row,
   installed by runtime.install_direct) vs the same method unhooked, ns per call;
2. per speculative cycle: tests/sglang_shapes.py's v2 worker (SGLang call
   shapes, small CPU matmuls) with all hook-table rows installed vs a private
   unhooked copy, alternating blocks, median per-cycle time of each, ratio;
3. per cycle with tracekit's own window recording (profile mode timing on a CPU:
   host-clock phase ranges, no CUDA events; collectors/sglang/window.py) vs the
   same hooked worker with no window, alternating blocks in one process, timed
   in CPU time of the thread (``time.thread_time_ns``), so other processes' load
   on a shared machine does not enter the ratio;
4. the cycle-boundary check every cycle hook makes for that window (``Recorder.tick``: a
   clock read, the control file looked at every 100 ms) vs an empty method call, ns per call.
Then the CPU seconds of the process and the load average (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _shapes_module() -> ModuleType:
    """tests/sglang_shapes.py, loaded by path (it is not an installed module)."""
    from modload import load_path  # bench/ is on sys.path when this runs as a script

    return load_path("bench_sglang_shapes", TESTS / "sglang_shapes.py")


def load_shapes() -> ModuleType:
    return _shapes_module().fresh_copy("bench_shapes")


def hook_all(mod: ModuleType, version: str) -> object:
    from tracekit.collectors.sglang import runtime
    from tracekit.collectors.sglang.hooktable import specs_for

    rows = mod.retarget(specs_for(version), mod)
    rec = runtime.Recorder()
    rep = runtime.install_direct(specs=rows, rec=rec)
    assert not rep.skipped
    return rec


def per_call(n: int) -> tuple[float, float]:
    from tracekit.collectors.hookspec import HookSpec
    from tracekit.collectors.sglang import runtime

    class Plain:
        def verify(self, batch: object) -> bool:
            return True

    class Hooked:
        def verify(self, batch: object) -> bool:
            return True

    mod = load_shapes()
    mod.Hooked = Hooked
    runtime.install_direct(specs=[HookSpec(f"{mod.__name__}.Hooked.verify", "verify", ("batch",))], rec=runtime.Recorder())
    batch = mod.ScheduleBatch.make(4, 128, mod.ForwardMode.DECODE)
    out = []
    for obj in (Plain(), Hooked()):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                obj.verify(batch)
            best = min(best, (time.perf_counter_ns() - t0) / n)
        out.append(best)
    return out[0], out[1]


def per_cycle(cycles: int, blocks: int, version: str) -> tuple[float, float]:
    plain_mod, hooked_mod = load_shapes(), load_shapes()
    hook_all(hooked_mod, version)
    times: dict[str, list[float]] = {"plain": [], "hooked": []}
    workers = {"plain": plain_mod.make_worker(version, 0), "hooked": hooked_mod.make_worker(version, 0)}
    mods = {"plain": plain_mod, "hooked": hooked_mod}
    for key in workers:  # warm up
        mods[key].drive(workers[key], cycles=5)
    for b in range(blocks):
        for key in (("plain", "hooked") if b % 2 == 0 else ("hooked", "plain")):
            t0 = time.perf_counter_ns()
            mods[key].drive(workers[key], cycles=cycles)
            times[key].append((time.perf_counter_ns() - t0) / (cycles + 1))
    return statistics.median(times["plain"]), statistics.median(times["hooked"])


def per_cycle_window(cycles: int, blocks: int, version: str) -> tuple[float, float, int]:
    """Median per-cycle time of the hooked worker without and with a timing window open; ranges recorded."""
    import tempfile

    from tracekit.collectors.sglang import window

    mod = load_shapes()
    rec: Any = hook_all(mod, version)
    ctl = Path(tempfile.mkdtemp(prefix="tk-bench-window-"))
    rec.window = window.Agent(rec, ctl)
    worker = mod.make_worker(version, 0)
    mod.drive(worker, cycles=5)
    times: dict[str, list[float]] = {"off": [], "window": []}
    recorded = 0
    for b in range(blocks):
        for key in (("off", "window") if b % 2 == 0 else ("window", "off")):
            win = None
            if key == "window":  # open and start it outside the timed block
                win = window.open_window(ctl, "timing", None)
                rec.window._last_poll = 0
                rec.window.tick()
            t0 = time.thread_time_ns()  # CPU time of this thread: other processes' load does not count
            mod.drive(worker, cycles=cycles)
            times[key].append((time.thread_time_ns() - t0) / (cycles + 1))
            if win is not None:  # stop and deliver it outside the timed block
                win.stop()
                rec.window._last_poll = 0
                rec.window.tick()
                recorded += json.loads((ctl / win.id / "ranges-TP-0.json").read_text())["ranges"]
    return statistics.median(times["off"]), statistics.median(times["window"]), recorded


def per_tick(n: int) -> tuple[float, float]:
    """Best-of-5 ns per ``Recorder.tick()`` (no window open) and per empty method call."""
    import tempfile

    from tracekit.collectors.sglang import runtime, window

    rec = runtime.Recorder()
    rec.window = window.Agent(rec, Path(tempfile.mkdtemp(prefix="tk-bench-tick-")))

    class Empty:
        def tick(self) -> None:
            return None

    out = []
    for obj in (Empty(), rec):
        best = float("inf")
        for _ in range(5):
            t0 = time.thread_time_ns()
            for _ in range(n):
                obj.tick()
            best = min(best, (time.thread_time_ns() - t0) / n)
        out.append(best)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cycles", type=int, default=200)
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--version", default="0.5.23")
    a = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    import torch

    torch.set_num_threads(1)  # the toy forwards are tiny: intra-op threads only add noise
    bare, hooked = per_call(a.calls)
    print(f"per call, profiler off: hooked verify {hooked:.0f} ns vs bare {bare:.0f} ns "
          f"(+{hooked - bare:.0f} ns, ratio {hooked / bare:.2f})")
    plain, hk = per_cycle(a.cycles, a.blocks, a.version)
    print(f"per cycle ({a.version} shapes, all hook rows, profiler off): hooked {hk / 1e3:.1f} us vs plain "
          f"{plain / 1e3:.1f} us, ratio {hk / plain:.4f} (+{(hk - plain) / 1e3:.1f} us per cycle; "
          f"{(hk - plain) / 29e6 * 100:.3f}% of the seed's 29 ms verify alone)")
    off, on, recorded = per_cycle_window(a.cycles, a.blocks, a.version)
    print(f"per cycle ({a.version} shapes, all hook rows; thread CPU time): timing window recording {on / 1e3:.1f} us "
          f"vs no window {off / 1e3:.1f} us, ratio {on / off:.4f} (+{(on - off) / 1e3:.1f} us per cycle; {recorded} ranges "
          f"recorded in {a.blocks // 2 + a.blocks % 2} windows; host clock, no CUDA events on a CPU)")
    empty, tick = per_tick(a.calls)
    print(f"cycle-boundary tick, no window open (thread CPU time): {tick:.0f} ns vs empty method {empty:.0f} ns "
          f"(+{tick - empty:.0f} ns per cycle)")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"process CPU {ru.ru_utime + ru.ru_stime:.1f} s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
