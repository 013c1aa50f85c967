"""What capturing costs: hooks with the profiler off, profiler dilation per phase, event conversion.

    python bench/capture_overhead.py [--device auto|cpu|cuda] [--preset kimi-k2-tiny] [--json out.json]

One process, one device (world 1, no collectives), the built-in workload with
verify graphed (on GPU; eager on CPU). Prints, each against a reference
measured in the same run:
1. hook call cost, profiler off: ``phase_hook``-wrapped no-op vs the bare no-op
   and ``with phase(...)`` vs an empty block (ns per call);
2. cycle time with hooks installed (profiler off) vs no hooks at all: blocks of
   cycles alternating A/B, median per-cycle time of each, ratio (target < 1.01);
3. profiled vs unprofiled mean time per phase (CUDA events on GPU), ratio;
4. turning the window into the event table: ``kineto_results.events()`` +
   conversion vs ``export_chrome_trace`` + ``tracekit.ingest`` (time ratio, event counts).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Any


def micro(n: int) -> dict[str, float]:
    from tracekit.collectors.hooks import phase, phase_hook

    def noop() -> None:
        return None

    hooked = phase_hook(noop, "verify", facts=lambda a, k: {"cycle": 1, "bs": 4})
    res: dict[str, float] = {}
    for label, fn in (("bare_call", noop), ("hooked_call", hooked)):
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter_ns() - t0) / n)
        res[label + "_ns"] = best
    best_e = best_p = float("inf")
    for _ in range(5):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            pass
        best_e = min(best_e, (time.perf_counter_ns() - t0) / n)
        t0 = time.perf_counter_ns()
        for i in range(n):
            with phase("verify", cycle=i, bs=4, tok=16, seq=1024, graphed=True):
                pass
        best_p = min(best_p, (time.perf_counter_ns() - t0) / n)
    res["empty_block_ns"] = best_e
    res["phase_block_ns"] = best_p
    return res


def cycles_ab(wl: Any, start: int, rounds: int, block: int) -> tuple[dict[str, float], int]:
    """Alternate blocks of cycles with hooks on / off (blocks.ab_blocks); per-cycle wall time."""
    from blocks import ab_blocks

    res = ab_blocks(wl, start, rounds, block, lambda on: setattr(wl, "hooks", on))
    wl.hooks = True
    s = res.summary()
    return {"hooks_median_ns": s["on_median_ns"], "nohooks_median_ns": s["off_median_ns"], "ratio": s["ratio"],
            "cycles_each": s["cycles_each"]}, res.next_cycle


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--window", type=int, default=8, help="cycles timed unprofiled, then profiled")
    ap.add_argument("--micro-n", type=int, default=200_000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import torch

    from tracekit.collectors.session import ProfilerSession
    from tracekit.collectors.timing import dilation
    from tracekit.collectors.workload.config import make_config
    from tracekit.collectors.workload.runner import Workload

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    preset = args.preset or ("kimi-k2-tiny" if cuda else "tiny")
    cfg = make_config(preset, verify_graph="on", decode_every=1)
    total = 3 + 2 * args.rounds * args.block + 2 * args.window + 2
    wl = Workload(cfg, 0, 1, device, total)
    wl.capture_graphs()
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "preset": preset,
        "graphs": sorted(wl.graphs),
        "graph_error": wl.graph_error,
        "moe_impl": wl.moe_impl,
    }
    out["micro"] = micro(args.micro_n)
    c = 0
    for _ in range(3):
        wl.run_cycle(c)
        c += 1
    wl.sync()
    out["cycle_ab"], c = cycles_ab(wl, c, args.rounds, args.block)

    wl.timer.window = "unprofiled"
    for _ in range(args.window):
        wl.run_cycle(c)
        c += 1
    wl.sync()
    sess = ProfilerSession(0, cuda)
    sess.start()
    wl.timer.window = "profiled"
    for _ in range(args.window):
        wl.run_cycle(c)
        c += 1
    sess.stop()
    wl.timer.window = None
    st = wl.timer.stats()
    out["phases"] = {"unprofiled": st["unprofiled"], "profiled": st["profiled"],
                     "dilation": dilation(st["unprofiled"], st["profiled"])}

    t0 = time.perf_counter_ns()
    ev = sess.events()
    t_inproc = time.perf_counter_ns() - t0
    conv: dict[str, Any] = {"inprocess_ns": t_inproc, "inprocess_events": ev.height,
                            "kinds": dict(ev.group_by("kind").len().iter_rows())}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rank-00000.trace.json")
        t0 = time.perf_counter_ns()
        sess.export_json(path)
        t_export = time.perf_counter_ns() - t0
        conv["export_json_ns"] = t_export
        conv["json_bytes"] = os.path.getsize(path)
        try:
            from tracekit.ingest import ingest_traces

            t0 = time.perf_counter_ns()
            run = ingest_traces([path])
            conv["ingest_ns"] = time.perf_counter_ns() - t0
            conv["ingest_events"] = run.events.height
            conv["json_over_inprocess"] = (t_export + conv["ingest_ns"]) / t_inproc
        except Exception as exc:  # report, do not hide: the in-process path is measured either way
            conv["ingest_error"] = f"{exc.__class__.__name__}: {exc}"
    out["conversion"] = conv

    m = out["micro"]
    print(f"device: {out['device']}  torch {out['torch']}  preset {preset}  graphs {out['graphs']}  moe {out['moe_impl']}")
    print(f"hook call, profiler off: {m['hooked_call_ns']:.0f} ns vs bare call {m['bare_call_ns']:.0f} ns "
          f"(+{m['hooked_call_ns'] - m['bare_call_ns']:.0f} ns); with phase(): {m['phase_block_ns']:.0f} ns vs "
          f"empty block {m['empty_block_ns']:.0f} ns")
    ab = out["cycle_ab"]
    print(f"cycle (graphed verify), hooks on vs off, profiler off: {ab['hooks_median_ns'] / 1e6:.4f} ms vs "
          f"{ab['nohooks_median_ns'] / 1e6:.4f} ms  ratio {ab['ratio']:.4f}  ({ab['cycles_each']} cycles each)")
    for ph, r in out["phases"]["dilation"].items():
        u, p = out["phases"]["unprofiled"][ph]["mean_ns"], out["phases"]["profiled"][ph]["mean_ns"]
        print(f"phase {ph:<13} unprofiled {u / 1e6:.3f} ms  profiled {p / 1e6:.3f} ms  x{r:.2f}")
    print(f"events: in-process {conv['inprocess_events']} in {t_inproc / 1e6:.1f} ms; export JSON "
          f"{conv['export_json_ns'] / 1e6:.1f} ms" + (
              f" + ingest {conv['ingest_ns'] / 1e6:.1f} ms ({conv['ingest_events']} events): "
              f"ratio {conv['json_over_inprocess']:.1f}x slower" if "ingest_ns" in conv else
              f"; ingest failed: {conv.get('ingest_error')}"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
