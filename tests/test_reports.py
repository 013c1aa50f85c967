"""The typed reports (analyzers/reports.py): one object per analysis that the CLI, its --json, the HTML
report and ``tracekit.Run`` all read; the same numbers whichever way they are asked for."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.analyzers.reports import (
    AttributionReport,
    DiffReport,
    GapReport,
    Mode,
    RanksReport,
    SpecReport,
)
from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
EAGER = SAMPLES / "h200x2-mainjob" / "eager.parquet"
GRAPHED = SAMPLES / "h200x2-mainjob" / "graphed.parquet"
CPU = SAMPLES / "cpu8-builtin" / "run.parquet"
TIMING = SAMPLES / "h200-lite" / "timing-on.parquet"


def _cli_json(*args: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, Any] = json.loads(res.stdout)
    return doc


def test_reports_are_frozen() -> None:
    rep = tracekit.Run(str(EAGER)).attribute("verify")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rep.mode = Mode.HOST  # type: ignore[misc]


@pytest.mark.parametrize(("path", "mode"), [(EAGER, Mode.GPU), (CPU, Mode.HOST), (TIMING, Mode.TIMING)])
def test_run_facade_attribute_is_the_commands_document(path: Path, mode: Mode) -> None:
    from tracekit.render.attribute_doc import document

    rep = tracekit.Run(str(path)).attribute()
    assert isinstance(rep, AttributionReport) and rep.mode is mode
    assert document(rep, "rank", str(path)) == _cli_json("attribute", str(path))


def test_run_facade_other_analyses_are_the_commands_documents() -> None:
    from tracekit.render import diff as render_diff
    from tracekit.render import gap as render_gap
    from tracekit.render import ranks as render_ranks
    from tracekit.render import spec as render_spec

    eager, graphed = tracekit.Run(str(EAGER)), tracekit.Run(str(GRAPHED))
    gap = eager.gap()
    assert isinstance(gap, GapReport) and gap.timing["timing_source"] == "unprofiled"
    assert render_gap.document(gap, str(EAGER), str(EAGER)) == _cli_json("gap", str(EAGER))
    spec = eager.spec()
    assert isinstance(spec, SpecReport)
    assert render_spec.to_json(spec) == _cli_json("spec", str(EAGER))
    diff = graphed.diff(eager)
    assert isinstance(diff, DiffReport) and diff.phases.get_column("delta_ns")[0] > 0
    assert render_diff.to_json(diff, str(GRAPHED), str(EAGER)) == _cli_json("diff", str(GRAPHED), str(EAGER))
    ranks = eager.ranks()
    assert isinstance(ranks, RanksReport)
    from tracekit.analyzers.rank_summary import int_hosts

    assert render_ranks.to_json(ranks, int_hosts(eager.manifest)) == _cli_json("ranks", str(EAGER))


def test_run_facade_names_the_file_of_an_error(tmp_path: Path) -> None:
    with pytest.raises(tracekit.TracekitError) as err:
        tracekit.Run(str(tmp_path / "nope.parquet")).attribute()
    assert "nope.parquet" in err.value.one_line()


def test_html_report_reads_the_same_reports_as_the_cli() -> None:
    """The report's spec and gap are the commands' (it once left out the manifest: a profiled break-even of
    16.63 tokens/cycle beside the CLI's unprofiled 8.43, and "no unprofiled timers" beside its facts table)."""
    pytest.importorskip("plotly", reason="tracekit[report] not installed")
    from tracekit.render.report.collect import collect

    a, _, _ = collect(str(EAGER))
    assert a.spec.value == _cli_json("spec", str(EAGER))
    assert a.gap.value == _cli_json("gap", str(EAGER))
    assert a.ranks.value == _cli_json("ranks", str(EAGER))
    assert a.attribute.value == _cli_json("attribute", str(EAGER), "--by", "cycle")
    be = a.spec.value["buckets"][0]["break_even_tokens"]
    assert be == pytest.approx(8.43, abs=0.01) and a.spec.value["buckets"][0]["timing_source"] == "unprofiled"


def test_import_tracekit_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, tracekit; tracekit.Run; "
            "print(sorted(m for m in ('torch', 'sglang', 'vllm', 'transformers', 'dask', 'nvtx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# --- the new user's defects (issue 26): each test fails on the code before it -------------------------------


def _text(*args: str) -> str:
    """The command's text output, lines joined (the console wraps long lines)."""
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


def test_diff_mix_shift_is_zero_when_both_runs_have_the_same_mix() -> None:
    """graphed -> eager on the 2x H200 samples: the same sequence-length mix, so the mix explains nothing
    (it once said -1.14 ms: a weighted mean of bucket medians against an overall median)."""
    old, new = tracekit.Run(str(GRAPHED)), tracekit.Run(str(EAGER))
    for stat in ("median", "mean"):
        ph = old.diff(new, stat=stat).phases.row(0, named=True)
        assert ph["matched_new_share"] == 1.0 and ph["mix_shift_ns"] == 0.0
        assert ph["delta_ns"] == pytest.approx(ph["matched_delta_ns"] + ph["mix_shift_ns"] + ph["mix_residual_ns"])
    text = " ".join(_text("diff", str(GRAPHED), str(EAGER)).split())
    assert "the shift of the mix explains ±0 ns" in text


def test_diff_buckets_speak_attributes_labels() -> None:
    text = " ".join(_text("diff", str(GRAPHED), str(EAGER)).split())
    assert "+17.88 ms launch overhead (" in text and "allreduce (exposed) (" in text
    assert "launch_overhead" not in text and "│ moe " not in text


def test_host_gap_speaks_host_labels() -> None:
    text = _text("gap", str(CPU))
    assert "\n  allreduce:" not in text and "\n  comm:" not in text
    assert "allreduce (call + wait):" in text


def test_instances_outside_any_cycle_say_no_cycle(tmp_path: Path) -> None:
    out = tmp_path / "sgl.parquet"
    traces = sorted(str(p) for p in (SAMPLES / "sglang-shapes-h200x2").glob("*.json.gz"))
    assert CliRunner().invoke(cli, ["ingest", *traces, "-o", str(out)]).exit_code == 0
    text = _text("attribute", str(out))
    assert "cycle -1" not in text and "no cycle" in text


def test_spec_words_for_a_cycle_shorter_than_a_decode_step_and_a_large_gain() -> None:
    from tracekit.render.spec import break_even_line, speed_words

    row = {"break_even_tokens": 0.16, "decode_step_ns": 100e6, "decode_tps_per_seq": 10.0, "cycle_ns": 16e6,
           "tokens_per_cycle": 2.4}
    line = break_even_line(row)
    assert "-0.84" not in line and "shorter than one decode step" in line
    assert speed_words(15.24) == "15.2x as fast as" and "%" not in speed_words(15.24)
    assert speed_words(0.27) == "73% slower than"


def test_diff_does_not_put_more_than_the_phase_on_an_extrapolated_fit() -> None:
    import polars as pl

    from tracekit.render.diff import explanation

    rep = tracekit.Run(str(GRAPHED)).diff(tracekit.Run(str(EAGER)))
    phases = rep.phases.with_columns(pl.lit(-1542.07e6).alias("fit_shift_ns"), pl.lit(True).alias("extrapolated"))
    text = "\n".join(explanation(dataclasses.replace(rep, phases=phases)))
    assert "more than the whole phase" in text and "puts -1542.07 ms" not in text


def test_one_quantile_rule_nearest_rank() -> None:
    """The report's cycle plot and the CLI use one median: the ceil(n/2)-th smallest (polars' "nearest" took
    another instance of an even count)."""
    import polars as pl

    from tracekit.analyzers.composition import cycle_composition
    from tracekit.analyzers.robust import nearest_rank
    from tracekit.analyzers.spec import cycles
    from tracekit.analyzers.timing_view import timing_by_rank, timing_instances

    ev = tracekit.Run(str(EAGER)).events
    comp = cycle_composition(ev).filter(pl.col("rank") == 0).row(0, named=True)
    cyc = cycles(ev).filter(pl.col("rank") == 0).get_column("cycle_ns").to_list()
    assert len(cyc) % 2 == 0 and comp["cycle_median_ns"] == nearest_rank(cyc, 0.5)
    inst = timing_instances(tracekit.Run(str(TIMING)).events)
    row = timing_by_rank(inst).row(0, named=True)
    host = inst.filter((pl.col("phase") == row["phase"]) & (pl.col("rank") == row["rank"])).get_column("host_ns")
    assert row["median_host_ns"] == nearest_rank(host.to_list(), 0.5)


def test_html_report_diff_gap_and_plots_agree_with_the_cli() -> None:
    """``report A --b-run B``: the diff is ``tracekit diff B A`` (deltas A minus B, as the gap's), the gap waterfall
    plots the gap's statistic and ends on A's own value, A's and B's bucket plots share each phase's y-axis."""
    pytest.importorskip("plotly", reason="tracekit[report] not installed")
    from tracekit.render.report.collect import collect
    from tracekit.render.report.plots_comm import gap_plot
    from tracekit.render.report.plots_time import bucket_plots

    a, b, diff = collect(str(EAGER), b_path=str(GRAPHED))
    assert b is not None and diff.value == _cli_json("diff", str(GRAPHED), str(EAGER), "--phase", "all")
    doc = a.gap.value
    assert doc is not None
    fig = gap_plot(a.gap, "gap", "verify vs decode").figure
    assert fig is not None
    w = fig.data[0]
    assert "median per instance" in fig.layout.title.text
    assert w.measure[-1] == "absolute" and w.customdata[-1] == doc["a"]["gpu_window_ns"]
    assert sum(w.customdata[1:-1]) == pytest.approx(doc["total_delta_ns"], abs=1.0)
    bfig = bucket_plots(a, b)[0].figure
    assert bfig is not None
    n = len({p["phase"] for p in a.attribute.value["phases"]})  # type: ignore[index]
    assert all(bfig.layout["yaxis" if c == 1 else f"yaxis{c}"].matches == f"y{n + c}" for c in range(1, n + 1))


def test_skew_heat_map_is_clipped_at_p99_and_names_the_outlier() -> None:
    pytest.importorskip("plotly", reason="tracekit[report] not installed")
    import polars as pl

    from tracekit.render.report.collect import Got, RunDocs
    from tracekit.render.report.plots_comm import skew_plot

    waits = [1_000 * (i % 7 + 1) for i in range(200)] + [347_000_000]
    arr = pl.DataFrame({"key": [f"c{i}" for i in range(201)], "rank": [0] * 201, "wait_ns": waits,
                        "start_ns": list(range(201)), "phase": ["verify"] * 201})
    side = RunDocs("run.parquet", {}, {}, Got(None, "-"), Got(None, "-"), Got(None, "-"),
                   Got({"ranks": [], "summary": ["no straggler"]}), arr, Got(None, "-"))
    fig = skew_plot(side).figure
    assert fig is not None and fig.data[0].zmax == 7.0
    assert "347,000.0 µs on rank 0 at collective #200" in fig.layout.title.text


def test_kernel_families_are_compared_in_the_buckets_statistic() -> None:
    """gap and diff once gave bucket deltas as medians and kernel-family deltas as means (+696.8 µs allreduce
    beside +7.01 ms of its NCCL kernel): both now speak the statistic of the comparison."""
    import polars as pl

    from tracekit.analyzers.robust import nearest_rank

    run = tracekit.Run(str(EAGER))
    gap = run.gap()
    fam = gap.kernels.filter(pl.col("family").str.starts_with("ncclDevKernel_AllReduce_Sum_bf16")).row(0, named=True)
    inst = run.attribute("verify").instances
    ev = run.events.filter(pl.col("phase_id").is_in(inst.get_column("phase_id").implode())
                           & pl.col("name").str.contains("AllReduce_Sum_bf16"))
    per = ev.group_by("phase_id").agg(pl.col("dur_ns").sum()).get_column("dur_ns").to_list()
    assert fam["a_per_instance_ns"] == nearest_rank(per + [0] * (inst.height - len(per)), 0.5)
    bucket = gap.buckets.filter(pl.col("bucket") == "allreduce").row(0, named=True)
    assert abs(fam["delta_ns"] - bucket["delta_ns"]) < 0.1 * bucket["delta_ns"]  # one answer to "was it allreduce?"
    assert "median time per instance +1.41 ms" in " ".join(_text("gap", str(EAGER)).split())
    diff = tracekit.Run(str(GRAPHED)).diff(run)
    k = diff.kernels.filter(pl.col("family").str.starts_with("ncclDevKernel_AllReduce_Sum_bf16")).row(0, named=True)
    assert k["delta_per_instance_ns"] < 2e6  # the mean was +7.01 ms, moved by one stalled instance


def test_every_decomposition_of_a_change_has_its_unprofiled_estimate() -> None:
    """"Of the 9 ms, how much is allreduce" on both clocks: gap and diff give the profiled bucket deltas and their
    unprofiled estimate, which adds up to the capture timers' change (once only attribute had one)."""
    eager, graphed = tracekit.Run(str(EAGER)), tracekit.Run(str(GRAPHED))
    gap = eager.gap()
    assert gap.estimate is not None and gap.estimate.window_delta_ns == round(gap.timing["delta_ns"])
    assert sum(gap.estimate.delta_ns.values()) == gap.estimate.window_delta_ns
    doc = _cli_json("gap", str(EAGER))
    assert doc["unprofiled_estimate"]["estimate"] is True
    assert doc["unprofiled_estimate"]["delta_ns"]["launch_overhead"] == gap.estimate.delta_ns["launch_overhead"]
    diff = graphed.diff(eager)
    est = diff.estimates["verify"]
    assert est.window_delta_ns == -round(diff.timing["verify"]["delta_ns"])  # timing: a = old; estimate: a = new
    assert _cli_json("diff", str(GRAPHED), str(EAGER))["unprofiled_estimate"]["verify"]["window_delta_ns"] == 12_266_944
    for args in (("gap", str(EAGER)), ("diff", str(GRAPHED), str(EAGER))):
        assert "delta (unprofiled ESTIMATE)" in _text(*args)


def test_one_glossary_of_a_phases_times() -> None:
    """Six verify figures for one run, each named once: the glossary table of attribute says which is which."""
    text = _text("attribute", str(EAGER))
    assert text.count("Times of each phase") == 1 and "[U] unprofiled timer" in text
    flat = " ".join(text.split())
    assert "where the GPU window [W] went" in flat and "unprofiled [U]" in flat and "profiled [P]" in flat
    row = next(line for line in text.splitlines() if line.startswith("│ verify"))
    for figure in ("15.324 ms", "28.528 ms", "25.582 ms", "37.936 ms"):  # [U], [P], [W] median, [W] mean
        assert figure in row
