"""The compiled attribution pass (tracekit._walk) against the numpy reference path.

Every column of ``attribute_instances`` (every bucket of every instance, to the ns, windows,
queue delay, launches, cross-thread counts, allreduce numbers) must be identical on the
real samples, on generated multi-rank runs and on hypothesis-generated layouts (overlap
clusters of every size, PDL on one or several streams, equal starts, zero and negative
durations, missing correlations / launches / graph flags / categories, several threads).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from test_attribution_fast import random_run

from tracekit import _native
from tracekit.analyzers import attribution_native
from tracekit.analyzers.attribution import (
    attribute_instances,
    attribute_report,
    check_sums,
    prepare,
)
from tracekit.errors import AnalysisError
from tracekit.finalize import finalize_events
from tracekit.finalize.collectives import match_arrays
from tracekit.finalize.phases import format_label
from tracekit.schema import CATEGORY_DTYPE, KIND_DTYPE, conform, sort_events
from tracekit.store import read_run

REPO = Path(__file__).resolve().parent.parent
# the runs (not h200-lite's *.captured.parquet: refinalize.py's inputs, kept as captured)
SAMPLES = sorted(p for p in (REPO / "samples").glob("*/*.parquet") if not p.name.endswith(".captured.parquet"))
WALK = _native.walk
needs_walk = pytest.mark.skipif(WALK is None, reason="tracekit._walk not built (TRACEKIT_PURE=1 or no compiler)")


def test_walk_is_built_in_ci() -> None:
    # CI installs with the README's command, which builds the extension: it must be there
    if os.environ.get("CI") == "true" and os.environ.get("TRACEKIT_PURE") != "1":
        assert WALK is not None, "tracekit._walk was not built by pip install"


class _Spy:
    """Counts the compiled passes that ran (and did not fall back)."""

    def __init__(self, mp: pytest.MonkeyPatch) -> None:
        self.ok = 0
        real = attribution_native.attribute_ranks

        def spy(*a: Any, **k: Any) -> bool:
            r = real(*a, **k)
            self.ok += int(r)
            return r

        mp.setattr("tracekit.analyzers.attribution.attribute_ranks", spy)


def _reference(fn: Any, *a: Any, **k: Any) -> Any:
    saved = _native.walk
    _native.walk = None
    try:
        return fn(*a, **k)
    finally:
        _native.walk = saved


def _same(ev: pl.DataFrame, mp: pytest.MonkeyPatch, *, lat: int = 20_000, must_compile: bool = True) -> pl.DataFrame:
    spy = _Spy(mp)
    got = attribute_instances(ev, launch_latency_ns=lat)
    if must_compile:
        assert spy.ok == 1, "the compiled pass fell back to the reference"
    want = _reference(attribute_instances, ev, launch_latency_ns=lat)
    assert_frame_equal(got, want)
    return got


@needs_walk
@pytest.mark.parametrize("path", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
def test_real_samples_identical(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ev, _ = prepare(read_run(path))
    if ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"])).height == 0:
        pytest.skip("host-mode run: no GPU events to walk")  # cpu8-builtin: host attribution
    got = _same(ev, monkeypatch)
    assert got.height > 0 and int(got.get_column("gpu_events").sum()) > 0
    check_sums(got)


@needs_walk
def test_real_sample_report_identical() -> None:
    ev = read_run(REPO / "samples/h200x2-mainjob/eager.parquet")
    got = attribute_report(ev)
    want = _reference(attribute_report, ev)
    for key in want:
        assert_frame_equal(got[key], want[key])


@needs_walk
@pytest.mark.parametrize("seed", range(6))
def test_generated_runs_identical(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ev, _ = prepare(finalize_events(random_run(seed, ranks=3 + seed % 3, mismatch=seed == 3)))
    _same(ev, monkeypatch)
    _same(ev, monkeypatch, lat=0)


def _layout(draw: Any) -> pl.DataFrame:
    """A random multi-rank table: ranges on two threads, eager and graph launches, GPU events on
    several streams with arbitrary overlaps (the start order shuffled by ties and clusters)."""
    ranks = draw(st.integers(1, 3))
    rows: list[dict[str, Any]] = []
    cats = ["gemm", "attention", "moe", "norm", "allreduce", "comm", None, "weird", "elementwise", "sampling"]
    for rank in range(ranks):
        n_inst = draw(st.integers(1, 4))
        t = draw(st.integers(-50, 50))
        corr = draw(st.sampled_from([1, 10**12]))  # dense or sparse correlation ids
        for k in range(n_inst):
            h0 = t
            h_len = draw(st.integers(100, 2_000))
            tid = draw(st.sampled_from([1, 1, 2]))
            rows.append(dict(rank=rank, kind="range", name=format_label("verify", cycle=k, bs=2), pid=1, tid=1,
                             start_ns=h0, dur_ns=h_len))
            n = draw(st.integers(0, 9))
            graphed = draw(st.booleans())
            if graphed:
                rows.append(dict(rank=rank, kind="launch", name="cudaGraphLaunch", pid=1, tid=tid, start_ns=h0 + 10,
                                 dur_ns=draw(st.integers(0, 300)), correlation=corr,
                                 graph=draw(st.sampled_from([True, None]))))
            g = h0 + draw(st.integers(-200, 400))
            for i in range(n):
                c = corr if graphed else corr + 1 + i
                if not graphed and draw(st.integers(0, 9)) > 0:
                    ls = h0 + 20 + 15 * i
                    for _ in range(draw(st.sampled_from([1, 1, 1, 2]))):  # a repeated correlation: the first wins
                        rows.append(dict(rank=rank, kind="launch", name="cudaLaunchKernel", pid=1, tid=tid, start_ns=ls,
                                         dur_ns=draw(st.integers(0, 40)), correlation=c,
                                         graph=draw(st.sampled_from([False, False, None]))))
                kind = draw(st.sampled_from(["kernel"] * 6 + ["memcpy", "memset"]))
                dur = draw(st.sampled_from([0, -5, 1, 7, 30, 100, 250, 1_000]))
                g += draw(st.sampled_from([-300, -40, -1, 0, 0, 1, 13, 80, 500]))
                rows.append(dict(rank=rank, kind=kind, name="ncclKernel_AllReduce" if i % 4 == 3 else f"k{i % 3}",
                                 category=draw(st.sampled_from(cats)), device=rank,
                                 stream=draw(st.sampled_from([7, 7, 8, 20, None])), start_ns=g, dur_ns=dur,
                                 correlation=None if draw(st.integers(0, 19)) == 0 else c, graph=graphed))
                g += max(dur, 0)
            corr += n + 2
            t += h_len + draw(st.integers(-300, 3_000))  # may overlap the next instance's range
    return sort_events(conform(pl.DataFrame(rows)))


@needs_walk
@settings(max_examples=150, deadline=None)
@given(st.data())
def test_random_layouts_identical(data: st.DataObject) -> None:
    raw = _layout(data.draw)
    ev, _ = prepare(finalize_events(raw))
    with pytest.MonkeyPatch.context() as mp:
        got = _same(ev, mp, lat=data.draw(st.sampled_from([0, 20, 20_000])))
    check_sums(got)


@needs_walk
def test_large_cluster_and_many_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    # one long comm kernel on its own stream overlapping 3,000 short kernels on 5 streams with
    # PDL overlaps: the sweep sorts thousands of points, the PDL rule tracks several streams
    r = np.random.default_rng(7)
    rows: list[dict[str, Any]] = [
        dict(rank=0, kind="range", name=format_label("verify", cycle=0, bs=2), pid=1, tid=1, start_ns=0, dur_ns=10**7),
        dict(rank=0, kind="kernel", name="ncclKernel_AllReduce", category="allreduce", device=0, stream=99,
             start_ns=50, dur_ns=5 * 10**6, correlation=1),
        dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=1, tid=1, start_ns=10, dur_ns=5, correlation=1, graph=False),
    ]
    g = 100
    for i in range(3_000):
        c = 2 + i
        rows.append(dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=1, tid=1, start_ns=20 + i, dur_ns=3,
                         correlation=c, graph=False))
        rows.append(dict(rank=0, kind="kernel", name=f"k{i % 4}", category=["gemm", "norm", "moe", "attention"][i % 4],
                         device=0, stream=int(r.integers(1, 6)), start_ns=g, dur_ns=int(r.integers(1, 3_000)),
                         correlation=c))
        g += int(r.integers(-500, 2_000))
    ev, _ = prepare(finalize_events(sort_events(conform(pl.DataFrame(rows)))))
    got = _same(ev, monkeypatch)
    assert int(got.get_column("gpu_events").item()) == 3_001


@needs_walk
@pytest.mark.parametrize("seed", range(3))
def test_rows_unsorted_inside_ranks(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # ranks contiguous, rows shuffled inside each rank: the compiled pass sorts each instance itself
    ev, _ = prepare(finalize_events(random_run(seed, ranks=3)))
    shuffled = ev.sample(fraction=1.0, shuffle=True, seed=seed).sort("rank", maintain_order=True)
    assert not shuffled.get_column("start_ns").is_sorted()
    got = _same(shuffled, monkeypatch)
    assert_frame_equal(got, attribute_instances(ev))


@needs_walk
def test_interleaved_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    # two phases open at once on two threads (an overlap scheduler): their kernels alternate on
    # the GPU, so one instance's events are not contiguous in start order
    rows: list[dict[str, Any]] = []
    for k, tid in enumerate((1, 2)):
        rows.append(dict(rank=0, kind="range", name=format_label("verify" if k else "draft", cycle=0, bs=2), pid=1,
                         tid=tid, start_ns=0, dur_ns=5_000))
        for i in range(6):
            c = 100 * (k + 1) + i
            rows.append(dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=1, tid=tid, start_ns=10 + 300 * i + k,
                             dur_ns=20, correlation=c, graph=False))
            rows.append(dict(rank=0, kind="kernel", name=f"k{k}", category=("gemm", "norm")[k], device=0, stream=7 + k,
                             start_ns=1_000 + 500 * i + 250 * k, dur_ns=300 - 100 * k, correlation=c))
    ev, _ = prepare(finalize_events(sort_events(conform(pl.DataFrame(rows)))))
    got = _same(ev, monkeypatch)
    assert got.get_column("gpu_events").to_list() == [6, 6]


@needs_walk
def test_unsorted_table_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    ev, _ = prepare(finalize_events(random_run(1, ranks=3)))
    shuffled = ev.sample(fraction=1.0, shuffle=True, seed=3)
    got = _same(shuffled, monkeypatch, must_compile=False)
    assert_frame_equal(got, attribute_instances(ev))


@needs_walk
def test_codes_of_every_string_layout() -> None:
    names = ("kernel", "launch", "a-name-longer-than-twelve-bytes")
    vals = np.array([1, 2, 3, 9, -1], dtype=np.int8)
    data = ["kernel", None, "launch", "other", "a-name-longer-than-twelve-bytes", "a-name-longer-than-twelve-bytez", ""]
    want = [1, -1, 2, 9, 3, 9, 9]
    for s in (
        pl.Series(data),  # string view
        pl.Series(data).slice(1, 6),  # with an offset
        pl.Series(data, dtype=pl.Categorical),  # dictionary-encoded
        pl.Series(data, dtype=pl.Enum(sorted({d for d in data if d is not None}))),
    ):
        exp = want[1:] if s.len() == 6 else want
        assert attribution_native.codes(s, names, vals).tolist() == exp
    chunked = pl.concat([pl.Series(data[:3]), pl.Series(data[3:])], rechunk=False)
    assert chunked.n_chunks() == 2
    assert attribution_native.codes(chunked, names, vals).tolist() == want



@needs_walk
@pytest.mark.parametrize("seed", range(3))
def test_enum_codes_read_directly_same_as_strings(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A finalized table holds kind / category as Enum columns: the walk reads their codes through a
    table (no string pass); the same table with String columns (coded by codes()) gives the same
    instances; kernels left without a category are refused."""
    ev, _ = prepare(finalize_events(random_run(seed, ranks=3)))
    assert ev.schema["kind"] == KIND_DTYPE and ev.schema["category"] == CATEGORY_DTYPE
    kc = attribution_native.kind_codes(ev)
    assert kc is not None and kc.category is not None and kc.kind.dtype == pl.UInt8
    got = _same(ev, monkeypatch)
    strings = ev.with_columns(pl.col("kind").cast(pl.String), pl.col("category").cast(pl.String))
    sc = attribution_native.kind_codes(strings)
    assert sc is not None and sc.category is None
    assert sc.range_rows().tolist() == kc.range_rows().tolist() and sc.kinds().tolist() == kc.kinds().tolist()
    assert_frame_equal(_same(strings, monkeypatch), got)
    # kernels without a category (a table that skipped finalize): one clear error on both paths,
    # never a category guessed by the reader
    third = pl.int_range(pl.len()) % 3 == 0
    for table in (ev, strings):
        nocat = table.with_columns(pl.when(third).then(None).otherwise(pl.col("category")).alias("category"))
        assert nocat.filter((pl.col("kind") == "kernel") & pl.col("category").is_null()).height > 0
        with pytest.raises(AnalysisError, match="GPU events have no category"):
            attribute_instances(nocat)
        with pytest.raises(AnalysisError, match="GPU events have no category"):
            _reference(attribute_instances, nocat)


