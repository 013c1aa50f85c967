"""The extend-vs-decode gap (analyzers.gap, tracekit gap)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.analyzers import analyses
from tracekit.analyzers.buckets import BUCKETS
from tracekit.analyzers.gap import gap_report
from tracekit.cli import cli
from tracekit.errors import AnalysisError
from tracekit.finalize import finalize_events, stamp
from tracekit.finalize.phases import format_label
from tracekit.render.gap import explanation_lines, warning_lines
from tracekit.schema import conform
from tracekit.store import new_manifest, write_run


def verify_eager(rank: int, c: int, t0: int, seq: int) -> list[dict[str, Any]]:
    """An eager verify: 4 launches, each issued 2 µs after the previous kernel ended."""
    rows: list[dict[str, Any]] = [dict(rank=rank, kind="range", name=format_label("verify", cycle=c, bs=2, tok=8, seq=seq, graphed=False),
                                       pid=1, tid=1, start_ns=t0, dur_ns=100_000)]
    t = t0 + 1_000
    for i, (name, cat, dur) in enumerate([("nvjet_a", "gemm", 10_000), ("extend_attn_fwd_kernel", "attention", 20_000),
                                          ("fused_moe_kernel", "moe", 15_000), ("nvjet_b", "gemm", 10_000)]):
        corr = c * 100 + i
        rows.append(dict(rank=rank, kind="launch", name="cudaLaunchKernel", pid=1, tid=1, start_ns=t, dur_ns=1_000, correlation=corr))
        rows.append(dict(rank=rank, kind="kernel", name=name, category=cat, device=rank, stream=7, start_ns=t + 2_000, dur_ns=dur, correlation=corr))
        t = t + 2_000 + dur + 1_000  # next launch starts 1 µs after this kernel ends and ends 1 µs later
    return rows


def decode_graphed(rank: int, c: int, t0: int, seq: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [dict(rank=rank, kind="range", name=format_label("decode", cycle=c, bs=2, seq=seq, graphed=True),
                                       pid=1, tid=1, start_ns=t0, dur_ns=50_000)]
    corr = 10_000 + c
    rows.append(dict(rank=rank, kind="launch", name="cudaGraphLaunch", pid=1, tid=1, start_ns=t0 + 1_000, dur_ns=5_000, correlation=corr, graph=True))
    t = t0 + 7_000
    for name, cat, dur in [("nvjet_a", "gemm", 8_000), ("decode_attn_kernel", "attention", 6_000), ("fused_moe_kernel", "moe", 12_000), ("nvjet_b", "gemm", 8_000)]:
        rows.append(dict(rank=rank, kind="kernel", name=name, category=cat, device=rank, stream=7, start_ns=t, dur_ns=dur, correlation=corr, graph=True))
        t += dur + 500
    return rows


def frame(builder: Any, n: int = 3, ranks: int = 2, seq: int = 1000) -> pl.DataFrame:
    rows = []
    for r in range(ranks):
        for c in range(n):
            rows += builder(r, c, 1_000_000 * c, seq)
    return finalize_events(conform(pl.DataFrame(rows)))


def test_gap_terms_by_hand() -> None:
    rep = gap_report(frame(verify_eager), frame(decode_graphed))
    typed = analyses.gap(frame(verify_eager), None, frame(decode_graphed), None)
    assert typed.total_delta_ns == rep["total_delta_ns"] and typed.timing["timing_source"] == "profiled"
    b = {r["bucket"]: r for r in rep["buckets"].iter_rows(named=True)}
    # verify window: 3 gaps of 3 µs (all launch overhead: next launch ends 2 µs after, +1 µs latency)
    assert b["gpu_window"]["a_ns"] == 55_000 + 3 * 3_000
    assert b["launch_overhead"]["a_ns"] == 9_000 and b["idle"]["a_ns"] == 0
    # decode: gaps inside the graph are idle
    assert b["gpu_window"]["b_ns"] == 34_000 + 3 * 500
    assert b["idle"]["b_ns"] == 1_500 and b["launch_overhead"]["b_ns"] == 0
    assert b["attention"]["delta_ns"] == 14_000 and b["gemm"]["delta_ns"] == 4_000 and b["moe"]["delta_ns"] == 3_000
    assert rep["total_delta_ns"] == pytest.approx(64_000 - 35_500)
    assert sum(r["delta_ns"] for r in rep["buckets"].iter_rows(named=True) if r["bucket"] != "gpu_window") == pytest.approx(rep["total_delta_ns"])
    # per token: A 8 tokens per instance, B 2 (decode: batch size)
    assert b["attention"]["delta_per_token_ns"] == pytest.approx(20_000 / 8 - 6_000 / 2)
    # ranked explanations: attention first (14 µs), launch overhead (9 µs) second
    items = rep["explanations"]
    assert [e.bucket for e in items[:2]] == ["attention", "launch_overhead"]
    assert items[0].delta_ns == 14_000 and items[0].families[0]["family"] == "extend_attn_fwd_kernel"
    assert items[0].families[0]["only"] == "a" and items[1].families == ()
    ex = explanation_lines(typed)  # the words are the renderer's
    assert ex[0].startswith("+14.0 µs attention") and "extend_attn_fwd_kernel only in verify" in ex[0]
    assert ex[1].startswith("+9.0 µs launch overhead") and "0/6 instances graphed" in ex[1]
    k = rep["kernels"]
    only_a = k.filter(pl.col("only") == "a").get_column("family").to_list()
    only_b = k.filter(pl.col("only") == "b").get_column("family").to_list()
    assert only_a == ["extend_attn_fwd_kernel"] and only_b == ["decode_attn_kernel"]
    moe = k.filter(pl.col("family") == "fused_moe_kernel").row(0, named=True)
    assert moe["a_count"] == 1 and moe["a_mean_ns"] == 15_000 and moe["b_mean_ns"] == 12_000
    assert rep["a"]["graphed_instances"] == 0 and rep["b"]["graphed_instances"] == 6
    assert rep["seq_check"] is None and warning_lines(typed) == []


def test_gap_of_a_phase_with_itself_is_zero() -> None:
    ev = frame(verify_eager)
    rep = gap_report(ev, ev, a="verify", b="verify")
    assert rep["total_delta_ns"] == 0
    assert all(r["delta_ns"] == 0 for r in rep["buckets"].iter_rows(named=True))
    assert rep["explanations"] == []


def test_sequence_length_mismatch_warns_and_matches_buckets() -> None:
    rep = gap_report(frame(verify_eager, seq=4000), frame(decode_graphed, seq=1000))
    typed = analyses.gap(frame(verify_eager, seq=4000), None, frame(decode_graphed, seq=1000), None)
    assert rep["seq_check"] == "differs" and "sequence lengths differ" in warning_lines(typed)[0]
    assert rep["seq"].height == 0  # no common power-of-two bucket
    rep = gap_report(frame(verify_eager, seq=1100), frame(decode_graphed, seq=1300))
    assert rep["seq_check"] is None and rep["seq"].get_column("seq_lo").to_list() == [1024]


def test_rank_filter_and_missing_side() -> None:
    rep = gap_report(frame(verify_eager), frame(decode_graphed), rank=1)
    assert rep["a"]["instances"] == 3 and rep["a"]["ranks"] == 1
    with pytest.raises(AnalysisError, match=r"^no phase or range name matches 'decode'") as missing:
        gap_report(frame(verify_eager), None)  # no decode in the verify run
    assert missing.value.side == "B"
    with pytest.raises(AnalysisError, match="on rank 5"):
        gap_report(frame(verify_eager), frame(decode_graphed), rank=5)


def test_cli_gap_two_runs_json(tmp_path: Path) -> None:
    a = write_run(frame(verify_eager), tmp_path / "spec.parquet", stamp(new_manifest()))
    b = write_run(frame(decode_graphed), tmp_path / "nospec.parquet", stamp(new_manifest()))
    res = CliRunner().invoke(cli, ["gap", str(a), "--b-run", str(b), "--json", "--by", "rank"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {"a", "b", "buckets", "total_delta_ns", "kernels"} <= set(doc)
    assert list(doc["buckets"]) == list(BUCKETS)
    assert {"a_ns", "b_ns", "delta_ns"} <= set(doc["buckets"]["attention"])
    assert doc["a"]["run"] == str(a) and doc["b"]["run"] == str(b)
    assert doc["total_delta_ns"] == pytest.approx(sum(v["delta_ns"] for v in doc["buckets"].values()))
    assert {r["rank"] for r in doc["by_rank"]} == {0, 1}
    res = CliRunner().invoke(cli, ["gap", str(a), "--b-run", str(b)])
    assert res.exit_code == 0 and "explained by" in res.output and "launch overhead" in res.output
    res = CliRunner().invoke(cli, ["gap", str(a)])  # B (decode) missing from the spec run
    line = res.output.strip()
    assert res.exit_code == 1 and line.startswith(f"tracekit: error: {a}: no phase or range name matches 'decode'"), line
    res = CliRunner().invoke(cli, ["gap", str(a), "--b-run", str(b), "--b", "prefill"])
    assert res.exit_code == 1 and str(b) in res.output
