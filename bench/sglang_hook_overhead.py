"""What tracekit's SGLang hooks cost when no profiler records (the state a server is in between captures).

    python bench/sglang_hook_overhead.py [--cycles 200] [--blocks 10]

Prints, each against a reference measured in the same run:
1. per call: an AROUND-hooked no-op method (the real hook of the verify row,
   installed by runtime.install_direct) vs the same method unhooked, ns per call;
2. per speculative cycle: tests/sglang_shapes.py's v2 worker (SGLang call
   shapes, small CPU matmuls) with all hook-table rows installed vs a private
   unhooked copy, alternating blocks, median per-cycle time of each, ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _shapes_module() -> ModuleType:
    """tests/sglang_shapes.py, loaded by path (it is not an installed module)."""
    spec = importlib.util.spec_from_file_location("bench_sglang_shapes", TESTS / "sglang_shapes.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_shapes() -> ModuleType:
    return _shapes_module().fresh_copy("bench_shapes")


def hook_all(mod: ModuleType, version: str) -> None:
    from tracekit.collectors.sglang import runtime
    from tracekit.collectors.sglang.hooktable import specs_for

    rows = mod.retarget(specs_for(version), mod)
    rep = runtime.install_direct(specs=rows, rec=runtime.Recorder())
    assert not rep.skipped


def per_call(n: int) -> tuple[float, float]:
    from tracekit.collectors.sglang import runtime
    from tracekit.collectors.sglang.hooktable import HookSpec

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


if __name__ == "__main__":
    main()
