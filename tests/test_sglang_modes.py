"""Profile modes of the live SGLang capture (collectors/sglang/modes.py, window.py).

Against the local server speaking SGLang's HTTP schema (tests/sglang_server.py) in ``--serve``
mode: one scheduler process per rank, each running cycles with tracekit's hooks installed
through the launcher's code path (the real hook-table rows), so tracekit's own window runs in
every rank process as it would in SGLang's. The lite join of launches to recorded ranges is
checked on the GPU sample (samples/sglang-shapes-h200x2), made lite-shaped.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")

import sglang_shapes as S
from test_sglang_live import Server

from tracekit.analyzers.phase_rows import phase_instances
from tracekit.collectors.sglang import window
from tracekit.collectors.sglang.live import LoadConfig, run_live_capture
from tracekit.collectors.sglang.modes import START_PROFILE, merge_lite, trim_to_span
from tracekit.errors import TracekitError
from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "sglang-shapes-h200x2"
# load that outlasts the window (the capture stops the window once the load runs out, as a real
# server then idles; the --serve ranks here cycle regardless of requests)
LOAD = LoadConfig(requests=100_000, input_len=16, output_len=8, concurrency=2)


def _requests(url: str) -> list[dict[str, object]]:
    with urllib.request.urlopen(url + "/test/requests", timeout=10) as resp:
        out: list[dict[str, object]] = json.loads(resp.read())
    return out


SERVE = ("--world", "2", "--style", "0.5.23", "--serve")


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    with Server(tmp_path, *request.param) as srv:
        yield srv


@pytest.mark.parametrize("server", [SERVE], indirect=True)
def test_lite_capture_records_phases_in_every_rank(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    res = run_live_capture(server.url, out, load=LOAD, num_steps=3, manifest_dir=server.manifests,
                           timeout_s=120, mode="lite")
    assert res.mode == "lite" and res.ranks == [0, 1]
    # SGLang was asked for CUDA activity only, no Python stacks
    sent = _requests(server.url)
    assert len(sent) == 1
    assert {k: sent[0][k] for k in START_PROFILE["lite"]} == {"activities": ["GPU"], "with_stack": False,
                                                               "record_shapes": False}
    run = load_run(out)
    man = run.manifest
    assert man["capture"]["profile_mode"] == "lite" and man["capture"]["window"].startswith("window-")
    inst = phase_instances(run.events)
    for rank in (0, 1):
        sec = man["ranks"][str(rank)]
        assert sec["profile_mode"] == "lite" and "cannot give" in sec["profile_note"]
        assert sec["window"]["why"] == "stopped by the capture"
        assert 0 < sec["window"]["kept_ranges"] < sec["window"]["recorded_ranges"]  # cut to the profiled span
        # the rank's trace holds no tracekit range (record_function was off): every phase came from the recorder
        trace = [p for p in res.trace_dir.iterdir() if p.name.endswith(f"-TP-{rank}.trace.json.gz")]
        assert len(trace) == 1 and not [n for n in S.trace_names(str(trace[0])) if n.startswith("tracekit:")]
        v = inst.filter((pl.col("rank") == rank) & (pl.col("phase") == "verify")).sort("start_ns")
        assert v.height == 3
        cyc = v.get_column("cycle").to_list()
        assert cyc == list(range(cyc[0], cyc[0] + 3))
        want = [sum(S.accepted(c - 1, 4, 3)) / 4 for c in cyc]  # the serving rank's cycle 1 is the shapes' cycle 0
        assert v.get_column("accept_len").to_list() == pytest.approx(want, abs=1e-4)
        assert v.get_column("batch_size").to_list() == [4, 4, 4]
        # the recorder's clock and thread are the profiler's: the rank's CPU ops fall inside its ranges
        ops = run.events.filter((pl.col("rank") == rank) & (pl.col("kind") == "op") & (pl.col("phase") == "verify"))
        assert ops.height > 0
    # the window is closed for the next capture
    ctl = json.loads((server.manifests / window.CONTROL).read_text())
    assert ctl["state"] == "stop" and ctl["id"] == man["capture"]["window"]


@pytest.mark.parametrize("server", [SERVE], indirect=True)
def test_timing_capture_has_phase_rows_per_cycle(server: Server, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracekit.analyzers.spec import cycles, spec_report
    from tracekit.analyzers.timing_view import timing_instances
    from tracekit.cli import cli

    out = tmp_path / "t.parquet"
    res = run_live_capture(server.url, out, load=LOAD, num_steps=5, manifest_dir=server.manifests,
                           timeout_s=120, mode="timing")
    assert _requests(server.url) == []  # no profiler was started
    assert not res.trace_dir.exists()
    run = load_run(out)
    assert run.manifest["capture"]["profile_mode"] == "timing"
    assert set(run.events.get_column("kind").unique().to_list()) == {"range"}
    ti = timing_instances(run.events)
    for rank in (0, 1):
        assert run.manifest["ranks"][str(rank)]["window"]["why"] == "cycles"
        assert run.manifest["ranks"][str(rank)]["window"]["cycles"] == 5
        mine = ti.filter(pl.col("rank") == rank)
        counts = dict(mine.group_by("phase").len().iter_rows())
        assert counts == {"draft": 5, "verify": 5, "draft_extend": 5}
        v = mine.filter(pl.col("phase") == "verify").sort("start_ns")
        assert v.get_column("batch_size").to_list() == [4] * 5
        assert v.get_column("num_tokens").to_list() == [16] * 5  # bs x draft tokens
        assert v.get_column("graphed").to_list() == [True] * 5
        assert v.get_column("seq_len").null_count() == 0
        assert v.get_column("accept_len").drop_nulls().len() >= 4  # v2: the last cycle's arrives after the window
        assert v.get_column("gpu_ns").null_count() == 5  # CPU ranks: no CUDA events, host time only
        assert (v.get_column("host_ns") > 0).all()
    cyc = cycles(run.events)
    assert cyc.group_by("rank").len().sort("rank").get_column("len").to_list() == [4, 4]
    table, ctx = spec_report(run.events, manifest=run.manifest)
    assert table.height == 1 and "timing-mode" in str(ctx)
    att = CliRunner().invoke(cli, ["attribute", str(out)])
    assert att.exit_code == 0, att.output
    assert "verify" in att.output
    sp = CliRunner().invoke(cli, ["spec", str(out)])
    assert sp.exit_code == 0, sp.output


@pytest.mark.parametrize("server", [("--world", "1", "--style", "0.5.23", "--no-hooks", "--serve")], indirect=True)
def test_window_without_hooks_names_the_ranks(server: Server, tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match=r"ranks \[0\] did not start tracekit's timing window within 3s"):
        run_live_capture(server.url, tmp_path / "r.parquet", load=LOAD, num_steps=2, manifest_dir=server.manifests,
                         timeout_s=3, mode="timing")
    assert json.loads((server.manifests / window.CONTROL).read_text())["state"] == "stop"


@pytest.mark.parametrize("server", [("--world", "1", "--style", "0.5.9", "--serve")], indirect=True)
def test_capture_command_profile_timing(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from tracekit.cli import cli

    monkeypatch.setenv("TRACEKIT_SGLANG_DIR", str(server.manifests))
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["capture", "--ranks", "all", "--sglang", server.url, "--profile", "timing",
                                   "--cycles", "3", "--requests", "100000", "--input-len", "16", "--output-len", "8",
                                   "--concurrency", "2", "--timeout", "120", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "profile mode timing cannot give: kernels" in res.output
    assert load_run(out).manifest["capture"]["profile_mode"] == "timing"
    bad = CliRunner().invoke(cli, ["sglang-capture", server.url, "--profile", "lite", "--allow-no-hooks",
                                   "-o", str(tmp_path / "x.parquet")])
    assert bad.exit_code == 2 and "--allow-no-hooks needs --profile full" in bad.output


# --- the window protocol in one process -----------------------------------------------------


class _Rec:
    def __init__(self) -> None:
        self.cycle = -1
        self.rank = 0


def test_agent_counts_cycles_and_stops_when_idle(tmp_path: Path) -> None:
    from tracekit.collectors.hooks import emit_facts, phase

    rec = _Rec()
    agent = window.Agent(rec, tmp_path)
    win = window.open_window(tmp_path, "timing", 2)
    for i in range(3):  # the window opens at the first boundary: two cycles recorded, the third boundary ends it
        rec.cycle += 1
        agent.tick()
        if i == 0:
            assert win.wait_acks(1, 2) == []
            assert win.acks()[0]["mode"] == "timing" and win.acks()[0]["cycle"] == 0
        with phase("verify", cycle=rec.cycle, bs=2):
            pass
        emit_facts("verify", rec.cycle, accept=1.0)
    assert (tmp_path / win.id / "ranges-TP-0.json").exists()
    info = json.loads((tmp_path / win.id / "ranges-TP-0.json").read_text())
    assert info["why"] == "cycles" and info["cycles"] == 2 and info["ranges"] == 4  # 2 ranges + 2 markers
    ev = pl.read_parquet(tmp_path / win.id / "ranges-TP-0.parquet")
    assert ev.get_column("name").to_list()[0].startswith("tracekit:verify|cycle=0")

    # a lite window started at a boundary; the scheduler goes idle; the capture stops it: the watcher delivers
    lite = window.open_window(tmp_path, "lite", None)
    agent._last_poll = 0
    agent.tick()
    assert lite.wait_acks(1, 2) == []
    with phase("draft", cycle=rec.cycle, bs=2):
        pass
    lite.stop()
    t0 = time.monotonic()
    assert lite.wait_ranges(1, 10) == []
    assert time.monotonic() - t0 < 5
    info = json.loads((tmp_path / lite.id / "ranges-TP-0.json").read_text())
    assert info["why"] == "stopped by the capture" and info["ranges"] == 1
    assert info["cycles"] == 1  # the cycle begun at the last boundary ran to its end
    # nothing records any more
    from tracekit.collectors.hooks import _Backend

    assert _Backend.recorder is None
    for t in [t for t in threading.enumerate() if t.name == "tracekit-window"]:
        t.join(2)  # the watchers end with their windows
        assert not t.is_alive()


def test_a_lite_stop_seen_after_a_pause_still_drains_one_cycle(tmp_path: Path) -> None:
    """The flaky lite capture (issue 30): a scheduler that paused (as while it exports its trace: no
    cycle boundary for more than a second) and whose watcher then reads the stop must still record
    the next cycle, whose facts carry the last profiled cycle's accept lengths (SGLang v2). Before,
    the watcher took the pause for idleness and ended the window at once. Deterministic: the pause is
    set on the agent's clock, the watcher's poll is called as its thread would."""
    from tracekit.collectors.hooks import emit_facts, phase

    rec = _Rec()
    agent = window.Agent(rec, tmp_path)
    lite = window.open_window(tmp_path, "lite", None)
    rec.cycle += 1
    agent.tick()
    assert lite.wait_acks(1, 60) == []
    with phase("verify", cycle=rec.cycle, bs=2):
        pass
    agent._last_tick -= 5_000_000_000  # the pause: no boundary for 5 s
    lite.stop()
    with agent._lock:
        agent._poll(boundary=False)  # the watcher reads the stop during the pause
    assert agent._active is not None  # not ended: the next cycle is the drained one
    rec.cycle += 1
    agent.tick()  # the scheduler resumes: the drained cycle, which hands over the last cycle's facts
    emit_facts("verify", rec.cycle - 1, accept=2.0)
    assert agent._active is not None
    rec.cycle += 1
    agent.tick()
    assert lite.wait_ranges(1, 60) == []
    info = json.loads((tmp_path / lite.id / "ranges-TP-0.json").read_text())
    assert info["why"] == "stopped by the capture"
    names = pl.read_parquet(tmp_path / lite.id / "ranges-TP-0.parquet").get_column("name").to_list()
    assert any("accept=2" in n for n in names), names


def test_agent_ignores_a_stale_window_and_stops_at_the_deadline(tmp_path: Path) -> None:
    """A capture killed with its window open must not leave the server recording: no rank starts a
    window past its deadline, and a recording window stops itself there."""
    rec = _Rec()
    agent = window.Agent(rec, tmp_path)
    stale = window.open_window(tmp_path, "lite", None, max_s=-1.0)
    rec.cycle += 1
    agent.tick()
    assert stale.acks() == {}
    short = window.open_window(tmp_path, "lite", None, max_s=0.5)
    agent._last_poll = 0
    rec.cycle += 1
    agent.tick()
    assert short.acks()[0]["mode"] == "lite"
    while time.time_ns() <= short.deadline_unix_ns:  # the condition: the window's deadline has passed
        time.sleep(0.01)
    agent._last_poll = 0
    rec.cycle += 1
    agent.tick()
    assert json.loads((tmp_path / short.id / "ranges-TP-0.json").read_text())["why"] == "deadline passed"


def test_trim_keeps_the_cycles_inside_the_span() -> None:
    from tracekit.finalize.phases import format_facts, format_label
    from tracekit.schema import conform

    rows = []
    for c in range(4):
        t = 1000 * c
        rows.append({"kind": "range", "name": format_label("verify", cycle=c), "start_ns": t, "dur_ns": 500})
        rows.append({"kind": "range", "name": format_facts("verify", c, accept=1.0), "start_ns": t + 1500,
                     "dur_ns": 0})
    ev = conform(pl.DataFrame(rows).with_columns(pl.lit(0, dtype=pl.Int32).alias("rank")))
    kept = trim_to_span(ev, 1200, 2600)
    # cycles 1 and 2 overlap [1200, 2600] (cycle 1's range [1000, 1500] reaches into it); cycle 2's facts
    # marker (at 3500) is kept with it; cycle 0's (at 1500, inside the span) goes with its cycle
    assert kept.get_column("name").to_list() == [
        format_label("verify", cycle=1), format_facts("verify", 1, accept=1.0),
        format_label("verify", cycle=2), format_facts("verify", 2, accept=1.0)]


# --- the lite join on real GPU traces ------------------------------------------------------


def test_lite_join_on_the_gpu_sample_matches_full() -> None:
    """samples/sglang-shapes-h200x2 (CPU + CUDA, hooks as record_function) made lite-shaped: no CPU ops,
    no ranges in the trace, launches on Kineto's thread key; the ranges come from a 'recorder'.
    After merge_lite every kernel is in the same phase as in the full trace."""
    from tracekit.collectors.ranges import kineto_thread_key
    from tracekit.ingest import ingest_traces

    full = ingest_traces([SAMPLE]).events
    assert full.filter(pl.col("kind") == "kernel").height > 0
    is_tk = (pl.col("kind") == "range") & pl.col("name").str.starts_with("tracekit:")
    deliveries = []
    lite_parts = []
    for rank in (0, 1):
        mine = full.filter(pl.col("rank") == rank)
        ranges = mine.filter(is_tk).select("rank", "kind", "name", "device", "pid", "tid", "start_ns", "dur_ns")
        natives = ranges.get_column("tid").unique().to_list()
        assert len(natives) == 1
        key = kineto_thread_key(0x7F00_0000_0000 + 4096 * (rank + 1))
        cuda_only = mine.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset", "launch", "sync"]))
        cuda_only = cuda_only.with_columns(
            pl.when(pl.col("device") < 0).then(pl.lit(key, dtype=pl.Int64)).otherwise(pl.col("tid")).alias("tid"))
        lite_parts.append(cuda_only)
        deliveries.append(window.RankRanges(rank=rank, events=ranges, info={"thread_keys": {str(key): natives[0]}}))
    merged, notes = merge_lite(pl.concat(lite_parts, how="vertical_relaxed"), deliveries)
    assert notes[0]["thread_map"] == "keys" and notes[0]["kept_ranges"] == notes[0]["recorded_ranges"]

    def kernel_phases(ev: pl.DataFrame) -> pl.DataFrame:
        return ev.filter(pl.col("kind") == "kernel").select("rank", "correlation", "start_ns", "phase").sort(
            "rank", "correlation", "start_ns")

    want, got = kernel_phases(full), kernel_phases(merged)
    assert want.height == got.height and want.get_column("phase").null_count() == 0
    assert got.get_column("phase").to_list() == want.get_column("phase").to_list()


# --- the window through SGLang's real HookRegistry, in one process --------------------------


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
def test_timing_window_through_sglang_hook_registry(tmp_path: Path, version: str) -> None:
    """The plugin path: tracekit's hooks applied by SGLang's own HookRegistry (real wheel source); a
    timing window of 3 cycles records exactly cycles 0-2 with their facts, and no profiler runs."""
    from test_sglang_hooks import _real_hook_registry, fresh_shapes, mapped

    from tracekit.collectors.sglang import plugin, runtime
    from tracekit.finalize.phases import parse_label

    reg = _real_hook_registry(version)
    reg.HookRegistry.reset()
    try:
        mod = fresh_shapes()
        rec = runtime.Recorder()
        rec.window = window.Agent(rec, tmp_path)
        plugin.register_with(reg.HookRegistry, reg.HookType.AROUND, mapped(version, mod), rec=rec)
        reg.HookRegistry.apply_hooks()
        win = window.open_window(tmp_path, "timing", 3)
        mod.drive(mod.make_worker(version, tp_rank=1), cycles=6)
        assert win.wait_ranges(2, 0) == [0]  # rank 1 delivered (rank 0 is not in this process)
    finally:
        reg.HookRegistry.reset()
    info = json.loads((tmp_path / win.id / "ranges-TP-1.json").read_text())
    assert info["why"] == "cycles" and info["cycles"] == 3 and info["first_cycle"] == 0
    labs = [parse_label(n) for n in pl.read_parquet(tmp_path / win.id / "ranges-TP-1.parquet")["name"]]
    phases = [(lab.phase, lab.facts["cycle"]) for lab in labs if lab is not None and not lab.is_facts]
    assert phases == [(p, c) for c in range(3) for p in ("draft", "verify", "draft_extend")]
    accepts = {lab.facts["cycle"]: lab.facts["accept_len"] for lab in labs
               if lab is not None and lab.is_facts and "accept_len" in lab.facts}
    # v2 hands cycle c's accept lengths over during cycle c+1: cycle 2's came after the window closed
    assert accepts == {c: pytest.approx(sum(S.accepted(c, 4, 3)) / 4, abs=1e-4) for c in range(2)}


def test_two_processes_with_one_tp_rank_are_refused_not_merged(tmp_path: Path) -> None:
    """dp/pp replicas share TP ranks: the second scheduler process must not overwrite the first one's
    files; it records nothing and the capture names both pids."""
    import multiprocessing as mp

    # the deadline is not what this tests: a spawned process that imports torch on a loaded machine
    # took more than 30 s to look, found the window past its deadline and never clashed
    win = window.open_window(tmp_path, "lite", None, max_s=3600)
    first = window.Agent(_Rec(), tmp_path)
    first.rec.cycle += 1
    first.tick()
    assert win.wait_acks(1, 2) == [] and win.clashes() == {}
    ctx = mp.get_context("spawn")  # a real second scheduler process, same TP rank 0
    proc = ctx.Process(target=_second_agent, args=(str(tmp_path),))
    proc.start()
    proc.join(600)  # waits for the process to end: long only on a loaded machine
    assert proc.exitcode == 0
    clash = win.clashes()
    assert list(clash) == [0] and clash[0][0] == os.getpid() and clash[0][1] == proc.pid
    assert win.acks()[0]["pid"] == os.getpid()  # the first claimant's ack is intact
    win.stop()
    first._last_poll = 0
    first.rec.cycle += 1
    first.tick()  # sees the stop: lite drains one more cycle
    first.rec.cycle += 1
    first.tick()  # the drain cycle: the ranges are written now, on this thread
    assert win.wait_ranges(1, 120) == []
    assert json.loads((tmp_path / win.id / "ranges-TP-0.json").read_text())["pid"] == os.getpid()


def _second_agent(directory: str) -> None:
    from tracekit.collectors.hooks import _Backend

    agent = window.Agent(_Rec(), Path(directory))
    agent.rec.cycle += 1
    agent.tick()
    assert _Backend.recorder is None and agent._active is None  # refused: recording nothing


def test_claim_without_hard_links_is_still_exclusive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a filesystem with no hard links (os.link -> EPERM) the ack is claimed by an exclusive create:
    the first claimant writes it whole, a second is refused, and no staged file is left behind."""
    from tracekit.collectors.sglang import window as win_mod

    def no_links(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(win_mod.os, "link", no_links)
    ack = tmp_path / "w" / "ack-TP-0.json"
    assert win_mod._claim(ack, b'{"pid": 1}') is True
    assert win_mod._claim(ack, b'{"pid": 2}') is False
    assert json.loads(ack.read_text()) == {"pid": 1}
    assert sorted(p.name for p in ack.parent.iterdir()) == ["ack-TP-0.json"]
