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
    assert render_ranks.to_json(ranks) == _cli_json("ranks", str(EAGER))


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
