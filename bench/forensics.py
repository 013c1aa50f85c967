"""Benchmark the forensic analyzers (align, ranks, spec, diff) on a replicated synthetic run.

Prints events/s of each and its ratio to a plain polars
``group_by(rank, name).agg(sum(dur_ns))`` over the same table, measured in the
same run (the cost floor of any per-rank pass over the events).

    python bench/forensics.py [--ranks 8] [--cycles 50] [--copies 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from forensic_frames import Spec, build

from tracekit.analyzers.align import estimate_offsets
from tracekit.analyzers.diff import diff_runs
from tracekit.analyzers.spec import cycles
from tracekit.analyzers.stragglers import stragglers


def replicate(ev: pl.DataFrame, copies: int) -> pl.DataFrame:
    """``copies`` back-to-back copies of a run, ids and sequence numbers kept unique."""
    span = int(ev.get_column("start_ns").max() - ev.get_column("start_ns").min()) + 1_000_000  # type: ignore[operator]
    pid_step = int(ev.get_column("phase_id").max()) + 1  # type: ignore[arg-type]
    corr_step = int(ev.get_column("correlation").max()) + 1  # type: ignore[arg-type]
    seq_step = int(ev.get_column("coll_seq").max()) + 1  # type: ignore[arg-type]
    cyc_step = int(ev.get_column("cycle").max()) + 1  # type: ignore[arg-type]
    parts = [
        ev.with_columns(
            pl.col("start_ns") + i * span,
            pl.col("phase_id") + i * pid_step,
            pl.col("correlation") + i * corr_step,
            pl.col("coll_seq") + i * seq_step,
            pl.col("cycle") + i * cyc_step,
        )
        for i in range(copies)
    ]
    return pl.concat(parts)


def timed(fn: Callable[[], Any], repeat: int = 3, clock: Callable[[], float] = time.perf_counter) -> float:
    """Best of ``repeat`` runs of ``fn`` by ``clock`` (wall by default; ``time.process_time``: CPU)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--copies", type=int, default=8)
    a = ap.parse_args()
    t0 = time.perf_counter()
    base = build(Spec(ranks=a.ranks, cycles=a.cycles, layers=8, straggler=3, seq_step=7))
    ev = replicate(base, a.copies)
    new = replicate(build(Spec(ranks=a.ranks, cycles=a.cycles, layers=8, seq0=260, seq_step=7, moe_ns=130_000, seed=5)), a.copies)
    n = ev.height
    kernels = ev.filter(pl.col("kind") == "kernel").height
    print(f"table: {n:,} events ({kernels:,} kernels) on {a.ranks} ranks, built in {time.perf_counter() - t0:.1f} s")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ref = timed(lambda: ev.group_by(["rank", "name"]).agg(pl.col("dur_ns").sum()))
    ref_cpu = timed(lambda: ev.group_by(["rank", "name"]).agg(pl.col("dur_ns").sum()), clock=time.process_time)
    print(f"reference group_by(rank, name).sum(dur): {ref * 1e3:8.1f} ms wall {ref_cpu * 1e3:8.1f} ms CPU"
          f"  {n / ref_cpu / 1e6:7.2f} M events/CPU-s")
    for label, fn in (
        ("align estimate_offsets", lambda: estimate_offsets(ev)),
        ("ranks stragglers", lambda: stragglers(ev)),
        ("spec cycles", lambda: cycles(ev)),
        ("diff_runs (incl. attribution x2)", lambda: diff_runs(ev, new)),
    ):
        t = timed(fn, repeat=2)
        c = timed(fn, repeat=2, clock=time.process_time)
        rate = (2 * n if label.startswith("diff") else n) / c / 1e6
        print(f"{label:34s}: {t * 1e3:8.1f} ms wall {c * 1e3:8.1f} ms CPU  {rate:7.2f} M events/CPU-s"
              f"  ({t / ref:5.1f}x the reference wall, {c / ref_cpu:5.1f}x CPU)")
    print(f"load average (1, 5, 15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

if __name__ == "__main__":
    main()
