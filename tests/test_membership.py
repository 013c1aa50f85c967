"""Phase instances and membership (tracekit.finalize.membership)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.analyzers.phase_rows import phase_instances
from tracekit.finalize.membership import annotate_phases, innermost
from tracekit.finalize.phases import format_facts, format_label
from tracekit.schema import conform, empty_events


def frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows))


def rng(name: str, start: int, dur: int, *, rank: int = 0, tid: int = 1) -> dict[str, Any]:
    return dict(rank=rank, kind="range", name=name, pid=10, tid=tid, start_ns=start, dur_ns=dur)


def launch(start: int, corr: int, *, rank: int = 0, tid: int = 1, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return dict(rank=rank, kind="launch", name=name, pid=10, tid=tid, start_ns=start, dur_ns=4, correlation=corr)


def kernel(name: str, start: int, dur: int, corr: int | None, *, rank: int = 0, stream: int = 7) -> dict[str, Any]:
    return dict(rank=rank, kind="kernel", name=name, device=rank, stream=stream, start_ns=start, dur_ns=dur, correlation=corr)


def by_name(df: pl.DataFrame) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in df.iter_rows(named=True)}


def test_nested_phases_go_to_innermost_and_same_phase_nesting_merges() -> None:
    rows = [
        rng(format_label("verify", cycle=3, bs=2, tok=8, seq=100, graphed=False), 100, 1000),
        rng("step[TARGET_VERIFY bs=4]", 110, 500),  # SGLang's own span inside ours: same instance
        rng(format_label("draft", cycle=3), 700, 200),  # a different phase nested: innermost wins
        rng(format_facts("verify", 3, accept=2.5), 1200, 0),
        launch(120, 1),
        launch(750, 2),
        launch(950, 3),  # back in verify after the draft range closed
        launch(1150, 4),  # after every range
        kernel("k_verify", 130, 10, 1),
        kernel("k_draft", 760, 10, 2),
        kernel("k_verify2", 960, 10, 3),
        kernel("k_none", 1160, 10, 4),
    ]
    out = annotate_phases(frame(rows))
    assert out.height == len(rows)
    assert out.get_column("name").to_list() == [r["name"] for r in rows]  # order kept
    k = by_name(out)
    vid = k["k_verify"]["phase_id"]
    assert k["k_verify"]["phase"] == "verify" and k["k_verify2"]["phase_id"] == vid
    assert k["k_draft"]["phase"] == "draft" and k["k_draft"]["phase_id"] != vid
    assert k["k_none"]["phase"] is None and k["k_none"]["phase_id"] is None
    assert k["k_verify"]["cycle"] == 3
    assert k["step[TARGET_VERIFY bs=4]"]["phase_id"] == vid
    inst = phase_instances(out)
    assert inst.height == 2
    v = inst.filter(pl.col("phase") == "verify").row(0, named=True)
    # our label wins (bs=2), the late marker adds accept, host time is the outer range
    assert v["batch_size"] == 2 and v["num_tokens"] == 8 and v["seq_len"] == 100
    assert v["graphed"] is False and v["accept_len"] == 2.5 and v["host_ns"] == 1000
    assert v["cycle"] == 3 and v["source"] == "host"


def test_sglang_span_fills_missing_facts() -> None:
    rows = [rng(format_label("verify", cycle=1), 0, 100), rng("step[TARGET_VERIFY bs=4]", 10, 50)]
    inst = phase_instances(annotate_phases(frame(rows)))
    assert inst.height == 1 and inst.row(0, named=True)["batch_size"] == 4


def test_graph_replay_kernels_inherit_the_graph_launch_phase() -> None:
    rows = [
        rng(format_label("decode", cycle=0, graphed=True), 0, 100),
        launch(10, 42, name="cudaGraphLaunch"),
        *[kernel(f"g{i}", 200 + 10 * i, 8, 42) for i in range(5)],  # run after the range closed
    ]
    out = annotate_phases(frame(rows))
    ks = out.filter(pl.col("kind") == "kernel")
    assert ks.get_column("phase").to_list() == ["decode"] * 5
    assert ks.get_column("phase_id").n_unique() == 1


def test_membership_is_per_thread_and_per_rank() -> None:
    rows = [
        rng(format_label("verify", cycle=0), 0, 1000, rank=0, tid=1),
        rng(format_label("draft", cycle=0), 100, 100, rank=0, tid=3),
        launch(10, 1, rank=0, tid=2),  # other thread with no open range: cross-thread member
        launch(20, 2, rank=1, tid=1),  # other rank, same correlation space
        launch(30, 3, rank=0, tid=1),
        launch(150, 4, rank=0, tid=3),  # its own thread's range is open: that one
        launch(150, 5, rank=0, tid=2),  # two open on other threads: the innermost (draft)
        launch(1500, 6, rank=0, tid=2),  # nothing open anywhere
        kernel("other_thread", 50, 5, 1),
        kernel("other_rank", 60, 5, 2, rank=1),
        kernel("member", 70, 5, 3),
        kernel("same_corr_other_rank", 80, 5, 3, rank=1),  # rank 1 has no launch 3
        kernel("own_thread_draft", 160, 5, 4),
        kernel("innermost_draft", 170, 5, 5),
        kernel("none_open", 1510, 5, 6),
    ]
    k = by_name(annotate_phases(frame(rows)))
    assert k["member"]["phase"] == "verify" and k["other_thread"]["phase"] == "verify"
    assert k["other_thread"]["phase_id"] == k["member"]["phase_id"]
    assert k["own_thread_draft"]["phase"] == "draft" and k["innermost_draft"]["phase"] == "draft"
    for name in ("other_rank", "same_corr_other_rank", "none_open"):
        assert k[name]["phase_id"] is None, name


def test_phase_ids_unique_across_ranks() -> None:
    rows = [rng(format_label("verify", cycle=c), 100 * c, 50, rank=r) for r in range(3) for c in range(4)]
    inst = phase_instances(annotate_phases(frame(rows)))
    assert inst.height == 12 and inst.get_column("phase_id").n_unique() == 12
    assert sorted(inst.get_column("phase_id").to_list()) == list(range(12))


def test_gpu_range_fallback_without_launch_rows() -> None:
    rows = [
        dict(rank=0, kind="gpu_range", name="step[DECODE bs=8]", device=0, stream=7, start_ns=100, dur_ns=50),
        kernel("in", 110, 10, None),
        kernel("other_stream", 110, 10, None, stream=9),
        kernel("out", 200, 10, None),
    ]
    out = annotate_phases(frame(rows))
    k = by_name(out)
    assert k["in"]["phase"] == "decode" and k["in"]["phase_id"] is not None
    assert k["other_stream"]["phase_id"] is None and k["out"]["phase_id"] is None
    inst = phase_instances(out)
    assert inst.row(0, named=True)["source"] == "gpu_range" and inst.row(0, named=True)["batch_size"] == 8


def test_extra_rule_makes_any_range_a_phase() -> None:
    rows = [rng("my_forward", 0, 100), launch(10, 1), kernel("k", 20, 5, 1)]
    assert annotate_phases(frame(rows)).get_column("phase_id").null_count() == 3
    out = annotate_phases(frame(rows), rules=[(r"^my_", "custom")])
    assert by_name(out)["k"]["phase"] == "custom"


def test_empty_and_rangeless_tables() -> None:
    assert annotate_phases(empty_events()).height == 0
    out = annotate_phases(frame([launch(0, 1), kernel("k", 10, 5, 1)]))
    assert out.get_column("phase_id").null_count() == 2
    assert phase_instances(out).height == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(1, 100)), min_size=1, max_size=25), st.lists(st.integers(0, 320), max_size=40))
def test_innermost_matches_brute_force(ranges: list[tuple[int, int]], queries: list[int]) -> None:
    """Latest-started open range, for arbitrary (also partially overlapping) ranges."""
    from tracekit.finalize.membership import range_parents

    s = np.array([a for a, _ in ranges], dtype=np.int64)
    e = s + np.array([d for _, d in ranges], dtype=np.int64)
    order = np.lexsort((-(e - s), s))
    s, e = s[order], e[order]
    t = np.array(queries, dtype=np.int64)
    got = innermost(s, e, range_parents(s, e), t)
    for q, g in zip(t.tolist(), got.tolist(), strict=True):
        open_ = [i for i in range(s.size) if s[i] <= q < e[i]]
        assert g == (max(open_) if open_ else -1)


def test_huge_thread_and_correlation_ids_take_the_general_paths() -> None:
    """pid/tid beyond the packed key and sparse correlation ids (no direct table)."""
    big = 10**12
    rows = [
        dict(rank=0, kind="range", name=format_label("verify", cycle=0), pid=big, tid=big + 1, start_ns=0, dur_ns=1000),
        dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=big, tid=big + 1, start_ns=10, dur_ns=4, correlation=10**15),
        dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=big, tid=big + 2, start_ns=20, dur_ns=4, correlation=3),
        dict(rank=0, kind="launch", name="cudaLaunchKernel", pid=big + 9, tid=big + 2, start_ns=20, dur_ns=4,
             correlation=4),
        kernel("member", 50, 5, 10**15),
        kernel("other_thread", 60, 5, 3),
        kernel("other_process", 65, 5, 4),
        kernel("no_launch", 70, 5, 7 * 10**14),
    ]
    k = by_name(annotate_phases(frame(rows)))
    assert k["member"]["phase"] == "verify" and k["other_thread"]["phase"] == "verify"  # cross-thread
    assert k["other_process"]["phase_id"] is None and k["no_launch"]["phase_id"] is None
