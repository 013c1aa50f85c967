"""Which clock each analysis speaks: capture timers (unprofiled) beside the profiled window, on real H200 captures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.analyzers.analyses import instance_estimate, typical_instance
from tracekit.analyzers.attribution import attribute_report
from tracekit.analyzers.spec import spec_report
from tracekit.analyzers.unprofiled import compare_timers, estimate_buckets, phase_timers
from tracekit.buckets import BUCKETS
from tracekit.cli import cli
from tracekit.store import load_run, read_manifest

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
MAIN = SAMPLES / "h200x2-mainjob"
BUILTIN = SAMPLES / "h200x2-builtin"


def test_phase_timers_are_medians_over_ranks_on_the_h200_sample() -> None:
    man = read_manifest(MAIN / "eager.parquet")
    t = phase_timers(man)["verify"]
    meds = sorted(float(sec["unprofiled"]["verify"]["median_ns"]) for sec in man["ranks"].values())
    assert t.unprofiled_ns == pytest.approx(sum(meds) / 2) and t.clock == "cuda_event" and t.ranks == 2
    assert t.window == "profiled" and t.ratio == pytest.approx(t.window_ns / t.paired_unprofiled_ns)
    only0 = phase_timers(man, [0])["verify"]
    assert only0.unprofiled_ns == float(man["ranks"]["0"]["unprofiled"]["verify"]["median_ns"])


def test_diff_graphed_to_eager_speaks_the_unprofiled_clock() -> None:
    # the figure: the unprofiled medians say about +12.3 ms where the profiled windows say +34.9 ms
    tm = compare_timers(read_manifest(MAIN / "graphed.parquet"), "verify", read_manifest(MAIN / "eager.parquet"), "verify")
    assert tm["timing_source"] == "unprofiled" and round(tm["delta_ns"] / 1e6, 1) == -12.3
    out = CliRunner().invoke(cli, ["diff", str(MAIN / "graphed.parquet"), str(MAIN / "eager.parquet"), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["timing_source"] == "unprofiled"
    assert round((doc["unprofiled"]["verify"]["b_ns"] - doc["unprofiled"]["verify"]["a_ns"]) / 1e6, 1) == 12.3
    none = compare_timers({"ranks": {}}, "verify", read_manifest(MAIN / "eager.parquet"), "verify")
    assert none["timing_source"] == "profiled" and "no unprofiled timer for verify" in none["why"]


def test_gap_json_carries_the_timing_source() -> None:
    out = CliRunner().invoke(cli, ["gap", str(BUILTIN / "eager.parquet"), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    man = read_manifest(BUILTIN / "eager.parquet")
    assert doc["timing_source"] == "unprofiled"
    want = phase_timers(man)["verify"].unprofiled_ns - phase_timers(man)["decode"].unprofiled_ns
    assert doc["unprofiled"]["delta_ns"] == pytest.approx(want)


def test_spec_uses_unprofiled_timers_and_keeps_the_profiled_cycle() -> None:
    run = load_run(MAIN / "eager.parquet")
    table, ctx = spec_report(run.events, manifest=run.manifest)
    row = table.row(0, named=True)
    un = run.manifest["ranks"][str(ctx["rank"])]["unprofiled"]
    parts = sum(un[p]["host_median_ns"] for p in ("draft", "verify", "draft_extend"))
    assert row["timing_source"] == "unprofiled" and row["verify_ns"] == un["verify"]["host_median_ns"]
    # no cycle timer in this older capture: cycle = unprofiled parts + the profiled host time between phases
    assert row["cycle_ns"] == pytest.approx(parts + row["host_between_ns"])
    assert abs(row["cycle_ns"] / parts - 1) < 0.10
    assert row["profiled_cycle_ns"] > 2 * row["cycle_ns"]  # the profiled eager cycle is more than twice as long
    assert row["decode_step_ns"] == un["decode"]["host_median_ns"]
    assert row["break_even_tokens"] == pytest.approx(row["cycle_ns"] / row["decode_step_ns"])
    plain, _ = spec_report(run.events)
    assert plain["timing_source"][0] == "profiled" and plain["cycle_ns"][0] == pytest.approx(row["profiled_cycle_ns"])


def test_estimate_keeps_kernels_scales_host_bound_buckets_and_sums_exactly() -> None:
    b = dict.fromkeys(BUCKETS, 0.0) | {"attention": 1000.0, "moe": 3000.0, "allreduce": 2500.0,
                                       "launch_overhead": 6000.0, "idle": 500.0}
    est = estimate_buckets(b, allreduce_wait_ns=2000.0, unprofiled_ns=8250.0)
    assert est.kernel_ns == 4500.0 and est.host_bound_ns == 8500.0  # 500 allreduce transfer is kernel work
    assert est.scale == pytest.approx((8250 - 4500) / 8500)
    assert sum(est.buckets_ns.values()) == est.window_ns == 8250
    assert est.buckets_ns["attention"] == 1000 and est.buckets_ns["moe"] == 3000
    assert est.buckets_ns["launch_overhead"] == pytest.approx(6000 * est.scale, abs=1)
    over = estimate_buckets(b, 2000.0, unprofiled_ns=4000.0)  # kernels alone exceed the unprofiled time
    assert over.scale == 0.0 and over.kernels_exceed_ns == 500.0 and over.window_ns == 4500


def test_estimate_on_the_h200_eager_sample_fits_the_unprofiled_verify() -> None:
    run = load_run(BUILTIN / "eager.parquet")
    rep = attribute_report(run.events, "verify")
    timer = phase_timers(run.manifest)["verify"]
    inst = typical_instance(rep["instances"], "verify")
    assert inst is not None
    windows = sorted(rep["instances"]["gpu_window_ns"].to_list())
    assert inst["gpu_window_ns"] == windows[(len(windows) - 1) // 2]  # the median instance, not the mean
    est = instance_estimate(inst, timer)
    assert est is not None and est.window_ns == round(timer.unprofiled_ns) and 0 < est.scale < 1
    for k in ("attention", "moe", "gemm"):  # kernel work as measured
        assert est.buckets_ns[k] == inst[f"{k}_ns"]
    assert est.buckets_ns["launch_overhead"] < inst["launch_overhead_ns"]
    out = CliRunner().invoke(cli, ["attribute", str(BUILTIN / "eager.parquet"), "--phase", "verify", "--json"])
    doc = json.loads(out.stdout)
    items = [e for e in doc["unprofiled_estimate"] if e["phase"] == "verify"]
    assert {e["rank"] for e in items} == {0, 1, None} and all(e["estimate"] for e in items)
    assert all(sum(e["buckets_ns"].values()) == e["window_ns"] for e in items)
    txt = CliRunner().invoke(cli, ["attribute", str(BUILTIN / "eager.parquet"), "--phase", "verify"]).output
    assert "unprofiled ESTIMATE" in txt and "docs/attribution.md" in txt
