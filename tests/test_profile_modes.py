"""Profile modes lite/timing: the hooks' own phase ranges, on a real CPU profile and a real CPU capture."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from tracekit.cli import cli  # noqa: E402
from tracekit.collectors import hooks  # noqa: E402
from tracekit.collectors.capture import CaptureConfig, resolve_profile, run_capture  # noqa: E402
from tracekit.collectors.hooks import emit_facts, phase, phase_hook, start_recording, stop_recording  # noqa: E402
from tracekit.collectors.ranges import RangeRecorder  # noqa: E402
from tracekit.collectors.session import ProfilerSession  # noqa: E402
from tracekit.collectors.workload.config import make_config  # noqa: E402
from tracekit.documents import document_type  # noqa: E402
from tracekit.finalize.pipeline import finalize_events  # noqa: E402
from tracekit.finalize.upgrade import upgrade_run  # noqa: E402
from tracekit.store import load_run  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_NVTX", raising=False)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    hooks._Backend.reset()
    yield
    stop_recording()


def test_recorder_gets_ranges_and_markers_with_thread_ids() -> None:
    rec = RangeRecorder()
    start_recording(rec)
    hook = phase_hook(lambda n: torch.ones(n).sum().item(), "verify", facts=lambda a, k: {"cycle": 3, "bs": a[0]},
                      late=lambda r, a, k: {"cycle": 3, "accept": 1.5})
    assert hook(4) == 4.0
    with phase("draft", cycle=4, bs=2):
        pass
    emit_facts("draft", 4, accept=2.0)
    stop_recording()
    with phase("draft", cycle=5) as p:  # recording stopped: the fast path again
        assert p._range is None
    df = rec.frame(rank=2, pid=99)
    assert df["name"].to_list() == ["tracekit:verify|cycle=3|bs=4", "tracekit:facts|phase=verify|cycle=3|accept=1.5000",
                                    "tracekit:draft|cycle=4|bs=2", "tracekit:facts|phase=draft|cycle=4|accept=2.0000"]
    assert set(df["kind"]) == {"range"} and set(df["tid"]) == {threading.get_native_id()} and set(df["rank"]) == {2}
    assert df["dur_ns"][0] > 0 and df["dur_ns"][1] == 0 and df["args"].null_count() == 4  # no CUDA events on CPU


def test_lite_ranges_replace_record_function_and_join_the_profilers_ops() -> None:
    # a CPU profile stands in for Kineto: the ranges come from the recorder (time.time_ns), the ops from the
    # profiler; membership must put every op issued inside a phase into it, on the same thread and clock
    x = torch.randn(64, 64)
    s = ProfilerSession(rank=0, cuda=False, mode="full")
    rec = RangeRecorder()
    s.start()
    start_recording(rec, record_function=False)
    for c in range(3):
        with phase("verify", cycle=c, bs=2, tok=8):
            (x @ x).relu().sum()
        with phase("draft_extend", cycle=c, bs=2, tok=8):
            torch.tanh(x).mean()
        emit_facts("verify", c, accept=1.0 + c)
    stop_recording()
    s.stop()
    kineto = s.events()
    assert not kineto.filter(pl.col("name").str.starts_with("tracekit:")).height  # record_function was off
    ev = finalize_events(pl.concat([kineto, rec.frame(0, kineto["pid"][0])], how="vertical"))
    ranges = ev.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null()).sort("start_ns")
    assert ranges["phase"].to_list() == ["verify", "draft_extend"] * 3
    assert ranges.filter(pl.col("phase") == "verify")["accept_len"].to_list() == [1.0, 2.0, 3.0]
    ops = ev.filter(pl.col("kind") == "op")
    for pid_, ph in ranges.select("phase_id", "phase").iter_rows():
        names = set(ops.filter(pl.col("phase_id") == pid_)["name"].to_list())
        want = {"aten::mm", "aten::relu"} if ph == "verify" else {"aten::tanh"}
        assert want <= names, (ph, names)


def test_timing_session_has_no_profiler_and_no_kineto_json(tmp_path: Path) -> None:
    s = ProfilerSession(rank=0, cuda=False, mode="timing")
    s.start()
    with phase("decode", cycle=0, bs=1):
        torch.ones(4).sum()
    s.stop()
    assert s.prof is None and s.info["activities"] == []
    df = s.events()
    assert df["kind"].to_list() == ["range"] and s.info["recorded_ranges"] == 1
    with pytest.raises(RuntimeError, match="no Kineto JSON"):
        s.export_json(tmp_path / "x.json")
    with pytest.raises(ValueError, match="profile mode"):
        ProfilerSession(rank=0, cuda=False, mode="fast")


def test_auto_profile_is_lite_on_gpu_full_on_cpu() -> None:
    assert resolve_profile("auto", "cuda") == "lite" and resolve_profile("auto", "cpu") == "full"
    assert resolve_profile("timing", "cuda") == "timing"
    with pytest.raises(ValueError, match="--profile"):
        resolve_profile("nope", "cpu")


@pytest.fixture(scope="module")
def timing_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    d = tmp_path_factory.mktemp("timing")
    cc = CaptureConfig(out=str(d / "run.parquet"), world=2, cycles=4, warmup=3, device="cpu", timeout_s=120,
                       workload=make_config("tiny", batch_size=2, ctx_start=32), profile="timing")
    return run_capture(cc), d


def test_timing_capture_writes_phase_ranges_per_cycle_and_says_its_mode(timing_run: tuple[Any, Path]) -> None:
    res, _ = timing_run
    run = load_run(res.out)
    assert run.manifest["capture"]["profile_mode"] == "timing"
    assert set(run.events["kind"].unique().to_list()) == {"range"}  # no profiler: no ops, no kernels
    inst = run.events.filter(pl.col("phase_id").is_not_null())
    for r in (0, 1):
        sec = run.manifest["ranks"][str(r)]
        assert sec["profile_mode"] == "timing" and "no kernel buckets" in sec["profile_note"]
        assert set(sec["timed"]) == {"draft", "verify", "draft_extend", "decode"} and "profiled" not in sec
        assert sec["cycle_time"]["timed"]["count"] == 4
        mine = inst.filter(pl.col("rank") == r)
        assert sorted(set(mine["cycle"].to_list())) == [3, 4, 5, 6]
        v = mine.filter(pl.col("phase") == "verify")
        assert v["accept_len"].null_count() == 0 and set(v["batch_size"]) == {2} and set(v["num_tokens"]) == {8}
        assert v["graphed"].to_list() == [False] * 4 and v["seq_len"].null_count() == 0


def test_attribute_and_spec_on_a_timing_run(timing_run: tuple[Any, Path]) -> None:
    res, _ = timing_run
    out = CliRunner().invoke(cli, ["attribute", str(res.out)])
    assert out.exit_code == 0, out.output
    assert "profile mode timing" in out.output and "no kernel buckets" in out.output
    assert "GPU median" in out.output and "accept len" in out.output
    js = CliRunner().invoke(cli, ["attribute", str(res.out), "--json", "--by", "cycle", "--phase", "verify"])
    assert js.exit_code == 0, js.output
    doc = json.loads(js.stdout)
    assert doc["document"] == "attribute-timing" and document_type(doc).problems(doc) == []
    spec = json.loads(CliRunner().invoke(cli, ["spec", str(res.out), "--json"]).stdout)
    b = spec["buckets"][0]
    sec = res.manifest["ranks"][str(spec["rank"])]
    assert b["timing_source"] == "unprofiled" and b["profiled_cycle_ns"] is None
    assert b["cycle_ns"] == sec["cycle_time"]["timed"]["host_median_ns"] and "timing-mode" in spec["timing"]
    assert doc["mode"] == "timing" and doc["timing_source"] == "unprofiled" and "no kernel buckets" in doc["cannot"]
    assert [c["cycle"] for c in doc["cycles"] if c["rank"] == 0] == [3, 4, 5, 6]
    assert all(c["host_ns"] > 0 and c["gpu_ns"] is None for c in doc["cycles"])  # CPU ranks: no CUDA events


def test_kineto_thread_keys_map_to_native_ids() -> None:
    from tracekit.collectors.ranges import kineto_thread_key

    assert kineto_thread_key(0x7F12B682A140) == -1232953024  # the key the H200 lite capture's launches carry
    assert kineto_thread_key(0x7F3A2ADCC140) == 719110464
    rec = RangeRecorder()
    start_recording(rec)
    with phase("draft", cycle=0):
        pass
    stop_recording()
    m = rec.thread_map()
    assert m[kineto_thread_key(threading.get_ident())] == threading.get_native_id()


SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200-lite"


@pytest.mark.parametrize("g", ["off", "on"])
def test_lite_capture_upgraded_joins_every_launch_like_full(g: str, tmp_path: Path) -> None:
    # the captured lite run (H200) has its launches under Kineto's thread key; the same remap capture now does
    # (one launching thread, one range thread: inferred) makes every phase hold the full run's launches and kernels
    import subprocess
    import sys

    out = tmp_path / "fixed.parquet"
    res = subprocess.run([sys.executable, str(SAMPLE / "refinalize.py"), str(SAMPLE / f"lite-{g}.captured.parquet"),
                          str(out)], capture_output=True, text=True, check=True)
    assert "inferred" in res.stdout

    def per_phase(path: Path) -> dict[str, tuple[int, int]]:
        ev = load_run(path).events
        return {p: (ev.filter((pl.col("kind") == "launch") & (pl.col("phase") == p)).height,
                    ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & (pl.col("phase") == p)).height)
                for p in ("draft", "verify", "draft_extend", "decode")}

    # as captured, membership by the range's own thread found none of them (the file's own phase
    # columns, read as stored); upgraded (finalize version 2), the cross-thread rule (a launch on a
    # thread with no open range joins the range open on another thread of the process) gives
    # exactly the full run's membership as well
    raw = pl.read_parquet(SAMPLE / f"lite-{g}.captured.parquet")
    assert raw.filter(pl.col("kind").is_in(["launch", "kernel"]) & pl.col("phase").is_not_null()).height == 0
    assert load_run(SAMPLE / f"lite-{g}.captured.parquet").outdated is not None
    captured = per_phase(upgrade_run(SAMPLE / f"lite-{g}.captured.parquet", tmp_path / "upgraded.parquet").output)
    fixed, full = per_phase(out), per_phase(SAMPLE / f"full-{g}.parquet")
    assert fixed == full and fixed["verify"][1] > 0
    assert captured == full
    assert per_phase(SAMPLE / f"lite-{g}.parquet") == full  # the committed sample is the re-finalized run


def test_recorder_refuses_an_unknown_fact_at_open_not_when_the_frame_is_built(caplog: pytest.LogCaptureFixture) -> None:
    """Labels are formatted when the frame is built (off the hot path); a bad key must still fail its own
    range at once, as formatting did, and leave the frame of the good ranges intact."""
    rec = RangeRecorder()
    start_recording(rec, record_function=False)
    with phase("verify", cycle=1, bs=2, tokens=9) as p:  # 'tokens' is no label key ('tok' is)
        assert p._range is None
    emit_facts("verify", 1, accepted=2.0)
    with phase("verify", cycle=2, bs=2, tok=9, graphed=True):
        pass
    emit_facts("verify", 2, accept=2.5, bs=None)
    stop_recording()
    assert "unknown phase fact 'tokens'" in caplog.text and "unknown phase fact 'accepted'" in caplog.text
    assert rec.frame(0, 1)["name"].to_list() == ["tracekit:verify|cycle=2|bs=2|tok=9|graphed=1",
                                                 "tracekit:facts|phase=verify|cycle=2|accept=2.5000"]
