"""``tracekit capture`` end to end on CPU: spawned gloo ranks, shards, merge, env manifest, dilation."""

from __future__ import annotations

import gzip
import json
import os
import statistics
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from fault_workload import FaultyWorkload

pytest.importorskip("torch")

from tracekit.cli import cli
from tracekit.collectors.capture import CaptureConfig, run_capture
from tracekit.collectors.workload.config import make_config
from tracekit.collectors.workload.runner import accept_lengths
from tracekit.store import load_run
from tracekit.summary import manifest_differences

LAUNCHER_ONLY = "NCCL_TK_TEST_LAUNCHER_ONLY"
RANK1_ONLY = "NCCL_TK_TEST_RANK1_ONLY"


def _wl(**kw: Any) -> Any:
    return make_config("tiny", batch_size=2, ctx_start=32, **kw)


@pytest.fixture(scope="module")
def cap2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, CaptureConfig]:
    d = tmp_path_factory.mktemp("cap2")
    # after=0: the reference is the warm-up cycle alone here, so the spec test below compares one cycle with its own
    # phases (pooled reference blocks: tests/test_transformers_capture.py, tests/test_profile_modes_sample.py)
    cc = CaptureConfig(out=str(d / "run.parquet"), world=2, cycles=3, warmup=2, after=0, device="cpu", workload=_wl(),
                       keep_json=str(d / "json"), timeout_s=120,
                       rank_env={0: {LAUNCHER_ONLY: None}, 1: {LAUNCHER_ONLY: None, RANK1_ONLY: "7"}})
    os.environ[LAUNCHER_ONLY] = "1"
    try:
        res = run_capture(cc)
    finally:
        os.environ.pop(LAUNCHER_ONLY, None)
    return res, d, cc


def test_two_ranks_end_to_end(cap2: tuple[Any, Path, CaptureConfig]) -> None:
    res, _d, cc = cap2
    run = load_run(res.out)
    assert run.ranks == [0, 1] and res.missing == {} and "missing_ranks" not in run.manifest
    assert run.manifest["world_size"] == 2 and run.manifest["source"] == "capture"
    assert not Path(str(res.out) + ".d").exists()  # shards merged then removed
    assert res.events == run.events.height and res.size_bytes == res.out.stat().st_size
    k, b = cc.workload.draft_steps, cc.workload.batch_size
    ranges = run.events.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
    for r in (0, 1):
        sec = run.manifest["ranks"][str(r)]
        win = run.events.filter(pl.col("rank") == r)
        assert win["start_ns"].min() >= sec["session"]["window_start_unix_ns"]
        assert win["start_ns"].max() <= sec["session"]["window_end_unix_ns"]
        assert sec["window"] == {"first_cycle": 2, "cycles": 3, "requested": 3} and sec["aborted"] is None
        assert sec["workload"]["accept"]["modelled"] is True
        for c in (2, 3, 4):
            rows = {x["phase"]: x for x in ranges.filter(pl.col("rank") == r, pl.col("cycle") == c).iter_rows(named=True)}
            assert set(rows) == {"draft", "verify", "draft_extend", "decode"}
            assert rows["verify"]["num_tokens"] == b * (k + 1) and rows["verify"]["batch_size"] == b
            assert rows["verify"]["graphed"] is False
            assert rows["verify"]["accept_len"] == pytest.approx(statistics.fmean(accept_lengths(cc.workload, c)), abs=1e-4)
        # host ops are attributed to the phases they ran in
        ops = win.filter(pl.col("kind") == "op")
        assert set(ops["phase"].drop_nulls().unique().to_list()) >= {"draft", "verify", "draft_extend", "decode"}


