"""Attribution speed: `tracekit attribute`'s analysis on 8 ranks x 1 M GPU events, compiled vs
the numpy reference vs a plain polars group-by, in one run.

    python bench/attribute.py [--ranks 8] [--kernels 1000000] [--repeat 3] [--source RUN.parquet] [--report]

The table: a real run (``--source``) replicated in time until every rank holds ``--kernels``
GPU events, else a synthetic speculative-decoding timeline built here (per cycle: a graphed
draft of 150 kernels, an eager verify of 2,000 kernels with one launch row each and an
allreduce every 10th kernel, a graphed draft-extend of 150 kernels; 5 % of kernels overlap
their predecessor like programmatic dependent launch).

Timed on the same table in the same process, interleaved, median of --repeat runs:

1. floor: ``events.group_by("rank", "name").agg(pl.col("dur_ns").sum())`` (the cost floor of
   any polars pass that groups the table);
2. attribution: ``analyzers.attribution.attribute_instances`` (the work behind ``tracekit
   attribute``: membership lookup, the exclusive walk, queue delay, launches, allreduce
   wait/transfer) with the compiled pass (``tracekit._walk``, ranks in parallel threads when
   several cores are usable);
3. reference: the same with the numpy reference path (what ``TRACEKIT_PURE=1`` runs);
4. compiled, strings: the compiled pass on the same table with ``kind`` / ``category`` as String
   columns (what a run held before they were stored as Enum codes: one string pass each);
5. with ``--report``: ``attribute_report`` (everything ``tracekit attribute`` computes), both paths.

The table holds kind / category as Enum columns, as ingest and finalize write them (``conform``).

Prints CPU seconds (``time.process_time``: all threads of this process; robust when other
jobs share the cores) and wall seconds, GPU events per CPU second, the ratios to the floor,
the load average, and the peak memory each analysis adds above the table (VmHWM after
resetting it through /proc/self/clear_refs; Linux only: memory the process already holds
is reused, so this can read 0; ``--memory`` measures each path in a fresh process instead).
Checks that both paths give the same instance table. Pin it to one core for the one-core figure: ``taskset -c 1 python ...``.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Final

from tracekit._alloc import JEMALLOC_CONF_VAR

# polars' jemalloc returns freed pages at once: each timed call then pays for freeing its own
# memory. With the default (ten seconds of decay) the pages one call freed were returned during
# the next call's allocations, charged to it: the floor's ~1 GB of temporaries to the attribution
# that follows it (0.3-0.7 s of its system time). Set before polars loads; a value set is kept.
ALLOCATOR: Final = "dirty_decay_ms:0,muzzy_decay_ms:0"
os.environ.setdefault(JEMALLOC_CONF_VAR, ALLOCATOR)

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

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


def _rss_kb(field: str) -> int:
    """A VmRSS / VmHWM line of /proc/self/status in KiB (0 where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _timed(fn: Any) -> tuple[Any, float, float, float]:
    """(result, wall s, CPU s, peak MB above the RSS at the start; nan if not measurable)."""
    gc.collect()
    ok = _reset_peak()
    base = _rss_kb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = (_rss_kb("VmHWM") - base) / 1024 if ok else float("nan")
    return out, wall, cpu, peak


def _memory_child(path: Path, which: str) -> int:
    """In a fresh process: read the table, then one attribution; print its peak RSS above the table."""
    from tracekit import _native
    from tracekit.analyzers.attribution import attribute_instances

    if which == "reference":
        _native.walk = None
    events = pl.read_parquet(path).rechunk()
    gc.collect()
    table_mb = _rss_kb("VmRSS") / 1024
    _, _, cpu, peak = _timed(lambda: attribute_instances(events))
    print(f"{which}: table read, {table_mb:.0f} MB RSS; attribution {cpu:.2f} s CPU, peak {peak:.0f} MB above that")
    return 0


def _memory(events: pl.DataFrame) -> None:
    import subprocess
    import tempfile

    largest = events.group_by("rank").len().get_column("len").max()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "table.parquet"
        events.write_parquet(path, compression="uncompressed")
        for which in ("compiled", "reference"):
            out = subprocess.run([sys.executable, __file__, "--memory-child", str(path), which],
                                 capture_output=True, text=True, check=True)
            print(f"fresh process, {out.stdout.strip()} (largest rank {largest:,} rows of {events.height:,})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--kernels", type=int, default=1_000_000, help="GPU events per rank")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--source", type=Path, default=None)
    ap.add_argument("--report", action="store_true", help="also time attribute_report (what the CLI runs)")
    ap.add_argument("--memory", action="store_true",
                    help="also measure each path's peak RSS above the table in a fresh process (the table goes through a temporary parquet file)")
    ap.add_argument("--profile", action="store_true",
                    help="also print where one compiled attribute_instances call spends its CPU (cProfile, process_time)")
    ap.add_argument("--memory-child", nargs=2, metavar=("RUN", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        return _memory_child(Path(args.memory_child[0]), args.memory_child[1])

    from polars.testing import assert_frame_equal

    from tracekit import _native
    from tracekit.analyzers.attribution import attribute_instances, attribute_report, check_sums
    from tracekit.analyzers.attribution_native import workers
    from tracekit.finalize.collectives import annotate_collectives
    from tracekit.finalize.membership import annotate_phases
    from tracekit.schema import conform, sort_events

    compiled = _native.walk
    if compiled is None:
        print("tracekit._walk is not built (or TRACEKIT_PURE=1): nothing to compare", file=sys.stderr)
        return 1

    def pure(fn: Any) -> Any:
        _native.walk = None
        try:
            return fn()
        finally:
            _native.walk = compiled

    t0 = time.perf_counter()
    if args.source is not None:
        raw = replicate(args.source, args.ranks, args.kernels)
        what = f"{args.source} replicated"
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
    events = annotate_phases(events).rechunk()
    t_phases = time.perf_counter() - t0
    n_gpu = events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height
    print(f"table: {what}: {events.height:,} events, {n_gpu:,} GPU events on {args.ranks} ranks (built in {t_build:.1f} s)")
    print(f"annotate_collectives {t_coll:.2f} s, annotate_phases {t_phases:.2f} s wall (once per run, at ingest)")

    dt = events.schema
    print(f"kind, category: {dt['kind'].__class__.__name__} columns of {len(dt['kind'].categories)} and "  # type: ignore[attr-defined]
          f"{len(dt['category'].categories)} values (codes, as ingest and finalize store them)")  # type: ignore[attr-defined]
    strings = events.with_columns(pl.col("kind").cast(pl.String), pl.col("category").cast(pl.String))
    runs: dict[str, list[tuple[float, float, float]]] = {
        k: [] for k in ("floor", "compiled", "reference", "strings", "report", "report_ref")}
    inst = ref_inst = str_inst = None
    for _ in range(args.repeat):
        _, *m = _timed(lambda: events.group_by(["rank", "name"]).agg(pl.col("dur_ns").sum()))
        runs["floor"].append(tuple(m))  # type: ignore[arg-type]
        inst, *m = _timed(lambda: attribute_instances(events))
        runs["compiled"].append(tuple(m))  # type: ignore[arg-type]
        ref_inst, *m = _timed(lambda: pure(lambda: attribute_instances(events)))
        runs["reference"].append(tuple(m))  # type: ignore[arg-type]
        str_inst, *m = _timed(lambda: attribute_instances(strings))
        runs["strings"].append(tuple(m))  # type: ignore[arg-type]
        if args.report:
            _, *m = _timed(lambda: attribute_report(events))
            runs["report"].append(tuple(m))  # type: ignore[arg-type]
            _, *m = _timed(lambda: pure(lambda: attribute_report(events)))
            runs["report_ref"].append(tuple(m))  # type: ignore[arg-type]
    assert inst is not None and ref_inst is not None and str_inst is not None
    check_sums(inst)
    assert_frame_equal(inst, ref_inst)  # the compiled pass gives the reference's numbers
    assert_frame_equal(inst, str_inst)

    def med(k: str, i: int) -> float:
        return statistics.median(r[i] for r in runs[k])

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} cores, {len(os.sched_getaffinity(0))} usable by this process "
          f"({workers(args.ranks)} attribution threads), load average {load}; "
          f"polars' allocator {JEMALLOC_CONF_VAR}={os.environ.get(JEMALLOC_CONF_VAR)}")
    print(f"identical instance tables (compiled vs reference vs compiled on String columns): {inst.height:,} instances, every column")
    fw, fc = med("floor", 0), med("floor", 1)
    print(f"{'':24s} {'wall s':>8s} {'CPU s':>8s} {'M GPU ev/CPU s':>15s} {'CPU/floor':>10s} {'peak MB':>8s}")
    for k, label in (("floor", "floor group_by"), ("compiled", "attribution (compiled)"), ("reference", "attribution (reference)"),
                     ("strings", "compiled, String columns"),
                     ("report", "attribute_report (comp.)"), ("report_ref", "attribute_report (ref.)")):
        if not runs[k]:
            continue
        w, c, p = med(k, 0), med(k, 1), med(k, 2)
        print(f"{label:24s} {w:8.3f} {c:8.3f} {n_gpu / c / 1e6:15.1f} {c / fc:9.2f}x {p:8.0f}")
    print(f"ratio attribution / floor: compiled {med('compiled', 1) / fc:.2f}x CPU, {med('compiled', 0) / fw:.2f}x wall; "
          f"reference {med('reference', 1) / fc:.2f}x CPU, {med('reference', 0) / fw:.2f}x wall (target <= 0.55x CPU)")
    print(f"compiled vs reference: {med('reference', 1) / med('compiled', 1):.1f}x less CPU, "
          f"{med('reference', 0) / med('compiled', 0):.1f}x less wall")
    if args.memory:
        _memory(events)
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)
        prof.runcall(attribute_instances, events)
        print("where one compiled attribute_instances call spends its CPU (cProfile, process_time; "
              "the rank threads' CPU shows under the lock waits of the main thread):")
        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(14)
    return 0


if __name__ == "__main__":
    sys.exit(main())
