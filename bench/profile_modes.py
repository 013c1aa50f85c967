"""What each profile mode (and each part of lite) costs, against the unprofiled workload in the same process.

    python bench/profile_modes.py [--device auto|cpu|cuda] [--preset kimi-k2-tiny] [--variants full,lite,...]
                                  [--warmup 8] [--rounds 4] [--block 6] [--drop 2] [--ab-rounds 6] [--ab-block 8]
                                  [--env-variant NAME=VARIANT:K=V,K=V] [--json out.json]

The built-in workload, world 1. Each variant runs in a fresh process of its own (a profiler that ran
once can leave a process slower, and processes of one command differ by up to 2x on H200:
samples/h200-profile-modes/README.md), and inside it the reference is the same process at the same shapes:
``--warmup`` cycles, then ``--rounds`` rounds of one block with the variant on and one with it off
(order rotated every round; ``bench/blocks.py``), ``--block`` timed cycles per block after ``--drop``
untimed ones (the profiler's start-up). A new profiler session starts for every "on" block and stops
before the next "off" block, as a capture's window does. Medians of the wall time per cycle (each cycle
ends in a host sync); the spread of the "off" blocks' medians is printed beside each ratio.

1. verify eager (launch bound; SGLang's graph fallback), one row per variant:
   ratio on / off, cost per launch = (on - off) / launches per cycle (the ``lite`` variant's launch rows
   per cycle), and the verify phase's GPU time (the workload's CUDA-event timer) on vs off: the eager
   verify dilation.
2. verify graphed, timing mode (phase ranges + CUDA events on sampled instances): the cost per cycle and its
   share of the graphed cycle (target < 1%), same A/B blocks, ``--ab-rounds`` x ``--ab-block``; then
   ``bench/timing_cost.py`` in a process of its own: ``--pairs`` adjacent cycles on / off with a bootstrap
   interval of the paired difference, and the recorder's direct host cost per cycle (``--calls``).

Variants (``VARIANTS``): full, lite, timing (the profile modes, ``ProfilerSession``); tk-kernels, tk-launch,
tk-callback, tk-all (tracekit's CUPTI client alone in each mode, ``collectors/cupti_client.py``); cuda (the torch
profiler's CUDA activity alone, no tracekit ranges), cpu (CPU activity alone), hooks (tracekit's range
recorder alone); cuda-trim (CUDA activity with the runtime records Kineto drops switched off at the
source, ``collectors/cupti.py``), cuda-nodriver (driver-API records off), cuda-nokernel (kernel records
off: what the runtime records cost alone), cuda-noruntime (runtime records off: what kernel records cost).
The last two drop what attribution needs; they only split the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

VARIANTS: dict[str, str] = {
    "full": "profile mode full: torch.profiler CPU + CUDA activities",
    "lite": "profile mode lite as captured: tracekit's CUPTI client (session.LITE_CUPTI) + tracekit's ranges",
    "timing": "profile mode timing: phase ranges + CUDA events, no profiler",
    "cuda": "torch.profiler CUDA activity alone",
    "cpu": "torch.profiler CPU activity alone",
    "hooks": "tracekit's range recorder alone (lite minus the profiler)",
    "cuda-trim": "CUDA activity, runtime records Kineto drops anyway off at the source",
    "cuda-lean": "CUDA activity, every API record but launches and syncs off at the source",
    "cuda-nodriver": "CUDA activity, driver-API records off",
    "cuda-nokernel": "CUDA activity, kernel records off (runtime records alone)",
    "cuda-noruntime": "CUDA activity, runtime records off (kernel records alone)",
    "tk-kernels": "tracekit's CUPTI client: kernel + copy records only (no launches)",
    "tk-launch": "tracekit's CUPTI client: kernels, copies, API records of launches and syncs only",
    "tk-callback": "tracekit's CUPTI client: kernels, copies, launches and syncs from a CUPTI callback",
    "tk-all": "tracekit's CUPTI client: kernels, copies, every runtime and driver API record",
}
DEFAULT = ("full", "lite", "timing", "cuda", "cpu", "hooks", "cuda-trim", "cuda-nodriver", "cuda-nokernel",
           "cuda-noruntime")


class Switch:
    """Start / stop one variant around the "on" blocks; counts launches of the first block."""

    def __init__(self, variant: str, cuda: bool) -> None:
        self.variant = variant
        self.cuda = cuda
        self.sess: Any = None
        self.prof: Any = None
        self.rec: Any = None
        self.client: Any = None
        self.client_on = False
        self.blocks = 0
        self.first: dict[str, Any] | None = None
        self.trim: dict[str, Any] | None = None

    def __call__(self, on: bool) -> None:
        running = self.sess is not None or self.prof is not None or self.rec is not None or self.client_on
        if running:  # also between two "on" blocks in a row: a new session for every "on" block
            self._stop()
        if on:
            self._start()

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        from tracekit.collectors import cupti
        from tracekit.collectors.hooks import start_recording
        from tracekit.collectors.ranges import RangeRecorder
        from tracekit.collectors.session import ProfilerSession

        v = self.variant
        if v in ("full", "lite", "timing"):
            self.sess = ProfilerSession(0, self.cuda, mode=v)
            self.sess.start()
        elif v.startswith("tk-"):
            from tracekit.collectors.cupti_client import Client

            self.client = self.client or Client(v[3:]).open()
            self.client.start()
            self.client_on = True
        elif v == "hooks":
            self.rec = RangeRecorder(cuda_events=False)
            start_recording(self.rec, record_function=False)
        else:
            acts = [ProfilerActivity.CPU] if v == "cpu" else [ProfilerActivity.CUDA]
            self.prof = profile(activities=acts)
            self.prof.__enter__()
            if v == "cuda-lean":
                self.trim = cupti.trim(lean=True)
            trim = {"cuda-trim": (cupti.KINETO_DROPPED_RUNTIME, ()), "cuda-nodriver": (None, ("driver",)),
                    "cuda-nokernel": (None, ("concurrent_kernel",)), "cuda-noruntime": (None, ("runtime",))}.get(v)
            if trim is not None:
                self.trim = cupti.trim(trim[0], trim[1])

    def _stop(self) -> None:
        import polars as pl

        from tracekit.collectors.hooks import stop_recording
        from tracekit.collectors.session import kineto_to_frame
        from tracekit.schema import GPU_KINDS, LAUNCH

        frame = None
        if self.sess is not None:
            self.sess.stop()
            if self.first is None and self.sess.prof is not None:
                frame = self.sess.events()
        if self.prof is not None:
            if self.cuda:
                import torch

                torch.cuda.synchronize()
            self.prof.__exit__(None, None, None)
            if self.first is None:
                frame = kineto_to_frame(self.prof.profiler.kineto_results.events(), 0)[0]
        if self.client_on:
            self.client_on = False
            if self.cuda:
                import torch

                torch.cuda.synchronize()
            self.client.stop()
            if self.first is None:
                frame = self.client.events(0)
                self.trim = {k: v for k, v in self.client.info.items() if k != "client"}
        if self.rec is not None:
            stop_recording()
        if self.first is None:
            self.first = {} if frame is None else {
                "launches": frame.filter(pl.col("kind") == LAUNCH).height,
                "gpu_events": frame.filter(pl.col("kind").is_in(list(GPU_KINDS))).height,
                "host_rows": frame.filter(pl.col("device") < 0).height,
                "by_kind": dict(frame.group_by("kind").len().iter_rows()),
            }
        self.sess = self.prof = self.rec = None
        self.blocks += 1


def _workload(preset: str, verify_graph: str, cycles: int, cuda: bool) -> Any:
    import torch

    from tracekit.collectors.workload.config import make_config
    from tracekit.collectors.workload.runner import Workload

    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    wl = Workload(make_config(preset, verify_graph=verify_graph), 0, 1, device, cycles + 4)
    wl.capture_graphs()
    return wl


def one_variant(variant: str, preset: str, a: argparse.Namespace, cuda: bool, graphed: bool) -> dict[str, Any]:
    """Child process body: warm-up, then A/B blocks of the variant on / off."""
    from blocks import ab_blocks

    rounds, block = (a.ab_rounds, a.ab_block) if graphed else (a.rounds, a.block)
    wl = _workload(preset, "on" if graphed else "off", a.warmup + 2 * rounds * (block + a.drop), cuda)
    for c in range(a.warmup):
        wl.run_cycle(c)
    wl.sync()
    sw = Switch(variant, cuda)
    res = ab_blocks(wl, a.warmup, rounds, block, sw, drop=a.drop, label=lambda on: "on" if on else "off")
    st = wl.timer.stats()
    verify = {k: (st.get(k, {}).get("verify") or {}).get("median_ns") for k in ("on", "off")}
    return {"variant": variant, "graphed": graphed, "graphs": sorted(wl.graphs), **res.summary(),
            "per_block": sw.first, "cycles_per_block": block, "trim": sw.trim,
            "verify_on_ns": verify["on"], "verify_off_ns": verify["off"],
            "verify_clock": (st.get("off", {}).get("verify") or {}).get("clock"),
            "cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime}


def timing_child(preset: str, a: argparse.Namespace, cuda: bool) -> dict[str, Any]:
    """Child process body: the timing recorder's cost per graphed cycle, interleaved and direct (timing_cost.py)."""
    import timing_cost

    wl = _workload(preset, "on", a.warmup + 2 * a.pairs + 4, cuda)
    for c in range(a.warmup):
        wl.run_cycle(c)
    wl.sync()
    inter = timing_cost.interleaved(wl, a.warmup, a.pairs, cuda)
    dire = timing_cost.direct(a.calls, cuda)
    return {"graphs": sorted(wl.graphs), "interleaved": inter, "direct": dire,
            "per_cycle": timing_cost.per_cycle(inter, dire)}


