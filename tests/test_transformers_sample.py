"""The committed H200 sample of the transformers engine (samples/h200-transformers/, bench/transformers_run.sh):
GPU attribution of transformers' own draft / verify / decode, read back on the CPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.store import read_manifest

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "h200-transformers"


def _json(*args: str) -> dict[str, Any]:
    r = CliRunner().invoke(cli, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def test_manifest_says_transformers_517_on_an_h200() -> None:
    man = read_manifest(SAMPLE / "spec.parquet")
    sec = man["ranks"]["0"]
    assert sec["versions"]["transformers"] == "5.17.0" and sec["device"] == "cuda:0"
    wl = sec["workload"]
    assert wl["model"]["class"] == "DeepseekV3ForCausalLM" and wl["accept"]["modelled"] is False
    assert wl["hook_table"]["version_checked"] is True
    assert wl["hook_table"]["calls"]["verify"] == wl["accept"]["count"]


def test_gpu_buckets_sum_to_the_window_for_draft_and_verify() -> None:
    doc = _json("attribute", str(SAMPLE / "spec.parquet"))
    assert doc["mode"] == "gpu"
    rows = {r["phase"]: r for r in doc["phases"] if r["rank"] == 0}
    for name in ("draft", "verify", "prefill"):
        r = rows[name]
        assert r["gpu_window_ns"] > 0 and sum(r["buckets_ns"].values()) == r["gpu_window_ns"]
        assert r["graph_launches"] == 0 and r["eager_launches"] > 0
    assert rows["verify"]["buckets_ns"]["moe"] > 0


def test_spec_and_gap_on_the_sample() -> None:
    doc = _json("spec", str(SAMPLE / "spec.parquet"), "--baseline", str(SAMPLE / "base.parquet"),
                "--draft-tokens", "3")
    (bucket,) = doc["buckets"]
    assert bucket["accept_len_source"] == "measured" and bucket["decode_step_ns"] > 0
    # both sides on the unprofiled clock: the cycle timer here, the baseline run's decode timer there
    assert bucket["timing_source"] == "unprofiled" and bucket["draft_extend_ns"] == 0.0
    assert doc["decode_source"] == "baseline run: unprofiled decode timer (host median)"
    base = read_manifest(SAMPLE / "base.parquet")["ranks"]["0"]["unprofiled"]["decode"]["host_median_ns"]
    assert bucket["decode_step_ns"] == base
    gap = _json("gap", str(SAMPLE / "spec.parquet"), "--b-run", str(SAMPLE / "base.parquet"))
    assert gap["a"]["phase"] == "verify" and gap["b"]["phase"] == "decode"