def test_dilation_stats_per_rank(cap2: tuple[Any, Path, CaptureConfig]) -> None:
    res, _, _ = cap2
    for sec in res.manifest["ranks"].values():
        un, pr = sec["unprofiled"], sec["profiled"]
        assert set(un) == set(pr) == {"draft", "verify", "draft_extend", "decode"}
        assert pr["verify"]["count"] == 3 and un["verify"]["count"] == 1  # warm-up 2: first one untimed
        assert sec["reference"] == {}  # after=0: no second block
        assert all(v["clock"] == "perf_counter" and v["median_ns"] > 0 for v in un.values())
        assert sec["dilation"]["verify"] == pytest.approx(pr["verify"]["median_ns"] / un["verify"]["median_ns"])


def test_env_propagation_shows_in_manifest_and_info(cap2: tuple[Any, Path, CaptureConfig]) -> None:
    res, _, _ = cap2
    man = res.manifest
    assert man["launcher"]["env"][LAUNCHER_ONLY] == "1"
    assert LAUNCHER_ONLY not in man["ranks"]["0"]["env"] and LAUNCHER_ONLY not in man["ranks"]["1"]["env"]
    assert man["ranks"]["1"]["env"][RANK1_ONLY] == "7" and RANK1_ONLY not in man["ranks"]["0"]["env"]
    assert man["ranks"]["0"]["end"]["env"] == man["ranks"]["0"]["env"]
    diffs = {d.key: d for d in manifest_differences(man)}
    assert diffs[f"env.{LAUNCHER_ONLY}"].kind == "launcher_only" and diffs[f"env.{LAUNCHER_ONLY}"].loud
    assert any(RANK1_ONLY in key for key in diffs)
    out = CliRunner().invoke(cli, ["info", str(res.out), "--json"])
    assert out.exit_code == 0, out.output
    assert LAUNCHER_ONLY in out.output and RANK1_ONLY in out.output


def test_keep_json_is_a_real_kineto_trace_matching_the_table(cap2: tuple[Any, Path, CaptureConfig]) -> None:
    res, d, _ = cap2
    files = sorted((d / "json").glob("rank-*.trace.json.gz"))
    assert [f.name for f in files] == ["rank-00000.trace.json.gz", "rank-00001.trace.json.gz"]
    doc = json.loads(gzip.decompress(files[1].read_bytes()))
    assert doc["distributedInfo"]["rank"] == 1
    labels = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"].startswith("tracekit:")]
    run = load_run(res.out)
    table = run.events.filter(pl.col("rank") == 1, pl.col("kind") == "range", pl.col("name").str.starts_with("tracekit:"))
    assert sorted(labels) == sorted(table["name"].to_list())


