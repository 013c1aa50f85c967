"""Perfetto export: structure, exact timestamps, flows, lanes, selection, determinism, encoder vs pb2."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from export_data import RANK, exported_gpu, gpu_rows, synth_run
from export_synth import make_events, make_manifest
from perfetto_reference import packets_equal, write_reference

from tracekit.errors import AnalysisError
from tracekit.export import attribution_buckets, export_run
from tracekit.export.layout import build_layout
from tracekit.export.perfetto import write_perfetto
from tracekit.export.select import Selection, phase_spans
from tracekit.export.validate import validate_trace
from tracekit.schema import GPU_KINDS
from tracekit.store import read_run

pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def full(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("out") / "run.pftrace"
    res = export_run(run, out, flows=("launches", "collectives"))
    return out, res


def test_valid_and_every_gpu_event_exact(run: Path, full: tuple[Path, object]) -> None:
    out, _ = full
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    ev = read_run(run)
    assert exported_gpu(chk.slices) == gpu_rows(ev)  # same count, same names, same ns
    # one process per rank, named rank · GPU · host, pids distinct
    assert sorted(chk.processes.values()) == [f"rank {r} · GPU {r} · node-a" for r in range(3)]


def test_host_slices_and_counters_exact(run: Path, full: tuple[Path, object]) -> None:
    out, _ = full
    chk = validate_trace(out, collect=True)
    ev = read_run(run)
    host = ev.filter(pl.col("kind").is_in(["launch", "op", "sync", "range"]))
    want = sorted(zip(host["rank"].to_list(), host["name"].to_list(), host["start_ns"].to_list(), host["dur_ns"].to_list(), strict=True))
    got = sorted(
        (int(RANK.search(s.process).group(1)), s.name, s.ts, s.dur)  # type: ignore[union-attr]
        for s in chk.slices if s.track.startswith("thread")
    )
    assert got == want
    assert chk.n_counters == ev.filter(pl.col("kind") == "counter").height + ev.filter(
        (pl.col("kind") == "range") & pl.col("phase_id").is_not_null()).height


def test_flows_launch_to_kernels(full: tuple[Path, object], run: Path) -> None:
    out, res = full
    trace = pb2.Trace.FromString(out.read_bytes())
    ev = read_run(run)
    n_graph_kernels = Counter(
        zip(*ev.filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("graph")).select("rank", "correlation").to_dict(as_series=False).values(), strict=True)
    )
    launches = ev.filter(pl.col("kind") == "launch")
    joinable = ev.filter(pl.col("kind").is_in(list(GPU_KINDS))).join(
        launches.select("rank", "correlation"), on=["rank", "correlation"], how="semi")
    coll = ev.filter(pl.col("coll_seq").is_not_null()).group_by("group", "coll_seq").len()
    assert res.n_flows == joinable.height + int((coll["len"] - 1).sum())  # type: ignore[attr-defined]
    # every cudaGraphLaunch carries one outgoing flow per kernel of its graph
    names = {}
    graph_flows = []
    for p in trace.packet:
        for e in p.interned_data.event_names:
            names[e.iid] = e.name
        te = p.track_event
        if p.HasField("track_event") and te.type == te.TYPE_SLICE_BEGIN and names.get(te.name_iid) == "cudaGraphLaunch":
            graph_flows.append(len(te.flow_ids))
    assert sorted(graph_flows) == sorted(n_graph_kernels.values())
    assert max(graph_flows) == 12


def test_pdl_overlap_goes_to_sibling_lane(full: tuple[Path, object]) -> None:
    out, _ = full
    chk = validate_trace(out, collect=True)
    tracks = {s.track for s in chk.slices}
    assert "stream 7 (overlap 1)" in tracks  # kernels starting 300 ns before the previous one ends
    assert "thread 2000 (overlap 1)" in tracks  # partially overlapping host ranges


def test_phase_slices_carry_facts_and_buckets(full: tuple[Path, object]) -> None:
    out, _ = full
    chk = validate_trace(out, collect=True)
    win = [s for s in chk.slices if s.track == "phases (GPU window)"]
    assert len(win) == 3 * 5 * 3
    for s in win:
        assert s.name in ("draft", "verify", "draft_extend")
        assert {"cycle", "batch_size", "num_tokens", "seq_len", "graphed", "phase_id"} <= set(s.args)
        buckets = {k: v for k, v in s.args.items() if k.startswith("bucket.")}
        assert sum(buckets.values()) == s.dur  # exclusive attribution sums to the GPU window exactly
    verify = [s for s in win if s.name == "verify"]
    assert all(s.args["accept_len"] == 2.5 for s in verify)
    assert {s.args["graphed"] for s in verify} == {True, False}


def test_deterministic_bytes(run: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.pftrace", tmp_path / "b.pftrace"
    export_run(run, a, flows=("launches", "collectives"))
    export_run(run, b, flows=("launches", "collectives"))
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("batch", [5, 1 << 16])
def test_encoder_matches_pb2_reference(batch: int) -> None:
    ev = make_events(2, 3, 9, seed=3)
    lay = build_layout(ev, make_manifest(2), flows=("launches", "collectives"), buckets=attribution_buckets(ev, []))
    fast, ref = io.BytesIO(), io.BytesIO()
    write_perfetto(lay, fast, batch=batch)
    write_reference(lay, ref, batch=batch)
    assert packets_equal(fast.getvalue(), ref.getvalue())
    assert len(pb2.Trace.FromString(fast.getvalue()).packet) > 300


def test_phase_cycles_ranks_selection(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "v.pftrace"
    res = export_run(run, out, selection=Selection(ranks=(0, 2), phase="verify", cycles=(1, 2)))
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    assert res.ranks == [0, 2]
    ev = read_run(run)
    spans = phase_spans(ev.filter(pl.col("rank").is_in([0, 2])), "verify", (1, 2))
    assert spans.height == 4
    g = ev.filter(pl.col("kind").is_in(list(GPU_KINDS)))
    keep = g.join(spans, on="rank").filter(
        (pl.col("start_ns") < pl.col("hi")) & (pl.col("start_ns") + pl.col("dur_ns") > pl.col("lo"))
    ).unique(["rank", "start_ns", "name", "dur_ns"])
    want = sorted(zip(keep["rank"].to_list(), keep["name"].to_list(), keep["start_ns"].to_list(), keep["dur_ns"].to_list(), strict=True))
    assert exported_gpu(chk.slices) == want
    assert len(want) > 20


def test_window_selection(run: Path, tmp_path: Path) -> None:
    ev = read_run(run)
    t0 = int(ev["start_ns"].min())  # type: ignore[arg-type]
    out = tmp_path / "w.pftrace"
    export_run(run, out, selection=Selection(window=(100_000, 250_000)))
    chk = validate_trace(out, collect=True)
    g = ev.filter(pl.col("kind").is_in(list(GPU_KINDS)) & (pl.col("start_ns") < t0 + 250_000)
                  & (pl.col("start_ns") + pl.col("dur_ns") > t0 + 100_000))
    assert exported_gpu(chk.slices) == gpu_rows(g)
    assert 0 < g.height < ev.filter(pl.col("kind").is_in(list(GPU_KINDS))).height


def test_empty_window_is_a_clear_error(run: Path, tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match=r"no events in the selection \(window 10000000000: ns\); the run spans 0:\d+ ns"):
        export_run(run, tmp_path / "x.pftrace", selection=Selection(window=(10_000_000_000, None)))
    with pytest.raises(AnalysisError, match="no phase 'prefill' instances"):
        export_run(run, tmp_path / "x.pftrace", selection=Selection(phase="prefill"))
    assert not (tmp_path / "x.pftrace").exists()


def test_size_warning(run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tracekit.export as ex

    monkeypatch.setattr(ex, "WARN_BYTES", 1000)
    res = export_run(run, tmp_path / "x.pftrace")
    assert any("--phase verify --cycles" in w for w in res.warnings)


def test_run_without_membership_is_annotated_once_upgraded(tmp_path: Path) -> None:
    """A run of an older tracekit (no finalize_version, rows without phase/phase_id) is exported as
    stored (readers never finalize: no phase tracks); ``tracekit upgrade`` finalizes it, and its
    export has them."""
    ev = make_events(2, 2, 6).with_columns(
        pl.lit(None, pl.String).alias("phase"), pl.lit(None, pl.Int64).alias("phase_id"))
    from tracekit.finalize.upgrade import upgrade_run
    from tracekit.store import write_run

    p = write_run(ev, tmp_path / "bare.parquet", make_manifest(2))
    for run, out in ((p, "b.pftrace"), (upgrade_run(p, tmp_path / "up.parquet").output, "u.pftrace")):
        export_run(run, tmp_path / out)
        chk = validate_trace(tmp_path / out, collect=True)
        assert chk.ok, chk.problems
        phases = len([s for s in chk.slices if s.track == "phases (host)"])
        assert phases == (0 if out == "b.pftrace" else 2 * 2 * 3)


def test_phase_ids_numbered_per_rank(tmp_path: Path) -> None:
    """Old runs merged from shards can number phase instances per rank: reading the run makes the ids
    unique in the run (tracekit.finalize.version.unique_phase_ids), so phase tracks stay
    per rank and every GPU window carries its attribution buckets."""
    ev = make_events(2, 3, 6)
    first = ev.group_by("rank").agg(pl.col("phase_id").min().alias("_m"))
    ev = ev.join(first, on="rank").with_columns(pl.col("phase_id") - pl.col("_m")).drop("_m")
    from tracekit.store import write_run

    p = write_run(ev, tmp_path / "per_rank.parquet", make_manifest(2))
    res = export_run(p, tmp_path / "p.pftrace")
    assert not any("phase ids repeat across ranks" in w for w in res.warnings)
    chk = validate_trace(tmp_path / "p.pftrace", collect=True)
    assert chk.ok, chk.problems
    host = Counter(s.process for s in chk.slices if s.track == "phases (host)")
    assert host == {"rank 0 · GPU 0 · node-a": 9, "rank 1 · GPU 1 · node-a": 9}
    win = [s for s in chk.slices if s.track == "phases (GPU window)"]
    assert len(win) == 18 and all("seq_len" in s.args for s in win)
    assert all(any(k.startswith("bucket.") for k in s.args) for s in win)


def test_outstanding_counter(run: Path, tmp_path: Path) -> None:
    """Outstanding GPU work: +1 at the launch call (or the work's start), -1 at its end; checked
    against a brute-force count at every sample."""
    out = tmp_path / "o.pftrace"
    export_run(run, out, outstanding=True, selection=Selection(ranks=(1,)))
    trace = pb2.Trace.FromString(out.read_bytes())
    uuid = next(p.track_descriptor.uuid for p in trace.packet
                if p.HasField("track_descriptor") and p.track_descriptor.name == "outstanding GPU work")
    samples = [(p.timestamp, p.track_event.counter_value) for p in trace.packet
               if p.HasField("track_event") and p.track_event.track_uuid == uuid]
    ev = read_run(run).filter(pl.col("rank") == 1)
    launches = ev.filter(pl.col("kind") == "launch").select("correlation", pl.col("start_ns").alias("ls"))
    g = ev.filter(pl.col("kind").is_in(list(GPU_KINDS))).join(launches, on="correlation", how="left")
    issued = [min(a, b) if b is not None else a for a, b in zip(g["start_ns"].to_list(), g["ls"].to_list(), strict=True)]
    ends = (g["start_ns"] + g["dur_ns"]).to_list()
    assert len(samples) > 50
    for ts, val in samples:
        assert val == sum(1 for i, e in zip(issued, ends, strict=True) if i <= ts < e)
    assert samples[-1][1] == 0 and max(v for _, v in samples) >= 12  # a graph launch issues 12 kernels at once


def test_cpu_only_run(tmp_path: Path) -> None:
    """A capture without GPU events (CPU ranks) exports host tracks only, with every option on."""
    from tracekit.store import write_run

    ev = make_events(2, 2, 6).filter(~pl.col("kind").is_in([*GPU_KINDS, "launch"]))
    p = write_run(ev, tmp_path / "cpu.parquet", make_manifest(2))
    res = export_run(p, tmp_path / "c.pftrace", flows=("launches", "collectives"), outstanding=True)
    chk = validate_trace(tmp_path / "c.pftrace", collect=True)
    assert chk.ok, chk.problems
    assert res.n_gpu_slices == 0 and res.n_flows == 0
    assert not any(s.track.startswith(("stream", "phases (GPU")) for s in chk.slices)
    assert len([s for s in chk.slices if s.track == "phases (host)"]) == 12


def test_degenerate_rows_warned_not_hidden(tmp_path: Path) -> None:
    """Rows without a start are left out and rows with a negative duration shown as 0 ns, both said."""
    from tracekit.export import export_events

    ev = make_events(2, 2, 6)
    ev = ev.with_columns(
        pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("start_ns")).alias("start_ns"),
        pl.when(pl.int_range(pl.len()) == 7).then(-5).otherwise(pl.col("dur_ns")).alias("dur_ns"),
        pl.when(pl.col("kind") == "op").then(None).otherwise(pl.col("tid")).alias("tid"),
    )
    res = export_events(ev, make_manifest(2), tmp_path / "d.pftrace")
    assert any("1 event(s) without a start time or rank" in w for w in res.warnings)
    assert any("1 event(s) with a negative duration" in w for w in res.warnings)
    chk = validate_trace(tmp_path / "d.pftrace", collect=True)
    assert chk.ok, chk.problems
    assert chk.n_slices == res.n_slices
    assert any(s.track.startswith("thread ?") for s in chk.slices)
