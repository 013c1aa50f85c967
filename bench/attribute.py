"""Attribution speed: `tracekit attribute`'s analysis on 8 ranks x 1 M kernels vs a plain polars group-by.

    python bench/attribute.py [--ranks 8] [--kernels 1000000] [--repeat 3] [--source RUN.parquet]

The table: a real run (``--source``, else the first samples/*.parquet) replicated
in time until every rank holds ``--kernels`` GPU events, else a synthetic
speculative-decoding timeline built here (per cycle: a graphed draft of 150
kernels, an eager verify of 2,000 kernels with one launch row each and an
allreduce every 10th kernel, a graphed draft-extend of 150 kernels; 5 % of
kernels overlap their predecessor like programmatic dependent launch).

Timed on the same table in the same process (median of --repeat runs):

1. attribution: ``analyzers.attribution.attribute_instances`` on the annotated
   table (the work behind ``tracekit attribute``: membership lookup, the
   exclusive walk, queue delay, launches, allreduce wait/transfer);
2. reference (cost floor): ``events.group_by("rank", "name").agg(pl.col("dur_ns").sum())``;
3. for information: ``annotate_phases`` (done once at ingest/capture time), and with
   ``--report`` ``attribute_report`` (everything ``tracekit attribute`` computes).

Prints GPU events/s for attribution and the ratio attribution time / reference time,
wall and CPU (``time.process_time``: robust when other jobs share the core), and the
load average. Pin it to one core for the one-core figure: ``taskset -c 1 python ...``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parent.parent

NAMES = [
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "gemm"),
    ("void flash::FlashAttnFwdSm90<cutlass::Shape<128, 64>>(Params)", "attention"),
    ("fused_moe_kernel", "moe"),
    ("moe_align_block_size_kernel", "moe"),
    ("FusedAddRMSNormKernel", "norm"),
    ("BatchQKApplyRotaryPosIdsCosSinCache", "norm"),
    ("act_and_mul_kernel", "moe"),
    ("at::native::vectorized_elementwise_kernel<4>", "elementwise"),
    ("kimi_k2_moe_fused_gate_kernel", "moe"),
]
AR = ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce")


def synthetic_rank(rank: int, kernels: int, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    per_cycle = (150, 2000, 150)  # draft (graphed), verify (eager), draft_extend (graphed)
    cyc_k = sum(per_cycle)
    cycles = max(kernels // cyc_k, 1)
    n = cycles * cyc_k
    pos = np.tile(np.arange(cyc_k), cycles)
    cyc = np.repeat(np.arange(cycles), cyc_k)
    ph = np.where(pos < per_cycle[0], 0, np.where(pos < per_cycle[0] + per_cycle[1], 1, 2))
    eager = ph == 1
    dur = rng.integers(2_000, 30_000, n)
    gap = np.where(eager, rng.integers(500, 6_000, n), 300)
    gap[rng.random(n) < 0.05] = -300  # overlap with the predecessor (PDL)
    phase_start = np.zeros(n, dtype=bool)
    phase_start[1:] = ph[1:] != ph[:-1]
    gap[phase_start] = 40_000  # host work between phases
    start = np.cumsum(dur + gap) - dur + rank * 100
    names_idx = pos % len(NAMES)
    is_ar = eager & (pos % 10 == 0)
    name_list = [n_ for n_, _ in NAMES] + [AR[0]]
    cat_list = [c for _, c in NAMES] + [AR[1]]
    nidx = np.where(is_ar, len(NAMES), names_idx)
    # correlation: eager kernels one each; graphed phases share one per instance
    inst = cyc * 3 + ph
    corr = np.where(eager, np.arange(n), n + inst)  # dense ids, like Kineto's per-process counter
    # launches: eager kernels launched 3-8 us before they start; graphs 10 us before the first kernel
    first_of_inst = np.ones(n, dtype=bool)
    first_of_inst[1:] = inst[1:] != inst[:-1]
    l_sel = eager | (first_of_inst & ~eager)
    l_start = start[l_sel] - rng.integers(3_000, 8_000, int(l_sel.sum()))
    l_start = np.where(eager[l_sel], l_start, start[l_sel] - 10_000)
    # ranges: one per instance, from its first launch to its last launch end + 1 us
    l_inst = inst[l_sel]
    r_lo = np.full(cycles * 3, np.iinfo(np.int64).max)
    r_hi = np.zeros(cycles * 3, dtype=np.int64)
    np.minimum.at(r_lo, l_inst, l_start - 1_000)
    np.maximum.at(r_hi, l_inst, l_start + 3_000)
    phase_names = ("draft", "verify", "draft_extend")
    r_names = [
        f"tracekit:{phase_names[i % 3]}|cycle={i // 3}|bs=4|tok={16 if i % 3 == 1 else 4}|seq={1000 + i // 3}|graphed={int(i % 3 != 1)}"
        for i in range(cycles * 3)
    ]
    kern = pl.DataFrame(
        {
            "kind": "kernel",
            "name": pl.Series(np.array(name_list, dtype=object)[nidx].tolist(), dtype=pl.String),
            "category": pl.Series(np.array(cat_list, dtype=object)[nidx].tolist(), dtype=pl.String),
            "device": rank,
            "stream": 7,
            "start_ns": start,
            "dur_ns": dur,
            "correlation": corr,
            "graph": ~eager,
        }
    )
    launch = pl.DataFrame(
        {
            "kind": "launch",
            "name": np.where(eager[l_sel], "cudaLaunchKernel", "cudaGraphLaunch").tolist(),
            "pid": 100 + rank,
            "tid": 100 + rank,
            "start_ns": l_start,
            "dur_ns": np.where(eager[l_sel], 2_000, 8_000),
            "correlation": corr[l_sel],
            "graph": ~eager[l_sel],
        }
    )
    ranges = pl.DataFrame(
        {"kind": "range", "name": r_names, "pid": 100 + rank, "tid": 100 + rank, "start_ns": r_lo, "dur_ns": r_hi - r_lo}
    )
    return pl.concat([ranges, launch, kern], how="diagonal_relaxed").with_columns(pl.lit(rank).alias("rank"))


def replicate(source: Path, ranks: int, kernels: int) -> pl.DataFrame:
    from tracekit.store import read_run

    ev = read_run(source).drop(["phase", "phase_id", "coll_seq", "group"])
    gpu_per_rank = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).group_by("rank").len()
    have = int(gpu_per_rank.get_column("len").min())
    reps = max(kernels // max(have, 1), 1)
    span = int(ev.select((pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()).item()) + 1_000_000
    corr_span = int(ev.get_column("correlation").max() or 0) + 1
    src_ranks = sorted(ev.get_column("rank").unique().to_list())
    parts = []
    for r in range(ranks):
        base = ev.filter(pl.col("rank") == src_ranks[r % len(src_ranks)]).with_columns(pl.lit(r, pl.Int32).alias("rank"))
        for k in range(reps):
            parts.append(base.with_columns(pl.col("start_ns") + k * span, pl.col("correlation") + k * corr_span))
    return pl.concat(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="GPU events per rank")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", type=Path, default=None)
    ap.add_argument("--report", action="store_true", help="also time attribute_report (what the CLI runs)")
    args = ap.parse_args()

    from tracekit.analyzers.attribution import attribute_instances, attribute_report, check_sums
    from tracekit.finalize.collectives import annotate_collectives
    from tracekit.finalize.membership import annotate_phases
    from tracekit.schema import conform, sort_events

    src = args.source
    if src is None:
        found = sorted((REPO / "samples").glob("*.parquet"))
        src = found[0] if found else None
    t0 = time.perf_counter()
    if src is not None:
        raw = replicate(src, args.ranks, args.kernels)
        what = f"{src.name} replicated"
    else:
        raw = pl.concat([synthetic_rank(r, args.kernels) for r in range(args.ranks)], how="diagonal_relaxed")
        what = "synthetic spec-decoding timeline"
    events = sort_events(conform(raw))
    del raw
    t_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    events = annotate_collectives(events)
    t_coll = time.perf_counter() - t0
    t0 = time.perf_counter()
    events = annotate_phases(events)
    t_phases = time.perf_counter() - t0
    n_gpu = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height
    print(f"table: {what}: {events.height:,} events, {n_gpu:,} GPU events on {args.ranks} ranks (built in {t_build:.1f} s)")
    print(f"annotate_collectives {t_coll:.2f} s, annotate_phases {t_phases:.2f} s ({events.height / t_phases / 1e6:.1f} M rows/s; once per run, at ingest)")

    t_attr, t_ref, c_attr, c_ref, t_rep = [], [], [], [], []
    inst = None
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        ref = events.group_by(["rank", "name"]).agg(pl.col("dur_ns").sum())
        t_ref.append(time.perf_counter() - t0)
        c_ref.append(time.process_time() - c0)
        t0, c0 = time.perf_counter(), time.process_time()
        inst = attribute_instances(events)
        t_attr.append(time.perf_counter() - t0)
        c_attr.append(time.process_time() - c0)
        if args.report:
            t0 = time.perf_counter()
            attribute_report(events)
            t_rep.append(time.perf_counter() - t0)
    assert inst is not None
    check_sums(inst)
    a, r = statistics.median(t_attr), statistics.median(t_ref)
    ca, cr = statistics.median(c_attr), statistics.median(c_ref)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, {len(os.sched_getaffinity(0))} usable by this process, load average {load} "
          "(wall times suffer when other jobs share the core; CPU times much less)")
    print(f"reference group_by(rank, name).sum(dur): {r:.3f} s wall, {cr:.3f} s CPU ({ref.height} groups)")
    print(f"attribution: {a:.3f} s wall, {ca:.3f} s CPU for {inst.height:,} instances = {n_gpu / a / 1e6:.1f} M GPU events/s "
          f"wall, {n_gpu / ca / 1e6:.1f} M/s CPU (target >= 10 M/s on one core; 8 x 1 M in < 2 s)")
    print(f"ratio attribution / reference: {a / r:.2f}x wall, {ca / cr:.2f}x CPU")
    if t_rep:
        rp = statistics.median(t_rep)
        print(f"end to end attribute_report (prepare, match_collectives frame, instances, views, stragglers): "
              f"{rp:.3f} s wall = {n_gpu / rp / 1e6:.1f} M GPU events/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