def _match_both(g: list[int], op: list[int], seq: list[int], rk: list[int], start: list[int], dur: list[int]) -> None:
    arrs = [np.array(a, dtype=np.int64) for a in (g, op, seq, rk, start, dur)]
    got = match_arrays(*arrs)
    saved = _native.walk
    _native.walk = None
    try:
        want = match_arrays(*arrs)
    finally:
        _native.walk = saved
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


@needs_walk
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compiled_matching_equals_numpy(data: st.DataObject) -> None:
    """walk.match (no sort: segments addressed as base[group] + coll_seq) gives match_arrays' numpy
    wait and matched flag for every row: counts that differ across ranks, ops that differ, groups
    with gaps in their codes, repeated (group, seq, rank), sparse or negative coll_seq (declined: the
    numpy path runs)."""
    n = data.draw(st.integers(0, 40))
    seq_hi = data.draw(st.sampled_from([3, 8, 10**7]))
    ints = st.lists
    g = data.draw(ints(st.integers(1, 4), min_size=n, max_size=n))
    op = data.draw(ints(st.integers(1, 3), min_size=n, max_size=n))
    seq = data.draw(ints(st.integers(-1 if seq_hi == 8 else 0, seq_hi), min_size=n, max_size=n))
    rk = data.draw(ints(st.integers(0, 3), min_size=n, max_size=n))
    start = data.draw(ints(st.integers(-50, 500), min_size=n, max_size=n))
    dur = data.draw(ints(st.integers(-5, 300), min_size=n, max_size=n))
    _match_both(g, op, seq, rk, start, dur)


