"""Does tracekit's CUPTI client (collectors/cupti_client.py) record what attribution needs? One GPU.

    python bench/cupti_client_check.py [--modes kernels,launch,callback,all] [--iters 50]

Per client mode, in one process: a window around ``--iters`` iterations of eager work (matmuls,
an elementwise op, a device-to-host copy with a sync) and a CUDA graph replay, then the rows through
the one converter. Prints per mode: rows per kind; launches whose correlation id has a kernel or copy,
and GPU rows whose correlation id has a launch (graph kernels: the cudaGraphLaunch's); whether every
host row lies between the window's ``time.time_ns()`` stamps (the phase ranges' clock) and carries this
thread's native id; the CUPTI records dropped. Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="kernels,launch,callback,all")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--taken-last", action="store_true",
                    help="after the modes, start each mode while torch.profiler holds CUPTI: every start must be "
                         "refused at cuptiSubscribe, before tracekit registers anything (Kineto keeps its subscriber "
                         "afterwards, so nothing of the client runs in this process after that)")
    a = ap.parse_args()
    import polars as pl
    import torch

    from tracekit.collectors.cupti_client import Client, ClientUnavailable
    from tracekit.schema import GPU_KINDS, LAUNCH

    x = torch.randn(512, 512, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x @ x
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            y = (x @ x).relu() + 1
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    failed = False
    ev = None
    for mode in [m for m in a.modes.split(",") if m]:
        try:
            cl = Client(mode).open()
        except ClientUnavailable as exc:
            print(f"{mode}: unavailable: {exc}")
            failed = True
            continue
        t0 = time.time_ns()
        cl.start()
        for _ in range(a.iters):
            y = (x @ x).sin()
            y.sum().item()
            g.replay()
        torch.cuda.synchronize()
        t1 = time.time_ns()
        cl.stop()
        ev = cl.events(0)
        kinds = dict(ev.group_by("kind").len().iter_rows())
        launches = ev.filter(pl.col("kind") == LAUNCH)
        gpu = ev.filter(pl.col("kind").is_in(list(GPU_KINDS)))
        gpu_corr = set(gpu["correlation"].drop_nulls().to_list())
        l_corr = set(launches["correlation"].drop_nulls().to_list())
        host = ev.filter(pl.col("device") < 0)
        l_hit = sum(c in gpu_corr for c in launches["correlation"].to_list())
        g_hit = sum(c in l_corr for c in gpu["correlation"].to_list())
        in_window = host.filter(pl.col("start_ns").is_between(t0, t1)).height
        tids = sorted(set(host["tid"].to_list()))
        print(f"{mode}: {ev.height} rows {kinds}; launches with a GPU row {l_hit}/{launches.height}; GPU rows with "
              f"a launch {g_hit}/{gpu.height}; host rows inside the window's time.time_ns() stamps "
              f"{in_window}/{host.height}; host thread ids {tids} (this thread {threading.get_native_id()}); "
              f"dropped {cl.info.get('dropped_records')}, other {cl.info.get('other_records')}")
        if gpu.height < 3 * a.iters:
            print(f"{mode}: FAIL: {gpu.height} GPU rows for {a.iters} iterations")
            failed = True
        if host.height and (in_window != host.height or tids != [threading.get_native_id()]):
            print(f"{mode}: FAIL: host rows outside the window or on another thread id")
            failed = True
        if mode != "kernels" and (launches.height == 0 or g_hit != gpu.height):
            print(f"{mode}: FAIL: a GPU row without its launch")
            failed = True
    if a.taken_last and not taken_last(Client, ClientUnavailable, x, [m for m in a.modes.split(",") if m]):
        failed = True
    if ev is not None:
        print("kernel names:", sorted(set(ev.filter(pl.col("kind") == "kernel")["name"].to_list()))[:6])
    return 1 if failed else 0


def refused(client: Any, unavailable: type[Exception], mode: str, when: str) -> bool:
    """Start the client in ``mode`` while another CUPTI client holds the subscriber: True when the start is
    refused at cuptiSubscribe (what the lite session then falls back on); a start that runs is stopped."""
    cl = client(mode).open()
    try:
        cl.start()
    except unavailable as exc:
        print(f"taken: {mode} start refused {when}: {exc}")
        return "cuptiSubscribe" in str(exc)
    cl.stop()
    print(f"taken: FAIL: the {mode} start ran {when}")
    return False


def taken_last(client: Any, unavailable: type[Exception], x: Any, modes: list[str]) -> bool:
    """Each mode started while torch.profiler (Kineto) holds CUPTI's one callback subscriber, then once more
    after the profiler has stopped (Kineto keeps its subscriber): True when every start is refused and the
    profiler's own trace still has its kernels."""
    from torch.profiler import ProfilerActivity, profile

    ok = True
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for mode in modes:
            (x @ x).sum().item()
            ok = refused(client, unavailable, mode, "while torch.profiler runs") and ok
    kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
    print(f"taken: torch.profiler's own trace: {kernels} GPU events")
    for mode in modes:  # the profiler has stopped; its subscriber stays
        ok = refused(client, unavailable, mode, "after torch.profiler stopped") and ok
    return ok and kernels > 0


if __name__ == "__main__":
    sys.exit(main())