def _child(args: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    try:
        res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False,
                             env={**os.environ, **env}, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    if res.returncode != 0 or not lines:
        tail = (res.stderr.strip().splitlines() or ["(no stderr)"])[-3:]
        return {"error": f"rc {res.returncode}: {' | '.join(tail)[:400]}"}
    out: dict[str, Any] = json.loads(lines[-1])
    return out


def _ms(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.3f}"


def report(rows: dict[str, dict[str, Any]], lpc: float | None, block: int) -> list[str]:
    lines = [f"{'variant':<24} {'off ms (off blocks)':<30} {'on ms':>8} {'ratio':>7} {'us/launch':>9} "
             f"{'verify off->on ms (GPU)':>26} {'ratio':>6} {'host rows/cycle':>15}"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"{name:<24} failed: {r['error']}")
            continue
        blocks = r["off_blocks_ns"]
        spread = f"{_ms(r['off_median_ns'])} ({_ms(min(blocks))}-{_ms(max(blocks))})"
        per = "" if not lpc else f"{r['cost_per_cycle_ns'] / lpc / 1e3:+.2f}"
        vb, vw = r.get("verify_off_ns"), r.get("verify_on_ns")
        vr = f"x{vw / vb:.3f}" if vb and vw else "n/a"
        pb = r.get("per_block") or {}
        hr = f"{pb['host_rows'] / block:,.0f}" if pb.get("host_rows") is not None else ""
        lines.append(f"{name:<24} {spread:<30} {_ms(r['on_median_ns']):>8} x{r['ratio']:.3f} {per:>9} "
                     f"{_ms(vb) + ' -> ' + _ms(vw):>26} {vr:>6} {hr:>15}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--preset", default=None)
    ap.add_argument("--variants", default=",".join(DEFAULT))
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--drop", type=int, default=2)
    ap.add_argument("--ab-rounds", type=int, default=6)
    ap.add_argument("--ab-block", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=600, help="timing mode: pairs of adjacent graphed cycles on / off")
    ap.add_argument("--calls", type=int, default=20000, help="timing mode, direct: calls of each hook timed")
    ap.add_argument("--env-variant", action="append", default=[], metavar="NAME=VARIANT:K=V,K=V")
    ap.add_argument("--repeat", type=int, default=1, help="processes per variant, run in turn (the ratio's spread "
                    "between processes)")
    ap.add_argument("--timeout", type=float, default=240.0, help="per child process, seconds")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--graphed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    import torch

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    preset = args.preset or ("kimi-k2-tiny" if cuda else "tiny")
    if args.child == "timing-pairs":
        print(json.dumps(timing_child(preset, args, cuda)))
        return 0
    if args.child:
        print(json.dumps(one_variant(args.child, preset, args, cuda, args.graphed)))
        return 0
    common = ["--device", "cuda" if cuda else "cpu", "--preset", preset, "--warmup", str(args.warmup),
              "--rounds", str(args.rounds), "--block", str(args.block), "--drop", str(args.drop),
              "--ab-rounds", str(args.ab_rounds), "--ab-block", str(args.ab_block),
              "--pairs", str(args.pairs), "--calls", str(args.calls)]
    plan: list[tuple[str, str, dict[str, str]]] = []
    for v in [v for v in args.variants.split(",") if v]:
        if v not in VARIANTS:
            raise SystemExit(f"profile_modes.py: unknown variant {v!r} (known: {', '.join(VARIANTS)})")
        plan.append((v, v, {}))
    for spec in args.env_variant:
        name, _, rest = spec.partition("=")
        base, _, kvs = rest.partition(":")
        if base not in VARIANTS:
            raise SystemExit(f"profile_modes.py: --env-variant {spec!r}: unknown variant {base!r}")
        plan.append((name, base, dict(kv.split("=", 1) for kv in kvs.split(",") if kv)))
    if args.repeat > 1:
        plan = [(f"{name}#{i + 1}", base, env) for i in range(args.repeat) for name, base, env in plan]
    t0 = time.monotonic()
    rows = {name: _child([*common, "--child", base], env, args.timeout) for name, base, env in plan}
    for name, _, env in plan:
        rows[name]["env"] = env
    timing_graphed = _child([*common, "--child", "timing", "--graphed"], {}, args.timeout)
    timing_pairs = _child([*common, "--child", "timing-pairs"], {}, args.timeout)
    wall = time.monotonic() - t0
    counted = next((r["per_block"] for v in ("full", "cuda", "lite") for name, r in rows.items()
                    if name.split("#")[0] == v and r.get("per_block")), None)
    lpc = counted["launches"] / args.block if counted else None
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                           "preset": preset, "args": vars(args), "launches_per_cycle": lpc, "eager": rows,
                           "timing_graphed": timing_graphed, "timing_pairs": timing_pairs, "wall_s": wall,
                           "children_cpu_s": cpu.ru_utime + cpu.ru_stime, "loadavg": os.getloadavg()}
    print(f"device: {out['device']}  torch {out['torch']}  preset {preset}; verify eager; one fresh process per "
          f"variant: {args.warmup} warm-up, then {args.rounds} rounds of {args.block} timed cycles on / off "
          f"(+{args.drop} untimed after each switch), order rotated")
    if counted:
        print(f"launches per cycle: {lpc:,.0f} ({counted['launches']} launch rows, {counted['gpu_events']} GPU "
              f"events, {counted['host_rows']} host rows in the first {args.block}-cycle block of full)")
    for line in report(rows, lpc, args.block):
        print(line)
    t = timing_graphed
    if "error" in t:
        print(f"timing mode, verify graphed: failed: {t['error']}")
    else:
        print(f"timing mode, verify graphed (graphs {t['graphs']}): cycle {_ms(t['on_median_ns'])} ms recording vs "
              f"{_ms(t['off_median_ns'])} ms not (off blocks {_ms(min(t['off_blocks_ns']))}-"
              f"{_ms(max(t['off_blocks_ns']))}): {t['cost_per_cycle_ns'] / 1e3:+.1f} us per cycle = "
              f"{100 * (t['ratio'] - 1):+.2f}% of a graphed cycle ({t['cycles_each']} cycles each; target < 1%)")
    if "error" in timing_pairs:
        print(f"timing mode, interleaved: failed: {timing_pairs['error']}")
    else:
        import timing_cost

        for line in timing_cost.report(timing_pairs):
            print(line)
    for name, r in rows.items():
        if r.get("trim"):
            print(f"{name}: CUPTI trim {r['trim']}")
    print(f"wall {wall:.0f} s; children CPU {out['children_cpu_s']:.1f} s; load average "
          f"{' '.join(f'{x:.2f}' for x in out['loadavg'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
