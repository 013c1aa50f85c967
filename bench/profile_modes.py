"""What each profile mode costs: per launch against the unprofiled workload, and timing mode per graphed cycle.

    python bench/profile_modes.py [--device auto|cpu|cuda] [--preset kimi-k2-tiny] [--cycles 12] [--rounds 2]
                                  [--ab-rounds 10] [--ab-block 10] [--json out.json]

One process, one device (world 1), the built-in workload, every figure against
a reference measured in the same run:

1. verify eager (launch bound; SGLang's graph fallback): blocks of ``--cycles``
   cycles with no profiler (``none``, hooks installed), then in ``full``,
   ``lite`` and ``timing`` mode (``collectors.session.ProfilerSession``), the
   order rotated every round. Per mode: the median wall time per cycle (each
   cycle ends in a host sync), the ratio to ``none``, and the cost per launch =
   (mode median - none median) / launches per cycle (launch rows per cycle of
   the full window); the verify phase's GPU time (the workload's CUDA-event
   timer) against ``none``: the eager verify dilation.
2. verify graphed: A/B blocks of ``--ab-block`` cycles with the timing-mode
   recorder on (phase ranges + CUDA events per phase) and off; the median cycle
   of each, and the cost per cycle as a share of the graphed cycle (target < 1%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

MODES = ("none", "full", "lite", "timing")


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


def eager_modes(wl: Any, cuda: bool, cycles: int, rounds: int) -> dict[str, Any]:
    import polars as pl

    from tracekit.collectors.session import ProfilerSession
    from tracekit.schema import LAUNCH

    per: dict[str, list[int]] = {m: [] for m in MODES}
    launches: dict[str, float] = {}
    c = 0
    for _ in range(3):  # warm-up (eager shapes, allocator)
        wl.run_cycle(c)
        c += 1
    wl.sync()
    for r in range(rounds):
        order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
        for mode in order:
            sess = None if mode == "none" else ProfilerSession(0, cuda, mode=mode)
            wl.timer.window = mode
            if sess is not None:
                sess.start()
            times, c = timed_cycles(wl, c, cycles)
            if sess is not None:
                sess.stop()
            wl.timer.window = None
            per[mode].extend(times)
            if sess is not None and mode in ("full", "lite") and mode not in launches:
                ev = sess.events()
                launches[mode] = ev.filter(pl.col("kind") == LAUNCH).height / cycles
    st = wl.timer.stats()
    base = statistics.median(per["none"])
    lpc = launches.get("full") or launches.get("lite") or 0.0
    out: dict[str, Any] = {"launches_per_cycle": launches, "cycles_each": len(per["none"]), "modes": {}}
    v0 = st.get("none", {}).get("verify", {}).get("median_ns")
    for m in MODES:
        med = statistics.median(per[m])
        v = st.get(m, {}).get("verify", {}).get("median_ns")
        out["modes"][m] = {
            "cycle_median_ns": med,
            "ratio": med / base,
            "per_launch_ns": None if m == "none" or not lpc else (med - base) / lpc,
            "verify_median_ns": v,
            "verify_clock": st.get(m, {}).get("verify", {}).get("clock"),
            "verify_dilation": None if not v or not v0 else v / v0,
        }
    return out


def timing_ab(wl: Any, cuda: bool, rounds: int, block: int) -> dict[str, Any]:
    from tracekit.collectors.hooks import start_recording, stop_recording
    from tracekit.collectors.ranges import RangeRecorder

    times: dict[bool, list[int]] = {True: [], False: []}
    c = 0
    for _ in range(3):
        wl.run_cycle(c)
        c += 1
    wl.sync()
    rec = RangeRecorder(cuda_events=cuda)
    for r in range(rounds):
        for on in ((True, False) if r % 2 == 0 else (False, True)):
            if on:
                start_recording(rec, record_function=False)
            t, c = timed_cycles(wl, c, block)
            if on:
                stop_recording()
            times[on].extend(t)
    on, off = statistics.median(times[True]), statistics.median(times[False])
    return {"on_median_ns": on, "off_median_ns": off, "cost_per_cycle_ns": on - off, "share": (on - off) / off,
            "cycles_each": len(times[True]), "ranges_recorded": len(rec)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--cycles", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ab-rounds", type=int, default=10)
    ap.add_argument("--ab-block", type=int, default=10)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from tracekit.collectors.workload.config import make_config
    from tracekit.collectors.workload.runner import Workload

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    preset = args.preset or ("kimi-k2-tiny" if cuda else "tiny")
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                           "preset": preset}
    eager = Workload(make_config(preset, verify_graph="off"), 0, 1, device, 3 + len(MODES) * args.rounds * args.cycles + 2)
    eager.capture_graphs()
    out["eager"] = eager_modes(eager, cuda, args.cycles, args.rounds)
    del eager
    if cuda:
        torch.cuda.empty_cache()
    graphed = Workload(make_config(preset, verify_graph="on"), 0, 1, device, 3 + 2 * args.ab_rounds * args.ab_block + 2)
    graphed.capture_graphs()
    out["graphs"] = sorted(graphed.graphs)
    out["timing_graphed"] = timing_ab(graphed, cuda, args.ab_rounds, args.ab_block)

    e = out["eager"]
    print(f"device: {out['device']}  torch {out['torch']}  preset {preset}; graphs in the graphed workload: {out['graphs']}")
    print(f"verify eager: {e['cycles_each']} cycles per mode; launches per cycle "
          + ", ".join(f"{m} {n:,.0f}" for m, n in e["launches_per_cycle"].items()))
    for m, r in e["modes"].items():
        pl_ = "" if r["per_launch_ns"] is None else f"  {r['per_launch_ns'] / 1e3:+.2f} us per launch"
        vd = "" if r["verify_dilation"] is None else f"; verify {r['verify_median_ns'] / 1e6:.3f} ms x{r['verify_dilation']:.3f} ({r['verify_clock']})"
        print(f"  {m:<7} cycle {r['cycle_median_ns'] / 1e6:.3f} ms  x{r['ratio']:.3f} vs none{pl_}{vd}")
    t = out["timing_graphed"]
    print(f"timing mode, verify graphed: cycle {t['on_median_ns'] / 1e6:.4f} ms recording vs {t['off_median_ns'] / 1e6:.4f} ms "
          f"not: {t['cost_per_cycle_ns'] / 1e3:+.1f} us per cycle = {100 * t['share']:+.2f}% of a graphed cycle "
          f"({t['cycles_each']} cycles each, A/B blocks; target < 1%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