def test_eight_ranks(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cc = CaptureConfig(out=str(tmp_path / "run8.parquet"), world=8, cycles=2, warmup=0, device="cpu",
                       workload=_wl(layers=1, dense_layers=0), timeout_s=150)
    said: list[str] = []
    res = run_capture(cc, progress=said.append)
    run = load_run(res.out)
    assert run.ranks == list(range(8)) and res.missing == {}
    # torch's C++ profiler notes (USDT ... profiler_start) went to the rank logs, removed on success
    out = capfd.readouterr()
    assert "USDT" not in out.out + out.err and "profiler_start" not in out.out + out.err
    assert not Path(str(res.out) + ".d").exists()
    assert any(m.startswith("capture: shards written (8/8 ranks") for m in said)  # one line per stage
    verify = run.events.filter(pl.col("kind") == "range", pl.col("phase") == "verify", pl.col("phase_id").is_not_null())
    per = verify.group_by("cycle").agg(pl.col("rank").n_unique().alias("ranks"), pl.col("accept_len").n_unique().alias("acc"))
    assert sorted(per["cycle"].to_list()) == [0, 1]
    assert per["ranks"].to_list() == [8, 8] and per["acc"].to_list() == [1, 1]  # one accept draw for all ranks


def test_killed_rank_loses_only_its_shard(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cc = CaptureConfig(out=str(tmp_path / "run.parquet"), world=2, cycles=3, warmup=1, device="cpu", workload=FaultyWorkload(_wl(), 1, 2, "exit"),
                       timeout_s=90, coll_timeout_s=30)
    said: list[str] = []
    res = run_capture(cc, progress=said.append)
    # a rank failed: the per-rank logs are kept (shards gone: merged), named, and the failed rank's tail printed
    logs = Path(str(res.out) + ".d")
    assert sorted(p.name for p in logs.iterdir()) == ["rank-00000.log", "rank-00001.log"]
    assert "profiler_start" in (logs / "rank-00000.log").read_text()
    assert any(f"kept in {logs}" in m for m in said)
    out = capfd.readouterr()
    assert "USDT" not in out.out + out.err
    run = load_run(res.out)
    assert run.ranks == [0]
    assert "exited with code 17" in run.manifest["missing_ranks"]["1"]
    sec = run.manifest["ranks"]["0"]
    assert sec["aborted"] and sec["window"]["cycles"] == 1
    cycles = run.events.filter(pl.col("kind") == "range", pl.col("phase") == "verify", pl.col("phase_id").is_not_null())
    assert 1 in cycles["cycle"].to_list()  # the cycle finished before the peer died is kept


def test_capture_selected_ranks_only(tmp_path: Path) -> None:
    out = tmp_path / "one.parquet"
    r = CliRunner().invoke(cli, ["capture", "--device", "cpu", "--world", "2", "--ranks", "1", "--cycles", "1",
                                 "--warmup", "0", "--batch-size", "2", "--ctx", "32", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "next: tracekit attribute" in r.output
    run = load_run(out)
    assert run.ranks == [1] and list(run.manifest["ranks"]) == ["1"] and run.manifest["captured_ranks"] == [1]
    assert "missing_ranks" not in run.manifest


@pytest.mark.parametrize("args", [["--ranks", "0,x"], ["--ranks", "5", "--world", "2"], ["--verify-graph", "maybe"]])
def test_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["capture", "--device", "cpu", *args, "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2, r.output
    assert not (tmp_path / "x.parquet").exists()


def test_hung_rank_is_killed_at_the_deadline_and_named(tmp_path: Path) -> None:
    cc = CaptureConfig(out=str(tmp_path / "run.parquet"), world=2, cycles=2, warmup=0, device="cpu", workload=FaultyWorkload(_wl(), 1, 1, "hang"),
                       timeout_s=16, coll_timeout_s=8)
    said: list[str] = []
    res = run_capture(cc, progress=said.append)
    # the killed rank's log tail reaches the launcher's output (its profiler note is the last thing it wrote)
    i = said.index(f"rank 1: last lines of {Path(str(res.out) + '.d') / 'rank-00001.log'}:")
    assert "profiler_start" in said[i + 1]
    man = load_run(res.out).manifest
    assert "no progress for 16 s (killed)" in man["missing_ranks"]["1"]
    assert man["ranks"]["0"]["aborted"]  # its collective timed out waiting for rank 1; what it had is kept
    assert man["ranks"]["0"]["window"]["cycles"] == 1


def test_spec_of_a_capture_speaks_the_unprofiled_clock(cap2: tuple[Any, Path, CaptureConfig]) -> None:
    res, _, _ = cap2
    out = CliRunner().invoke(cli, ["spec", str(res.out), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    b = doc["buckets"][0]
    sec = res.manifest["ranks"][str(doc["rank"])]
    parts = sum(sec["unprofiled"][p]["host_median_ns"] for p in ("draft", "verify", "draft_extend"))
    assert b["timing_source"] == "unprofiled" and b["timing_basis"] == "unprofiled cycle timer"
    assert b["cycle_ns"] == sec["cycle_time"]["unprofiled"]["host_median_ns"]
    assert abs(b["cycle_ns"] / parts - 1) < 0.10  # the cycle is its phases plus a little host time between them
    assert b["profiled_cycle_ns"] > 0 and "unprofiled timers of rank" in doc["timing"]
