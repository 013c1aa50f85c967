"""Straggler view: last arrivals, inflicted wait, what the late rank did before."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from forensic_frames import Spec, build, manifest
from straggler_reference import reference_segments

from tracekit.analyzers.coll_match import matched_collectives
from tracekit.analyzers.stragglers import rank_state, segments, stragglers
from tracekit.cli import cli
from tracekit.schema import conform
from tracekit.store import write_run


def test_straggler_is_found_and_its_slow_kernel_named() -> None:
    s = Spec(ranks=4, cycles=5, straggler=2, straggle_ns=15_000, jitter_ns=300)
    view = stragglers(build(s))
    ranks = view["ranks"]
    r2 = ranks.filter(pl.col("rank") == 2).row(0, named=True)
    assert r2["collectives"] == 5 * s.layers
    assert r2["last_count"] == 5 * s.layers and r2["last_share"] == 1.0
    assert r2["own_wait_ns"] == 0
    others = ranks.filter(pl.col("rank") != 2)
    assert others.get_column("last_count").to_list() == [0, 0, 0]
    # inflicted wait = sum of the other ranks' waits, exactly
    assert r2["inflicted_wait_ns"] == others.get_column("own_wait_ns").sum()
    # every allreduce waits ~straggle_ns on 3 ranks
    assert r2["inflicted_wait_ns"] == pytest.approx(3 * 20 * s.straggle_ns, rel=0.05)
    # before its late arrivals rank 2 was busy ~straggle_ns longer (19 segments: the first
    # collective of a rank has no previous one)
    assert r2["busy_ns_excess"] == pytest.approx(19 * s.straggle_ns, rel=0.05)
    assert abs(r2["launch_gap_ns_excess"]) < 1_000
    top = view["kernels"].filter(pl.col("rank") == 2).row(0, named=True)
    assert top["family"] == "fused_moe_kernel"
    assert top["excess_ns"] == pytest.approx(19 * s.straggle_ns, rel=0.05)


def test_no_straggler_when_arrivals_agree() -> None:
    view = stragglers(build(Spec(ranks=2, cycles=3, jitter_ns=0)))
    assert view["collectives"].height == 12
    assert view["collectives"].get_column("last_rank").null_count() == 12
    assert view["ranks"].get_column("last_count").to_list() == [0, 0]
    assert view["ranks"].get_column("own_wait_ns").to_list() == [0, 0]


def test_launch_gaps_and_syncs_before_late_arrival() -> None:
    shift = 40_000
    s = Spec(ranks=2, cycles=2, jitter_ns=0, launch_gap_ns=5_000, late_launch_rank=1, late_launch_ns=shift)
    ev = build(s)
    # a host sync on rank 1 just before its second MoE launch
    moe = ev.filter((pl.col("rank") == 1) & (pl.col("name") == "fused_moe_kernel")).sort("start_ns")
    t0 = moe.get_column("start_ns")[1] - s.launch_gap_ns - 10_000
    sync = pl.DataFrame({"rank": [1], "kind": ["sync"], "name": ["cudaStreamSynchronize"], "start_ns": [t0], "dur_ns": [8_000]})
    ev = conform(pl.concat([ev, sync], how="diagonal_relaxed"))
    view = stragglers(ev)
    r1 = view["ranks"].filter(pl.col("rank") == 1).row(0, named=True)
    assert r1["last_count"] == 8  # every allreduce
    # the GPU waited for the host before every late MoE launch: rank 1's gap is the late launch plus the
    # launch gap both ranks have (their kernels start 2 µs after the launch call returns, within the
    # 20 µs latency: a launch gap on both, the walk's rule); 7 segments: the first collective has none
    assert r1["launch_gap_ns_excess"] == 7 * shift
    assert abs(r1["busy_ns_excess"]) < 10
    assert r1["syncs_before_late"] == 1 and r1["sync_ns_before_late"] == 8_000
    assert view["kernels"].filter(pl.col("rank") == 1).is_empty()  # no kernel was slower


def test_segments_split_like_the_walk_on_random_layouts() -> None:
    """Random events on 2 ranks (overlaps, graph replays sharing a launch, unknown launches): every
    segment's split equals the plain-loop reference of the walk's launch-gap rule."""
    rng = np.random.default_rng(7)
    rows: list[dict[str, object]] = []
    corr = 1
    for rank in (0, 1):
        t = 1_000_000
        for k in range(40):
            for _ in range(int(rng.integers(0, 6))):
                gap = int(rng.integers(0, 30_000))
                ls = t + gap - int(rng.integers(0, 40_000))
                rows.append({"rank": rank, "kind": "launch", "name": "cudaLaunchKernel", "start_ns": ls,
                             "dur_ns": int(rng.integers(1_000, 8_000)), "correlation": corr})
                for _rep in range(int(rng.integers(1, 3))):  # a graph replay: several events, one launch
                    d = int(rng.integers(0, 20_000))
                    known = rng.random() < 0.9
                    rows.append({"rank": rank, "kind": "kernel", "name": "k", "start_ns": t + gap, "dur_ns": d,
                                 "correlation": corr if known else corr + 10**6, "stream": int(rng.integers(7, 9))})
                    t += gap + int(rng.integers(0, d + 1))
                    gap = int(rng.integers(0, 3_000))
                corr += 1
            t += int(rng.integers(0, 50_000))
            rows.append({"rank": rank, "kind": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                         "start_ns": t, "dur_ns": 5_000, "coll_seq": k, "group": "tp", "coll_op": "allreduce",
                         "category": "allreduce"})
            t += 5_000
    ev = conform(pl.DataFrame(rows, infer_schema_length=None))
    m = matched_collectives(ev)
    for latency in (0, 20_000):
        got = segments(ev, m, latency)
        want = reference_segments(ev, m, latency)
        assert got.height == len(want) == 2 * 39
        for r in got.iter_rows(named=True):
            w = want[(r["key"], r["rank"])]
            assert (r["busy_ns"], r["launch_gap_ns"], r["other_idle_ns"]) == (w.busy, w.launch, w.other_idle)


def test_rank_state_takes_clock_keys_not_env() -> None:
    man = manifest(2, **{"1": {"gpu": {"sm_clock_mhz": 1410, "throttle_reasons": ["HW_SLOWDOWN"]}}})
    man["ranks"]["0"]["env"]["CUDA_CLOCK_HINT"] = "x"  # type: ignore[index]
    st = rank_state(man)
    keys = set(st.filter(pl.col("rank") == 1).get_column("key").to_list())
    assert keys == {"gpu.sm_clock_mhz", "gpu.throttle_reasons"}
    assert not st.filter(pl.col("key").str.starts_with("env")).height


def test_cli_ranks(tmp_path: Path) -> None:
    ev = build(Spec(ranks=3, cycles=3, straggler=1))
    path = tmp_path / "run.parquet"
    write_run(ev, path, manifest(3, **{"1": {"gpu": {"sm_clock_mhz": 1410, "throttle_reasons": ["HW_SLOWDOWN"]}}}))
    res = CliRunner().invoke(cli, ["ranks", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert [r["last_count"] for r in doc["ranks"]] == [0, 12, 0]
    assert doc["collectives"]["matched"] == 12
    assert doc["state"]["1"]["gpu.throttle_reasons"] == "['HW_SLOWDOWN']"
    assert any("rank 1 arrived last at 12/12" in line for line in doc["summary"])
    text = CliRunner().invoke(cli, ["ranks", str(path)])
    assert text.exit_code == 0 and "HW_SLOWDOWN" in text.output
    one = tmp_path / "one.parquet"
    write_run(ev.filter(pl.col("rank") == 0), one, manifest(1))
    res1 = CliRunner().invoke(cli, ["ranks", str(one), "--json"])
    assert res1.exit_code == 0
    assert "no collective matched" in json.loads(res1.output)["summary"][0]
