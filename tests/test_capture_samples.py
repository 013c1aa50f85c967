"""The committed real captures (2x H200 over NCCL, 8 CPU ranks over gloo) hold what capture promises."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.store import load_run

H200 = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"
CPU8 = Path(__file__).resolve().parent.parent / "samples" / "cpu8-builtin"


def _phase_rows(ev: pl.DataFrame) -> pl.DataFrame:
    return ev.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())


@pytest.mark.parametrize("mode", ["eager", "graphed"])
def test_h200_capture_manifest_and_phases(mode: str) -> None:
    run = load_run(H200 / f"{mode}.parquet")
    assert run.ranks == [0, 1] and run.manifest["world_size"] == 2
    for r in ("0", "1"):
        sec = run.manifest["ranks"][r]
        assert sec["gpu"]["name"] == "NVIDIA H200" and sec["gpu"]["nvml"] == "ok"
        assert sec["gpu"]["pcie_gen"] >= 4 and "sm_clock_mhz" in sec["end"]["gpu"]
        assert sec["env"]["NCCL_NVLS_ENABLE"] == "0" and sec["backend"] == "nccl"
        assert sec["versions"]["torch"].startswith("2.11") and sec["versions"]["nccl"]
        assert sec["profiled"]["verify"]["clock"] == "cuda_event"
        assert sec["window"]["cycles"] == 12 and sec["aborted"] is None
    ph = _phase_rows(run.events)
    verify = ph.filter(pl.col("phase") == "verify")
    assert verify.height == 24 and verify["accept_len"].null_count() == 0
    assert verify["graphed"].unique().to_list() == [mode == "graphed"]
    assert ph.filter(pl.col("phase") == "decode")["graphed"].unique().to_list() == [True]
    kern = run.events.filter(pl.col("kind") == "kernel")
    by = dict(kern.group_by("phase").agg(pl.col("graph").mean()).iter_rows())
    assert by["decode"] == 1.0 and by["draft"] == 1.0  # all replayed from CUDA graphs
    assert by["draft_extend"] == 0.0
    if mode == "eager":
        assert by["verify"] == 0.0
    else:
        assert by["verify"] > 0.99  # only the input copies before the replay are launched eagerly
    counters = run.events.filter(pl.col("kind") == "counter")["name"].unique().sort().to_list()
    assert "gpu.sm_clock_mhz" in counters and "gpu.power_w" in counters
    # eager verify is the expensive one: the reason SGLang's graph fallback hurts
    if mode == "eager":
        un = {r: run.manifest["ranks"][r]["unprofiled"] for r in ("0", "1")}
        assert all(u["verify"]["median_ns"] > 3 * u["decode"]["median_ns"] for u in un.values())


def test_in_process_table_equals_json_ingest_of_the_same_window(tmp_path: Path) -> None:
    """The kept raw Kineto JSON (cut after cycle 8) and the in-process event table agree to the nanosecond."""
    from tracekit.ingest import ingest_traces

    ing = ingest_traces(sorted(str(p) for p in H200.glob("eager-rank-*.trace.json.gz"))).events
    own = load_run(H200 / "eager.parquet").events
    def agg(df: pl.DataFrame) -> pl.DataFrame:
        return (df.filter(pl.col("kind") == "kernel", pl.col("cycle") <= 8)
                .group_by("rank", "phase").agg(pl.len(), pl.col("dur_ns").sum(), pl.col("start_ns").min())
                .sort("rank", "phase"))
    assert agg(ing).equals(agg(own))


def test_cpu8_capture() -> None:
    run = load_run(CPU8 / "run.parquet")
    assert run.ranks == list(range(8)) and "missing_ranks" not in run.manifest
    ph = _phase_rows(run.events)
    per = ph.group_by("rank").agg(pl.col("cycle").n_unique().alias("cycles"), pl.col("graphed").any().alias("g"))
    assert per["cycles"].to_list() == [3] * 8 and per["g"].to_list() == [False] * 8
    assert all(sec["gpu"] is None and sec["backend"] == "gloo" for sec in run.manifest["ranks"].values())
