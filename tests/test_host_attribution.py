"""Host-mode attribution (CPU runs: no GPU events): the walk, the rule table, the real CPU sample, the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from tracekit.analyzers.host_attribution import (
    HOST_BUCKET_COLUMNS,
    HOST_BUCKETS,
    check_host_sums,
    default_host_rules,
    exclusive_segments,
    has_gpu_events,
    host_report,
    parse_host_rules,
)
from tracekit.cli import cli
from tracekit.errors import TracekitError
from tracekit.finalize import finalize_events
from tracekit.intervals import union_ns
from tracekit.render.attribute import _rank_columns
from tracekit.schema import conform
from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "cpu8-builtin" / "run.parquet"
LABEL = "tracekit:verify|cycle=0|bs=1|tok=2|seq=8|graphed=0"


def row(kind: str, name: str, start: int, dur: int, tid: int = 1) -> dict[str, Any]:
    return dict(rank=0, kind=kind, name=name, pid=7, tid=tid, start_ns=start, dur_ns=dur, device=-1)


def hand_run() -> pl.DataFrame:
    """One verify instance [0, 1000) on thread 1; the expected buckets are in EXPECTED."""
    rows = [
        row("range", LABEL, 0, 1000),
        # gemm: linear owns its nested mm (outermost wins): 200
        row("op", "aten::linear", 100, 200),
        row("op", "aten::mm", 120, 160),
        # attention scope [320, 480): SDPA by name 60, an unnamed op by scope 40, a gap in it is overhead
        row("range", "attention", 320, 160),
        row("op", "aten::scaled_dot_product_attention", 330, 60),
        row("op", "aten::add", 400, 40),
        # softmax only counts as attention inside an attention scope: here outside -> default (elementwise)
        row("op", "aten::_softmax", 500, 30),
        # a partial overlap: the later op owns only its part after the earlier one ends (530..550: 20)
        row("op", "aten::mul", 520, 30),
        # the allreduce scope owns its whole span (call + wait): 300
        row("range", "allreduce", 600, 300),
        row("op", "c10d::allreduce_", 610, 10),
        row("op", "aten::copy_", 880, 10),
        # an op that starts before the range end and runs past it: only 950..1000 counts (gemm, 50)
        row("op", "aten::addmm", 950, 100),
        # another thread (gloo worker) and an op outside the range: ignored
        row("op", "aten::mm", 100, 500, tid=2),
        row("op", "aten::mm", 1200, 50),
    ]
    return finalize_events(conform(pl.DataFrame(rows)))


EXPECTED = {
    "gemm": 200 + 50,
    "attention": 60 + 40,
    "elementwise": 30 + 20,
    "allreduce": 300,
}


def test_hand_built_walk_outermost_scope_fallback_and_exact_sums() -> None:
    rep = host_report(hand_run())
    inst = rep["instances"]
    assert inst.height == 1
    r = inst.row(0, named=True)
    assert r["phase"] == "verify" and r["host_ns"] == 1000 and r["gpu_window_ns"] == 0
    covered = sum(EXPECTED.values())
    want = {b: EXPECTED.get(b, 0) for b in HOST_BUCKETS}
    want["host_overhead"] = 1000 - covered
    assert {b: r[f"{b}_ns"] for b in HOST_BUCKETS} == want
    assert sum(r[c] for c in HOST_BUCKET_COLUMNS) == r["host_ns"]
    assert r["ops"] == 9  # op rows on the thread starting inside the range
    assert r["outer_ops"] == 6  # linear, sdpa, add, _softmax, mul, addmm (nested mm, allreduce_, copy_ own nothing)
    check_host_sums(inst)


def test_scope_condition_on_a_name_rule() -> None:
    ev = hand_run().with_columns(
        pl.when(pl.col("name") == "aten::_softmax").then(pl.lit(410, pl.Int64)).otherwise(pl.col("start_ns")).alias("start_ns"),
        pl.when(pl.col("name") == "aten::_softmax").then(pl.lit(5, pl.Int64)).otherwise(pl.col("dur_ns")).alias("dur_ns"),
    ).filter(pl.col("name") != "aten::add")
    r = host_report(ev)["instances"].row(0, named=True)
    assert r["attention_ns"] == 60 + 5  # the softmax inside the attention scope is attention now
    assert r["elementwise_ns"] == 20 + 10  # aten::mul 520..550 only (no longer overlapped)


def test_user_rules_and_bad_rules() -> None:
    base = default_host_rules()
    # a rule table where everything unnamed is "other" and the allreduce scope does not claim its span
    mine = parse_host_rules({
        "default": "other",
        "rule": [{"category": r.category, "pattern": r.pattern, **({"scope": r.scope} if r.scope else {})} for r in base.rules],
        "scope": [{"category": "attention", "pattern": "^attention$"}],
    })
    r = host_report(hand_run(), rules=mine)["instances"].row(0, named=True)
    assert r["allreduce_ns"] == 10 and r["other_ns"] == 30 + 20 + 10  # softmax, mul, copy_
    assert sum(r[c] for c in HOST_BUCKET_COLUMNS) == 1000
    with pytest.raises(TracekitError, match="category 'gpu'"):
        parse_host_rules({"rule": [{"category": "gpu", "pattern": "x"}]})
    with pytest.raises(TracekitError, match="bad regular expression"):
        parse_host_rules({"scope": [{"category": "moe", "pattern": "("}]})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 200)), min_size=0, max_size=30))
def test_exclusive_segments_are_disjoint_and_cover_the_union(iv: list[tuple[int, int]]) -> None:
    s = np.array([a for a, _ in iv], dtype=np.int64)
    e = s + np.array([d for _, d in iv], dtype=np.int64)
    _, ss, se = exclusive_segments(s, e)
    assert (se >= ss).all()
    assert (ss[1:] >= se[:-1]).all()  # sorted, disjoint
    assert int((se - ss).sum()) == union_ns(s, e)


# --- the real CPU capture ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> pl.DataFrame:
    return load_run(SAMPLE).events


def test_cpu_sample_buckets_sum_and_categories(sample: pl.DataFrame) -> None:
    assert not has_gpu_events(sample)
    rep = host_report(sample)
    inst = rep["instances"]
    assert inst.height == 96 and set(inst["phase"].unique()) == {"draft", "verify", "draft_extend", "decode"}
    sums = inst.select(pl.sum_horizontal(list(HOST_BUCKET_COLUMNS)).alias("s"), "host_ns")
    assert (sums["s"] == sums["host_ns"]).all()
    assert (inst["gpu_window_ns"] == 0).all() and (inst["ops"] > 0).all()
    verify = rep["by_phase"].filter(pl.col("phase") == "verify").row(0, named=True)
    for b in ("attention", "moe", "gemm", "allreduce", "comm", "elementwise", "host_overhead"):
        assert verify[f"{b}_ns"] > 0, b
    # the MoE layer runs in the target model only: draft (one dense layer) has no MoE time
    draft = rep["by_phase"].filter(pl.col("phase") == "draft").row(0, named=True)
    assert draft["moe_ns"] == 0 and draft["attention_ns"] > 0
    # op time can never exceed the instance: outermost ops only (a sum of all op durations would)
    all_op = sample.filter(pl.col("kind") == "op", pl.col("phase") == "verify", pl.col("rank") == 0)["dur_ns"].sum()
    r0 = rep["by_rank"].filter(pl.col("phase") == "verify", pl.col("rank") == 0).row(0, named=True)
    covered = r0["host_ns"] - r0["host_overhead_ns"] - r0["allreduce_ns"] - r0["comm_ns"]
    assert covered < all_op


def test_cli_attribute_on_cpu_sample_is_host_mode() -> None:
    r = CliRunner().invoke(cli, ["attribute", str(SAMPLE)])
    assert r.exit_code == 0, r.stdout
    first = r.stdout.splitlines()[0]
    assert first.startswith("host mode:") and "no GPU events" in first
    assert "host time (CPU run: no GPU events; ops on the phase's thread)" in r.stdout
    assert "0 launches" not in r.stdout and "on the GPU" not in r.stdout
    # 8 ranks: min / median / max over ranks, never one squeezed column per rank
    assert "ranks: min %" in r.stdout and "rank 7 %" not in r.stdout and "…" not in r.stdout
    table = [line for line in r.stdout.splitlines() if "│" in line]
    assert table and max(len(line) for line in table) <= 120  # fits a 120-column pipe, nothing cut
    assert "allreduce (call + wait)" in r.stdout and "(rank " in r.stdout


def test_cli_attribute_json_host_mode() -> None:
    r = CliRunner().invoke(cli, ["attribute", str(SAMPLE), "--json", "--by", "cycle", "--phase", "verify"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["mode"] == "host" and doc["bucket_order"] == list(HOST_BUCKETS)
    assert {"run", "by", "units", "phases", "all_ranks", "stragglers", "issues", "definitions", "cycles"} <= set(doc)
    assert len(doc["cycles"]) == 24 and len(doc["phases"]) == 8
    for item in doc["phases"] + doc["all_ranks"] + doc["cycles"]:
        assert item["gpu_window_ns"] == 0
        assert sum(item["buckets_ns"].values()) == item["host_ns"]
    allr = doc["all_ranks"][0]
    assert allr["buckets_ns"]["moe"] > 0 and allr["buckets_ns"]["attention"] > 0
    g = CliRunner().invoke(cli, ["attribute", str(SAMPLE.parents[1] / "h200x2-builtin" / "eager.parquet"), "--json", "--phase", "verify"])
    assert g.exit_code == 0 and json.loads(g.stdout)["mode"] == "gpu"


def test_cli_attribute_by_seq_and_rank_host_mode() -> None:
    r = CliRunner().invoke(cli, ["attribute", str(SAMPLE), "--by", "seq", "--rank", "3", "--phase", "decode"])
    assert r.exit_code == 0, r.stdout
    assert r.stdout.startswith("host mode: rank 3 has no GPU events")
    assert "by sequence length" in r.stdout


def _cells(rows: int) -> tuple[list[str], list[str]]:
    t = Table()
    rrows = [{"rank": i, "x": i + 1, "w": 10} for i in range(rows)]
    cells = _rank_columns(t, rrows, "%")
    return [str(c.header) for c in t.columns], cells(lambda r: r["x"] / r["w"])


def test_rank_columns_up_to_four_then_min_median_p90_max() -> None:
    heads, vals = _cells(4)
    assert heads == ["rank 0 %", "rank 1 %", "rank 2 %", "rank 3 %"] and vals == ["10.0%", "20.0%", "30.0%", "40.0%"]
    heads, vals = _cells(8)
    assert heads == ["ranks: min %", "median %", "p90 %", "max % (rank)"]
    assert vals == ["10.0%", "40.0%", "80.0%", "80.0% (rank 7)"]  # nearest rank: the 4th and 8th smallest of 8


def test_piped_console_is_wide() -> None:
    from tracekit.render.attribute import make_console

    c = make_console()
    assert isinstance(c, Console) and (c.is_terminal or c.width >= 120)


def test_cli_gap_host_mode_on_cpu_sample() -> None:
    r = CliRunner().invoke(cli, ["gap", str(SAMPLE)])
    assert r.exit_code == 0, r.stdout
    assert r.stdout.startswith("host mode:") and "verify vs decode: host time (CPU run" in r.stdout
    j = CliRunner().invoke(cli, ["gap", str(SAMPLE), "--json", "--stat", "mean"])  # means add up
    doc = json.loads(j.stdout)
    assert doc["mode"] == "host" and doc["a"]["phase"] == "verify" and doc["b"]["phase"] == "decode"
    assert doc["statistic"] == "mean"
    deltas = sum(v["delta_ns"] for v in doc["buckets"].values())
    assert deltas == pytest.approx(doc["a"]["host_ns"] - doc["b"]["host_ns"], abs=1e-3) == doc["total_delta_ns"]
    assert doc["buckets"]["moe"]["a_ns"] > 0 and set(doc["buckets"]) == set(HOST_BUCKETS)
