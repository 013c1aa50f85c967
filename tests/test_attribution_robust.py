"""Robust statistics (analyzers.robust) on real captures: medians, p90, outliers, in JSON and text.

``samples/h200x2-builtin/eager.parquet`` (2 x H200) has one draft instance of 880.7 ms
(rank 0, cycle 6: its allreduce waited for rank 1) among 23 of 0.74-0.99 ms; the mean
says 37 ms per instance, the median does not. Windows and medians are recomputed here
from the event rows (first member GPU event start to last end), independently of the walk.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from tracekit.analyzers.robust import outliers, quantile
from tracekit.cli import cli
from tracekit.store import read_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
EAGER = SAMPLES / "h200x2-builtin" / "eager.parquet"
CPU8 = SAMPLES / "cpu8-builtin" / "run.parquet"


def nearest_rank(values: list[int], q: float) -> int:
    v = sorted(values)
    return v[max(math.ceil(q * len(v)) - 1, 0)]


def windows(ev: pl.DataFrame, phase: str) -> dict[int, list[tuple[int, int]]]:
    """rank -> [(cycle, window)] from the GPU rows of the phase's instances."""
    g = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]) & (pl.col("phase") == phase))
    w = g.group_by("rank", "phase_id").agg(
        pl.col("cycle").first(), ((pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()).alias("w")
    )
    out: dict[int, list[tuple[int, int]]] = {}
    for r, _pid, c, win in w.sort("rank", "phase_id").iter_rows():
        out.setdefault(r, []).append((c, win))
    return out


def test_stalled_draft_median_and_outlier_in_json() -> None:
    res = CliRunner().invoke(cli, ["attribute", str(EAGER), "--phase", "draft", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    ref = windows(read_run(EAGER), "draft")
    for item in doc["phases"]:
        vals = [w for _, w in ref[item["rank"]]]
        assert item["median_gpu_window_ns"] == nearest_rank(vals, 0.5)
        assert item["p90_gpu_window_ns"] == nearest_rank(vals, 0.9)
        med = nearest_rank(vals, 0.5)
        mad = nearest_rank([abs(v - med) for v in vals], 0.5)
        expected = [(c, w) for c, w in ref[item["rank"]] if w > 2 * med and w - med > 5 * 1.4826 * mad]
        assert [(o["cycle"], o["gpu_window_ns"]) for o in item["outliers"]] == expected
    r0 = next(p for p in doc["phases"] if p["rank"] == 0)
    (stall,) = r0["outliers"]
    assert stall["cycle"] == 6 and round(stall["gpu_window_ns"] / 1e6, 1) == 880.7
    assert 0.74e6 <= r0["median_gpu_window_ns"] <= 0.99e6 and r0["gpu_window_ns"] / r0["instances"] > 30e6
    assert {"rank", "cycle", "start_ns", "gpu_window_ns", "reason"} <= set(stall)
    assert next(p for p in doc["phases"] if p["rank"] == 1)["outliers"] == []
    (all_ranks,) = doc["all_ranks"]
    assert all_ranks["outliers"] == [stall]
    assert all_ranks["median_gpu_window_ns"] == nearest_rank([w for r in ref.values() for _, w in r], 0.5)


def test_table_names_the_outlier_and_prints_the_median() -> None:
    res = CliRunner().invoke(cli, ["attribute", str(EAGER), "--phase", "draft"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "GPU window median / p90" in text
    assert "outlier: rank 0 cycle 6, 880.7 ms = 1169x the median" in text
    assert "median 748.4 µs" in text and "mean 37.43 ms" in text


def test_host_mode_median_and_p90() -> None:
    res = CliRunner().invoke(cli, ["attribute", str(CPU8), "--phase", "verify", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["mode"] == "host"
    ev = read_run(CPU8)
    inst = ev.filter((pl.col("kind") == "range") & (pl.col("phase") == "verify") & pl.col("phase_id").is_not_null())
    inst = inst.sort("phase_id", "start_ns", "dur_ns", descending=[False, False, True]).group_by(
        "phase_id", maintain_order=True).first()
    for item in doc["phases"]:
        vals = inst.filter(pl.col("rank") == item["rank"]).get_column("dur_ns").to_list()
        assert item["median_host_ns"] == nearest_rank(vals, 0.5)
        assert item["p90_host_ns"] == nearest_rank(vals, 0.9)
        assert "median_gpu_window_ns" not in item and isinstance(item["outliers"], list)


def test_quantile_and_threshold_rules() -> None:
    df = pl.DataFrame({"x": [5, 1, 4, 2, 3, 6]})
    assert df.select(quantile(pl.col("x"), 0.5)).item() == 3  # 3rd smallest of 6
    assert df.select(quantile(pl.col("x"), 0.9)).item() == 6  # ceil(5.4) = 6th
    inst = pl.DataFrame({
        "phase": ["v"] * 6, "rank": [0] * 6, "phase_id": list(range(6)), "cycle": list(range(6)),
        "start_ns": list(range(6)), "w": [100, 101, 99, 100, 199, 250],
    })
    out = outliers(inst, "w", "start_ns")
    assert out.get_column("cycle").to_list() == [5]  # 199 is not > 2x the median (100)
    assert out.row(0, named=True)["median_ns"] == 100 and out.row(0, named=True)["ratio"] == 2.5
    assert outliers(inst.head(2), "w", "start_ns").height == 0  # too few instances to call one


def test_gap_compares_medians_by_default_and_says_so() -> None:
    ref = windows(read_run(EAGER), "draft")
    draft = [w for r in ref.values() for _, w in r]
    ext = [w for r in windows(read_run(EAGER), "draft_extend").values() for _, w in r]
    res = CliRunner().invoke(cli, ["gap", str(EAGER), "--a", "draft", "--b", "draft_extend", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["statistic"] == "median" and doc["units"].startswith("ns, median per phase instance")
    assert doc["a"]["gpu_window_ns"] == nearest_rank(draft, 0.5) and doc["b"]["gpu_window_ns"] == nearest_rank(ext, 0.5)
    assert doc["total_delta_ns"] == nearest_rank(draft, 0.5) - nearest_rank(ext, 0.5)
    res = CliRunner().invoke(cli, ["gap", str(EAGER), "--a", "draft", "--b", "draft_extend", "--json", "--stat", "mean"])
    doc = json.loads(res.stdout)
    assert doc["statistic"] == "mean" and doc["a"]["gpu_window_ns"] == sum(draft) / len(draft)  # the stall: 37 ms
    text = " ".join(CliRunner().invoke(cli, ["gap", str(EAGER), "--a", "draft", "--b", "draft_extend"]).output.split())
    assert "compared by medians per instance" in text and "per instance (median) more than draft_extend" in text


def test_diff_compares_medians_by_default() -> None:
    graphed = SAMPLES / "h200x2-builtin" / "graphed.parquet"
    old = [w for r in windows(read_run(graphed), "draft").values() for _, w in r]
    new = [w for r in windows(read_run(EAGER), "draft").values() for _, w in r]
    res = CliRunner().invoke(cli, ["diff", str(graphed), str(EAGER), "--phase", "draft", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (ph,) = doc["phases"]
    assert doc["statistic"] == ph["statistic"] == "median"
    assert ph["old_median_ns"] == nearest_rank(old, 0.5) and ph["new_median_ns"] == nearest_rank(new, 0.5)
    assert ph["delta_ns"] == nearest_rank(new, 0.5) - nearest_rank(old, 0.5)
    assert ph["new_mean_ns"] == sum(new) / len(new)
    text = " ".join(CliRunner().invoke(cli, ["diff", str(graphed), str(EAGER), "--phase", "draft"]).output.split())
    assert "draft: median per instance" in text and "median over" in text


def test_clock_note_only_where_no_unprofiled_timers(tmp_path: Path) -> None:
    """A run ingested from raw traces has no unprofiled timers: text and JSON say the figures are the
    profiled window's and the dilation is unknown; a capture with timers prints dilation lines instead."""
    shapes = SAMPLES / "sglang-shapes-h200x2"
    run = tmp_path / "ingested.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(shapes), "-o", str(run), "-q"])
    assert res.exit_code == 0, res.output
    text = CliRunner().invoke(cli, ["attribute", str(run)])
    assert text.exit_code == 0, text.output
    assert text.output.startswith("clock: every figure is from the profiled window"), text.output[:300]
    doc = json.loads(CliRunner().invoke(cli, ["attribute", str(run), "--json"]).stdout)
    assert doc["dilation"] == {} and any(n.startswith("clock: ") for n in doc["notes"])
    captured = CliRunner().invoke(cli, ["attribute", str(EAGER)])
    assert captured.exit_code == 0 and "clock: every figure" not in captured.output
    assert "profiler dilation: verify" in captured.output
    doc = json.loads(CliRunner().invoke(cli, ["attribute", str(EAGER), "--json"]).stdout)
    assert doc["dilation"]["verify"]["ratio"] > 1 and "notes" not in doc


def test_clock_note_in_host_mode_without_timers(tmp_path: Path) -> None:
    """Host mode says the same clock sentence when the run has no unprofiled timers (the 8-rank CPU
    capture with its timers taken out of the manifest), and not when it has them."""
    from tracekit.store import load_run, write_run

    run = load_run(CPU8)
    man = {**run.manifest, "ranks": {r: {k: v for k, v in sec.items() if k != "unprofiled"}
                                      for r, sec in run.manifest["ranks"].items()}}
    bare = tmp_path / "no-timers.parquet"
    write_run(run.events, bare, man)
    text = CliRunner().invoke(cli, ["attribute", str(bare)])
    assert text.exit_code == 0, text.output
    assert "host mode" in text.output and "clock: every figure is from the profiled window" in text.output
    doc = json.loads(CliRunner().invoke(cli, ["attribute", str(bare), "--json"]).stdout)
    assert doc["mode"] == "host" and any(n.startswith("clock: ") for n in doc["notes"])
    timed = json.loads(CliRunner().invoke(cli, ["attribute", str(CPU8), "--json"]).stdout)
    assert timed["mode"] == "host" and "notes" not in timed
