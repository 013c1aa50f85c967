"""What each profile mode costs: per launch against the unprofiled workload, and timing mode per graphed cycle.

    python bench/profile_modes.py [--device auto|cpu|cuda] [--preset kimi-k2-tiny] [--warmup 20] [--cycles 16]
                                  [--ab-rounds 10] [--ab-block 8] [--json out.json]

The built-in workload, world 1. Every mode runs in a fresh process of its own
(a profiler that ran once can leave the process slower: CUPTI state, and the
first H200 run of this benchmark, which ran every mode in one process, saw its
reference blocks move by 30%; samples/h200-lite/README.md). In that process:
``--warmup`` cycles, then ``--cycles`` cycles with no profiler (``before``, the
reference), ``--cycles`` in the mode, ``--cycles`` with no profiler again
(``after``: a cost that outlives the window shows here). All medians of the
wall time per cycle (each cycle ends in a host sync).

1. verify eager (launch bound; SGLang's graph fallback), modes full, lite,
   timing: ratio mode / before, cost per launch = (mode - before) / launches per
   cycle (launch rows per cycle of the window; the full run counts them for
   timing), and the verify phase's GPU time (the workload's CUDA-event timer)
   against ``before``: the eager verify dilation.
2. verify graphed, timing mode: A/B blocks of ``--ab-block`` cycles with the
   timing recorder on (phase ranges + CUDA events per phase) and off, in one
   process that never starts a profiler; the cost per cycle as a share of the
   graphed cycle (target < 1%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

MODES = ("full", "lite", "timing")


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


def _workload(preset: str, verify_graph: str, cycles: int, cuda: bool) -> Any:
    import torch

    from tracekit.collectors.workload.config import make_config
    from tracekit.collectors.workload.runner import Workload

    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    wl = Workload(make_config(preset, verify_graph=verify_graph), 0, 1, device, cycles + 4)
    wl.capture_graphs()
    return wl


def one_mode(mode: str, preset: str, warmup: int, cycles: int, cuda: bool) -> dict[str, Any]:
    """Child process body: before / mode / after blocks of the eager workload."""
    import polars as pl

    from tracekit.collectors.session import ProfilerSession
    from tracekit.schema import LAUNCH

    wl = _workload(preset, "off", warmup + 3 * cycles, cuda)
    c = 0
    for _ in range(warmup):
        wl.run_cycle(c)
        c += 1
    wl.sync()
    blocks: dict[str, list[int]] = {}
    launches = None
    for name in ("before", mode, "after"):
        sess = ProfilerSession(0, cuda, mode=mode) if name == mode else None
        wl.timer.window = name
        if sess is not None:
            sess.start()
        blocks[name], c = timed_cycles(wl, c, cycles)
        if sess is not None:
            sess.stop()
            if mode != "timing":
                launches = sess.events().filter(pl.col("kind") == LAUNCH).height / cycles
        wl.timer.window = None
    st = wl.timer.stats()
    return {"mode": mode, "launches_per_cycle": launches,
            **{f"{k}_cycle_ns": statistics.median(v) for k, v in blocks.items()},
            **{f"{k}_verify_ns": st.get(k, {}).get("verify", {}).get("median_ns") for k in blocks},
            "verify_clock": st.get("before", {}).get("verify", {}).get("clock")}


def timing_ab(preset: str, warmup: int, rounds: int, block: int, cuda: bool) -> dict[str, Any]:
    """Child process body: the graphed workload, timing recorder on / off in A/B blocks, no profiler ever."""
    from tracekit.collectors.hooks import start_recording, stop_recording
    from tracekit.collectors.ranges import RangeRecorder

    wl = _workload(preset, "on", warmup + 2 * rounds * block, cuda)
    c = 0
    for _ in range(warmup):
        wl.run_cycle(c)
        c += 1
    wl.sync()
    rec = RangeRecorder(cuda_events=cuda)
    times: dict[bool, list[int]] = {True: [], False: []}
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
            "cycles_each": len(times[True]), "ranges_recorded": len(rec), "graphs": sorted(wl.graphs)}


def _child(args: list[str]) -> dict[str, Any]:
    res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        raise SystemExit(f"child {args} failed (rc {res.returncode}): {res.stderr.strip().splitlines()[-3:]}")
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--cycles", type=int, default=16)
    ap.add_argument("--ab-rounds", type=int, default=10)
    ap.add_argument("--ab-block", type=int, default=8)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    preset = args.preset or ("kimi-k2-tiny" if cuda else "tiny")
    if args.child == "ab":
        print(json.dumps(timing_ab(preset, args.warmup, args.ab_rounds, args.ab_block, cuda)))
        return 0
    if args.child:
        print(json.dumps(one_mode(args.child, preset, args.warmup, args.cycles, cuda)))
        return 0
    common = ["--device", "cuda" if cuda else "cpu", "--preset", preset, "--warmup", str(args.warmup), "--cycles", str(args.cycles),
              "--ab-rounds", str(args.ab_rounds), "--ab-block", str(args.ab_block)]
    modes = {m: _child([*common, "--child", m]) for m in MODES}
    lpc = modes["full"]["launches_per_cycle"] or modes["lite"]["launches_per_cycle"] or 0.0
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                           "preset": preset, "warmup": args.warmup, "cycles": args.cycles, "eager": modes,
                           "timing_graphed": _child([*common, "--child", "ab"])}
    print(f"device: {out['device']}  torch {out['torch']}  preset {preset}; one fresh process per mode: "
          f"{args.warmup} warm-up, then {args.cycles} cycles each: no profiler (before), the mode, no profiler (after)")
    print(f"verify eager: {lpc:,.0f} launches per cycle")
    for m, r in modes.items():
        b, w, a = r["before_cycle_ns"], r[f"{m}_cycle_ns"], r["after_cycle_ns"]
        per = "" if not lpc else f"  {(w - b) / lpc / 1e3:+.2f} us per launch"
        vb, vw = r["before_verify_ns"], r[f"{m}_verify_ns"]
        vd = "" if not vb or not vw else f"; verify {vb / 1e6:.3f} -> {vw / 1e6:.3f} ms x{vw / vb:.3f} ({r['verify_clock']})"
        print(f"  {m:<7} cycle {b / 1e6:.3f} ms before, {w / 1e6:.3f} ms in the mode (x{w / b:.3f}){per}, "
              f"{a / 1e6:.3f} ms after (x{a / b:.3f}){vd}")
    t = out["timing_graphed"]
    print(f"timing mode, verify graphed (graphs {t['graphs']}): cycle {t['on_median_ns'] / 1e6:.4f} ms recording vs "
          f"{t['off_median_ns'] / 1e6:.4f} ms not: {t['cost_per_cycle_ns'] / 1e3:+.1f} us per cycle = "
          f"{100 * t['share']:+.2f}% of a graphed cycle ({t['cycles_each']} cycles each, A/B blocks; target < 1%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
