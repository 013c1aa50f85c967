"""The fast attribution path (numpy columns taken once) against a straightforward reference.

The reference works one instance at a time with Python dicts and polars filters:
bucket codes through ``bucket_codes`` below (polars expressions), launch ends and
first-of-launch through dicts keyed by (rank, correlation), the walk on that
instance alone, queue delay by scanning the rank's GPU events, launches by
counting rows, allreduce numbers from the ``match_collectives`` frame.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.analyzers.attribution import (
    BUCKET_COLUMNS,
    attribute_instances,
    check_sums,
    matched,
    prepare,
)
from tracekit.analyzers.buckets import UNKNOWN_LAUNCH, walk
from tracekit.buckets import BUCKETS
from tracekit.finalize import finalize_events
from tracekit.finalize.collectives import match_arrays, match_collectives
from tracekit.finalize.phases import format_label
from tracekit.schema import conform

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def bucket_codes(gpu: pl.DataFrame) -> np.ndarray[Any, np.dtype[np.int8]]:
    """The reference code per GPU event of a finalized table: memory for copies, else the bucket of
    its category (every category is the bucket of that name)."""
    b = (pl.when(pl.col("kind").cast(pl.String).is_in(["memcpy", "memset"])).then(pl.lit("memory"))
         .otherwise(pl.col("category").cast(pl.String)))
    names = gpu.select(b.alias("b")).get_column("b").to_list()
    return np.array([BUCKETS.index(n) for n in names], dtype=np.int8)
CATS = ["gemm", "attention", "moe", "norm", None, "weird_unknown", "memcpy", "allreduce"]


def random_run(seed: int, ranks: int = 3, cycles: int = 4, *, mismatch: bool = False) -> pl.DataFrame:
    """Several ranks of graphed and eager phases: overlaps, copies, missing/unknown categories,
    kernels without a launch, launch rows without a graph flag, allreduces (optionally one extra)."""
    r = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for rank in range(ranks):
        t = int(r.integers(0, 5_000))
        corr = 1
        for cyc in range(cycles):
            for phase in ("draft", "verify"):
                graphed = phase == "draft"
                h0 = t
                n = 3 + (seed * 7 + cyc * 5 + len(phase)) % 20  # the same on every rank: collectives match
                gl_end = t + 2_000
                if graphed:
                    graph_flag = None if r.random() < 0.3 else True
                    rows.append(dict(rank=rank, kind="launch", name="cudaGraphLaunch", pid=1, tid=1, start_ns=t + 500,
                                     dur_ns=1_500, correlation=corr, graph=graph_flag))
                g = t + int(r.integers(0, 30_000))  # GPU clock: may still be busy with earlier work
                for i in range(n):
                    ar = i % 5 == 2
                    kind = "memcpy" if r.random() < 0.08 and not ar else "kernel"
                    name = AR if ar else f"k{int(r.integers(0, 6))}"
                    cat = None if ar and r.random() < 0.5 else ("allreduce" if ar else CATS[int(r.integers(0, 7))])
                    dur = int(r.integers(100, 5_000))
                    g += int(r.integers(-800, 3_000))  # negative: overlaps the previous kernel
                    c = corr if graphed else corr + 1 + i
                    if not graphed and r.random() > 0.05:  # a few kernels have no launch row
                        le = t + 1_000 + i * 700
                        rows.append(dict(rank=rank, kind="launch", name="cudaLaunchKernel", pid=1, tid=1,
                                         start_ns=le - 300, dur_ns=300, correlation=c, graph=False))
                    rows.append(dict(rank=rank, kind=kind, name=name, category=cat, device=rank,
                                     stream=20 if ar else 7 + int(r.random() < 0.2), start_ns=g, dur_ns=dur,
                                     correlation=None if r.random() < 0.03 else c, graph=graphed))
                    g += dur
                corr += n + 2
                t = max(gl_end, t + n * 700 + 1_500)
                rows.append(dict(rank=rank, kind="range", name=format_label(phase, cycle=cyc, bs=4), pid=1, tid=1,
                                 start_ns=h0, dur_ns=t - h0))
                t += int(r.integers(1_000, 20_000))
        if mismatch and rank == 0:
            rows.append(dict(rank=0, kind="kernel", name=AR, category="allreduce", device=0, stream=20,
                             start_ns=t + 10**6, dur_ns=100, correlation=None, graph=False))
    return conform(pl.DataFrame(rows))


def reference(ev: pl.DataFrame, lat: int = 20_000) -> dict[int, dict[str, Any]]:
    """Per phase_id: the numbers attribute_instances reports, computed the slow way."""
    gpu = ev.with_row_index("_i").filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    launches = ev.filter(pl.col("kind") == "launch")
    launch_end: dict[tuple[int, int], int] = {}
    for rk, c, s, d in launches.select("rank", "correlation", "start_ns", "dur_ns").iter_rows():
        if c is not None and (rk, c) not in launch_end:
            launch_end[(rk, c)] = s + (d or 0)
    first: dict[int, bool] = {}
    seen: set[tuple[int, int]] = set()
    for i, rk, c in gpu.sort(["rank", "start_ns"], maintain_order=True).select("_i", "rank", "correlation").iter_rows():
        first[i] = c is None or (rk, c) not in seen
        if c is not None:
            seen.add((rk, c))
    coll = match_collectives(ev).filter(pl.col("coll_op") == "allreduce")
    ranges = ev.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
    out: dict[int, dict[str, Any]] = {}
    for pid, rk, h0 in ranges.select("phase_id", "rank", "start_ns").iter_rows():
        mem = gpu.filter(pl.col("phase_id") == pid)
        row: dict[str, Any] = {"gpu_events": mem.height}
        if mem.height:
            codes = bucket_codes(mem)
            le = np.array([launch_end.get((rk, c), UNKNOWN_LAUNCH) if c is not None else UNKNOWN_LAUNCH
                           for c in mem.get_column("correlation").to_list()], dtype=np.int64)
            f = np.array([first[i] for i in mem.get_column("_i").to_list()])
            s = mem.get_column("start_ns").to_numpy()
            e = s + mem.get_column("dur_ns").to_numpy()
            st = mem.get_column("stream").fill_null(-1).to_numpy().astype(np.int64)
            w = walk(np.zeros(mem.height, dtype=np.int64), s, e, codes, le, 1, lat, f, st)
            row.update({c: int(w.buckets[0, j]) for j, c in enumerate(BUCKET_COLUMNS)})
            row.update(window_start_ns=int(s.min()), window_end_ns=int(e.max()), gpu_window_ns=int(e.max() - s.min()),
                       overlapped_comm_ns=int(w.overlapped_comm[0]))
            before = gpu.filter(pl.col("rank") == rk, pl.col("start_ns") < int(s.min()))
            busy = before.select((pl.col("start_ns") + pl.col("dur_ns")).max()).item()
            row["queue_delay_ns"] = 0 if busy is None else max(0, min(busy, int(s.min())) - h0)
        ls = launches.filter(pl.col("phase_id") == pid)
        is_graph = [g if g is not None else "GraphLaunch" in n for g, n in ls.select("graph", "name").iter_rows()]
        row.update(graph_launches=sum(is_graph), eager_launches=len(is_graph) - sum(is_graph))
        a = coll.filter(pl.col("phase_id") == pid)
        row["allreduce_kernel_ns"] = int(a.get_column("dur_ns").sum())
        ok = bool(a.get_column("matched").all())
        row["allreduce_wait_ns"] = int(a.get_column("wait_ns").sum()) if ok else None
        row["allreduce_transfer_ns"] = int(a.get_column("transfer_ns").sum()) if ok else None
        out[pid] = row
    return out


@pytest.mark.parametrize(("seed", "mismatch"), [(0, False), (1, False), (2, True), (3, False)])
def test_fast_path_matches_reference(seed: int, mismatch: bool) -> None:
    ev, _ = prepare(finalize_events(random_run(seed, mismatch=mismatch)))
    inst = attribute_instances(ev)
    check_sums(inst)
    ref = reference(ev)
    assert inst.height == len(ref) == 2 * 4 * 3
    checked = 0
    for row in inst.iter_rows(named=True):
        exp = ref[row["phase_id"]]
        for k, v in exp.items():
            assert row[k] == v, (row["phase_id"], k, row[k], v)
            checked += 1
    assert checked > 500
    # the random runs exercise what they are meant to
    assert inst.get_column("overlapped_comm_ns").sum() > 0 and inst.get_column("launch_overhead_ns").sum() > 0
    assert inst.get_column("queue_delay_ns").sum() > 0 and inst.get_column("graph_launches").sum() > 0
    assert (inst.get_column("allreduce_wait_ns").null_count() > 0) == mismatch


@pytest.mark.parametrize("seed", [0, 2])
def test_numpy_matching_equals_the_match_frame(seed: int) -> None:
    ev, _ = prepare(finalize_events(random_run(seed, mismatch=seed == 2)))
    assert_frame_equal(attribute_instances(ev), attribute_instances(ev, collectives=matched(ev)))
    m = match_collectives(ev.filter(pl.col("coll_seq").is_not_null()))
    codes = m.select(pl.col("group").rank("dense").cast(pl.Int64), pl.col("coll_op").rank("dense").cast(pl.Int64))
    wait, ok = match_arrays(
        codes.to_series(0).to_numpy(), codes.to_series(1).to_numpy(), m.get_column("coll_seq").to_numpy(),
        m.get_column("rank").cast(pl.Int64).to_numpy(), m.get_column("start_ns").to_numpy(), m.get_column("dur_ns").to_numpy(),
    )
    assert ok.tolist() == m.get_column("matched").to_list()
    assert wait[ok].tolist() == m.get_column("wait_ns").drop_nulls().to_list()
    assert (~ok).any() == (seed == 2)


def test_rank_chunks_give_the_same_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.analyzers.attribution as attribution

    ev, _ = prepare(finalize_events(random_run(4, ranks=4)))
    whole = attribute_instances(ev)
    monkeypatch.setattr(attribution, "_CHUNK_ROWS", 1)  # one chunk per rank
    assert len(attribution._rank_chunks(ev)) == 4
    assert_frame_equal(attribute_instances(ev), whole)
    # ranks not contiguous: one chunk, same result
    shuffled = ev.sample(fraction=1.0, shuffle=True, seed=1)
    assert attribution._rank_chunks(shuffled) == [(0, ev.height)]
    assert_frame_equal(attribute_instances(shuffled), whole)
