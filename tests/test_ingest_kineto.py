"""Kineto JSON -> event table: exact ns, kinds, correlation, graph flag, collectives."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from kineto_reference import load, ns
from kineto_synth import TraceBuilder, dumps, gpu_rank

from tracekit.finalize import finalize_events
from tracekit.ingest import ingest_traces
from tracekit.ingest.exact import us_text_to_ns
from tracekit.ingest.kineto import parse_kineto
from tracekit.schema import conform
from tracekit.store import read_run, write_run


def test_exact_decimal_microseconds() -> None:
    vals = ["5150227743625.066", 17, None, "-1.5", "1.5e3", "0.001", "12.30", "1733000000000000", "abc", "12.3455"]
    got = us_text_to_ns(vals).to_list()
    assert got == [5150227743625066, 17000, None, -1500, 1500000, 1, 12300, 1733000000000000000, None, 12346]
    # each form alone too (the all-three-decimals fast path must hand everything else over)
    for text, want in (("1.5e3", 1500000), ("17", 17000), ("12.3", 12300), ("-0.500", -500), ("9999999999999999.999", None)):
        assert us_text_to_ns([text]).to_list() == [want], text


def test_float_would_lose_the_last_digit_we_do_not() -> None:
    # absolute wall-clock µs with ns decimals (no baseTimeNanoseconds): float64 cannot hold them
    texts = [f"1790857026123456.{i:03d}" for i in range(1000)]
    got = us_text_to_ns(texts).to_list()
    assert got == [1790857026123456000 + i for i in range(1000)]
    assert any(round(float(t) * 1000) != g for t, g in zip(texts, got, strict=True))


def test_gpu_trace_kinds_links_and_exact_times(tmp_path: Path) -> None:
    b = gpu_rank(0)
    path = b.write(tmp_path / "r0.json")
    doc = load(path)
    ev = parse_kineto(path.read_bytes(), str(path)).events
    # every X event of the source is there with exactly its ns
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert ev.height == len(xs)
    want = sorted((e["name"], ns(doc, e["ts"]), int(Decimal(e["dur"]) * 1000)) for e in xs)
    got = sorted(ev.select("name", "start_ns", "dur_ns").iter_rows())
    assert got == want
    kinds = dict(zip(ev["name"], ev["kind"], strict=False))
    assert kinds["cudaLaunchKernel"] == "launch"
    assert kinds["cuLaunchKernelEx"] == "launch"  # cuda_driver launches count too
    assert kinds["cudaGraphLaunch"] == "launch"
    assert kinds["cudaMemcpyAsync"] == "launch"
    assert kinds["cudaStreamSynchronize"] == "sync"
    assert kinds["aten::mm"] == "op"
    assert kinds["tracekit:verify|cycle=0|bs=2"] == "range"
    assert kinds["Memcpy DtoH (Device -> Pinned)"] == "memcpy"
    # correlation joins every GPU event to exactly one launch (runtime and driver)
    gpu = ev.filter(pl.col("kind").is_in(["kernel", "memcpy"]))
    launches = ev.filter(pl.col("kind") == "launch").select("correlation", pl.col("name").alias("api"))
    joined = gpu.join(launches, on="correlation", how="left")
    assert joined["api"].null_count() == 0
    fa3 = joined.filter(pl.col("name").str.contains("FlashAttnFwdSm90"))
    assert fa3["api"].to_list() == ["cuLaunchKernelEx"]
    # graph flag on replayed kernels and on the cudaGraphLaunch row only
    graphed = ev.filter(pl.col("graph").fill_null(False))
    assert sorted(graphed["kind"].to_list()) == ["kernel"] * 4 + ["launch"]
    assert graphed.filter(pl.col("kind") == "launch")["name"].to_list() == ["cudaGraphLaunch"]
    assert ev.filter((pl.col("kind") == "kernel") & ~pl.col("graph"))["name"].str.contains("RMSNorm").sum() == 0
    # GPU events: device/stream set, no host tid; host events: device -1
    k = ev.filter(pl.col("kind") == "kernel")
    assert set(k["device"].to_list()) == {0} and set(k["stream"].to_list()) == {7}
    assert k["tid"].null_count() == k.height
    assert set(ev.filter(pl.col("kind") == "op")["device"].to_list()) == {-1}


def test_c10d_collective_args(tmp_path: Path) -> None:
    ev = parse_kineto(gpu_rank(1).write(tmp_path / "r1.json").read_bytes(), "r1").events
    assert "coll_op" not in ev.columns  # the op comes from the kernel name at finalize, as for capture
    coll = ev.filter(pl.col("group").is_not_null())
    assert coll.height == 1  # c10d args only on the eager kernel; graphed ones come by name later
    row = coll.row(0, named=True)
    assert row["coll_bytes"] == 1024 * 2  # In msg nelems x bf16
    assert row["group"] == "0"
    assert '"collective":"allreduce"' in row["args"]
    fin = finalize_events(conform(ev.with_columns(pl.lit(1, pl.Int32).alias("rank"))))
    ops = fin.filter(pl.col("coll_seq").is_not_null()).select("name", "coll_op").unique().sort("name")
    assert dict(ops.iter_rows()) == {n: "allreduce" for n in ops.get_column("name")}


def test_integer_microsecond_trace_without_base(tmp_path: Path) -> None:
    b = TraceBuilder(rank=None, integer_us=True, base=False)
    t = 1_733_000_000_000_000_000  # absolute wall clock in ns, integer µs in the file
    b.kernel("nvjet_tst_x", t, t + 5000, 7000)
    path = b.write(tmp_path / "old.json")
    assert '"ts": 1733000000000005,' in path.read_text()
    assert "baseTimeNanoseconds" not in path.read_text()
    ev = parse_kineto(path.read_bytes(), str(path)).events
    k = ev.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert (k["start_ns"], k["dur_ns"]) == (t + 5000, 7000)


def test_names_with_quotes_non_utf8_and_long_templates(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    long_name = "void cutlass::device_kernel<" + "cute::tuple<int, int>, " * 90 + "GemmUniversal>(Params)"
    assert len(long_name) > 2000
    b.kernel('kernel "quoted" name', 0, 1000, 500)
    b.kernel(long_name, 2000, 3000, 500)
    b.kernel("badbytes_MARK_kernel", 4000, 5000, 500)
    raw = dumps(b.doc()).encode().replace(b"MARK", b"\xff\xfe")
    path = tmp_path / "names.json"
    path.write_bytes(raw)
    run = ingest_traces([path])
    names = run.events.filter(pl.col("kind") == "kernel")["name"].to_list()
    assert 'kernel "quoted" name' in names
    assert long_name in names  # full name kept, never truncated
    assert any(n.startswith("badbytes_") and "\ufffd" in n for n in names)
    assert run.manifest["ranks"]["0"]["non_utf8_replaced"] is True
    cats = dict(run.events.filter(pl.col("kind") == "kernel").select("name", "category").iter_rows())
    assert cats[long_name] == "gemm"


def test_cpu_profiler_trace_from_torch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            with record_function(f"tracekit:verify|cycle={i}|bs=2"):
                torch.relu(x @ x).sum()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    doc = load(path)
    run = ingest_traces([path])
    ev = run.events
    assert run.manifest["ranks"]["0"]["cpu_only"] is True
    assert any("CPU-only" in n for n in run.manifest["ingest"]["notes"])
    ranges = ev.filter(pl.col("kind") == "range").sort("start_ns")
    want = sorted(ns(doc, e["ts"]) for e in doc["traceEvents"] if e.get("cat") == "user_annotation")
    assert ranges["start_ns"].to_list() == want
    assert ranges["phase"].to_list() == ["verify"] * 3
    ops = ev.filter(pl.col("kind") == "op")
    assert ops.height == sum(1 for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    # round trip through the store keeps every ns
    out = write_run(ev, tmp_path / "run.parquet", run.manifest)
    back = read_run(out)
    assert sorted(back["start_ns"].to_list()) == sorted(ev["start_ns"].to_list())