@needs_walk
def test_compiled_matching_of_a_real_layout() -> None:
    """Every rank its k-th allreduce: matched; one rank with one more: the group unmatched; the same
    numbers as the numpy matching."""
    rng = np.random.default_rng(3)
    rows = [(g, s, r) for g in (1, 2) for s in range(50) for r in range(4)] + [(2, 50, 0)]
    g, seq, rk = (list(x) for x in zip(*rows, strict=True))
    start = rng.integers(0, 10**6, len(rows)).tolist()
    dur = rng.integers(1, 10**4, len(rows)).tolist()
    _match_both(g, [1] * len(rows), seq, rk, start, dur)
    wait, ok = match_arrays(*(np.array(a, dtype=np.int64) for a in (g, [1] * len(rows), seq, rk, start, dur)))
    assert ok.tolist() == [x == 1 for x in g] and int(wait[ok].sum()) > 0


def test_rank_codes_become_run_codes() -> None:
    """Each rank pass interns group / op in its own order of first appearance; the run's codes
    name the same strings, whether the ranks' tables agree (one table) or not."""
    strings = [["g0", "g1"], ["g1", "g0", "g2"], [], ["g0"]]
    want = [["g0", "g1", "g1"], ["g1", "g2", "g0"], [], ["g0", "g0"]]
    local = np.array([1, 2, 2, 1, 3, 2, 1, 1], dtype=np.int64)
    counts = np.array([3, 3, 0, 2], dtype=np.int64)
    got, names = attribution_native._run_codes(local, counts, strings)
    assert [names[c - 1] for c in got.tolist()] == [x for w in want for x in w]
    same = [["a", "b"], ["a"], ["a", "b", "c"]]
    got, names = attribution_native._run_codes(np.array([2, 1, 1, 3], dtype=np.int64), np.array([1, 1, 2]), same)
    assert [names[c - 1] for c in got.tolist()] == ["b", "a", "a", "c"] and names == ["a", "b", "c"]
