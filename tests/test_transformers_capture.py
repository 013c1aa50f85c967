"""``tracekit capture --engine transformers`` end to end on CPU: spawned gloo ranks, transformers' own
tensor-parallel plan, assisted generation with real accept lengths, then attribute / spec / gap on the run.

Small on purpose: the tiny DeepSeek-V3 preset, 2 ranks, 1 warm-up + 2 profiled generate() calls of 8 tokens.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tracekit.cli import cli
from tracekit.store import load_run

ARGS = ["capture", "--engine", "transformers", "--device", "cpu", "--cycles", "2", "--warmup", "1",
        "--new-tokens", "8", "--prompt-len", "8"]


def _cli(*args: str) -> Any:
    r = CliRunner().invoke(cli, list(args))
    assert r.exit_code == 0, r.output + repr(r.exception)
    return r


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tf") / "spec.parquet"
    _cli(*ARGS, "--ranks", "all", "--world", "2", "-o", str(out))
    return out


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tf") / "base.parquet"
    _cli(*ARGS, "--ranks", "all", "--world", "1", "--no-assistant", "-o", str(out))
    return out


def test_draft_and_verify_on_both_ranks(spec_run: Path) -> None:
    run = load_run(spec_run)
    ranges = run.events.filter(pl.col("kind") == "range").filter(pl.col("phase").is_not_null())
    per_rank = ranges.group_by("rank").agg(pl.col("phase").unique())
    assert per_rank.height == 2
    for phases in per_rank.get_column("phase").to_list():
        assert {"draft", "verify", "prefill"} <= set(phases)
    man = run.manifest
    assert man["capture"]["workload"] == "transformers"
    secs = [man["ranks"][r] for r in ("0", "1")]
    for sec in secs:
        assert sec["versions"]["transformers"] == version("transformers")
        wl = sec["workload"]
        assert wl["transformers"] == version("transformers") and wl["accept"]["modelled"] is False
        assert wl["tensor_parallel"]["plan"] == "tp_plan=auto" and wl["tensor_parallel"]["rules"]
        assert wl["assistant"]["candidate_generator"] == "EarlyExitCandidateGenerator"
    # tensor parallel: every rank generated the same tokens and accepted the same drafts
    assert secs[0]["workload"]["tokens_sha1"] == secs[1]["workload"]["tokens_sha1"]
    assert secs[0]["workload"]["accept"]["histogram"] == secs[1]["workload"]["accept"]["histogram"]
    # warm-up 1 + window 2 + the default 4 unprofiled calls after it (the reference's second block), 8 tokens each
    assert secs[0]["workload"]["generated_tokens"] == (1 + 2 + 4) * 8


def test_host_buckets_sum_exactly(spec_run: Path) -> None:
    doc = json.loads(_cli("attribute", str(spec_run), "--json").output)
    assert doc["mode"] == "host"
    rows = [r for r in doc["phases"] if r["phase"] in ("draft", "verify")]
    assert {(r["phase"], r["rank"]) for r in rows} == {(p, r) for p in ("draft", "verify") for r in (0, 1)}
    for r in rows:
        assert sum(r["buckets_ns"].values()) == r["host_ns"] > 0
        assert r["buckets_ns"]["allreduce"] > 0  # transformers' own TP allreduces (gloo)


def test_spec_measures_accept_and_compares_with_plain_decode(spec_run: Path, base_run: Path) -> None:
    doc = json.loads(_cli("spec", str(spec_run), "--baseline", str(base_run), "--json").output)
    (bucket,) = doc["buckets"]
    assert bucket["accept_len_source"] == "measured"
    assert 1 <= bucket["draft_tokens"] <= 3  # median verify tokens - 1: the last calls of a generate are capped
    assert bucket["decode_step_ns"] > 0 and bucket["break_even_tokens"] > 0
    man = load_run(spec_run).manifest
    acc = man["ranks"]["0"]["workload"]["accept"]
    assert acc["count"] > 0 and 0 <= acc["mean"] <= 3


def test_gap_verify_against_the_plain_decode_run(spec_run: Path, base_run: Path) -> None:
    doc = json.loads(_cli("gap", str(spec_run), "--b-run", str(base_run), "--json").output)
    assert doc["a"]["phase"] == "verify" and doc["b"]["phase"] == "decode"
    base = load_run(base_run)
    phases = base.events.filter(pl.col("kind") == "range").get_column("phase").drop_nulls().unique().to_list()
    assert set(phases) == {"prefill", "decode"}


@pytest.mark.parametrize(("args", "msg"), [
    (["--assistant", "bogus"], "expected same, early-exit:L"),
    (["--assistant", "same", "--no-assistant"], "exclude each other"),
    (["--batch-size", "2"], "batch size 1 only"),
    (["--model", "llama-tiny", "--world", "3"], "not divisible by the world size 3"),
])
def test_bad_options_are_usage_errors(args: list[str], msg: str, tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, [*ARGS, *args, "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and msg in r.output, r.output


def test_model_options_need_the_engine(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["capture", "--device", "cpu", "--model", "llama-tiny", "-o", str(tmp_path / "x")])
    assert r.exit_code == 2 and "need --engine transformers" in r.output
