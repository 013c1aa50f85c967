"""Issue 26's equality: for every committed sample and a fresh capture, the HTML report's numbers are the CLI's
(`attribute`, `gap`, `spec`, `ranks`, `diff` --json), both rendered from the one report object of
``analyzers.analyses``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

pytest.importorskip("plotly", reason="tracekit[report] not installed")

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
RUNS = sorted(SAMPLES.glob("*/*.parquet"))
PAIRS = [(SAMPLES / "h200x2-builtin" / "graphed.parquet", SAMPLES / "h200x2-builtin" / "eager.parquet"),
         (SAMPLES / "h200-transformers" / "base.parquet", SAMPLES / "h200-transformers" / "spec.parquet")]


def _cli(*args: str) -> tuple[int, Any]:
    res = CliRunner().invoke(cli, [*args, "--json"])
    return res.exit_code, (json.loads(res.stdout) if res.exit_code == 0 else res.output)


def _same(got: Any, *args: str) -> None:
    """The report's document equals the command's; a missing one is the command's error."""
    code, out = _cli(*args)
    if got.value is None:
        assert code == 1 and str(got.why) in out
    else:
        assert code == 0 and out == got.value, args


def _check_run(path: Path) -> None:
    from tracekit.render.report.collect import collect

    a, _, _ = collect(str(path))
    p = str(path)
    _same(a.attribute, "attribute", p, "--by", "cycle")
    _same(a.spec, "spec", p)
    _same(a.ranks, "ranks", p)
    if a.gap.value is not None:  # else the run lacks verify or decode: the report says so itself
        _same(a.gap, "gap", p)


@pytest.mark.parametrize("path", RUNS, ids=[str(p.relative_to(SAMPLES)) for p in RUNS])
def test_report_numbers_are_the_commands_on_every_sample(path: Path) -> None:
    _check_run(path)


@pytest.mark.parametrize(("old", "new"), PAIRS, ids=[p[1].parent.name for p in PAIRS])
def test_report_diff_is_the_commands(old: Path, new: Path) -> None:
    from tracekit.render.report.collect import collect

    a, b, diff = collect(str(new), b_path=str(old))  # report A --b-run B = tracekit diff B A
    assert b is not None
    _same(diff, "diff", str(old), str(new), "--phase", "all")
    if a.extra["gap_b_run"].value is not None:
        phase_b = a.extra["gap_b_run"].value["b"]["phase"]
        _same(a.extra["gap_b_run"], "gap", str(new), "--b-run", str(old), "--b", phase_b)


def test_report_numbers_are_the_commands_on_a_fresh_capture(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="tracekit[capture] not installed")
    from tracekit.collectors.capture import CaptureConfig, run_capture
    from tracekit.collectors.workload.config import make_config

    cc = CaptureConfig(out=str(tmp_path / "run.parquet"), world=2, cycles=3, warmup=2, device="cpu", timeout_s=240,
                       workload=make_config("tiny", batch_size=2, ctx_start=32), profile="full")
    res = run_capture(cc)
    _check_run(Path(res.out))
