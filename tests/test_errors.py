"""Typed errors: file, rank and side are data; the one line is composed by the renderer."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from forensic_frames import Spec, build, manifest

from tracekit.cli import cli
from tracekit.errors import AnalysisError, EmptyTraceError, side_path
from tracekit.render.errors import error_line
from tracekit.store import write_run


def test_one_line_names_file_and_rank_never_the_side() -> None:
    exc = AnalysisError("no verify instances", rank=3, side="B")
    assert error_line(exc) == "rank 3: no verify instances"
    located = exc.located(path="b.parquet", rank=7)
    assert str(located) == "b.parquet: rank 3: no verify instances"  # known rank kept
    assert located.side == "B" and exc.path is None  # a copy; the original is unchanged
    assert isinstance(EmptyTraceError("x").located(path="p"), EmptyTraceError)


def test_side_path_picks_the_file_of_the_side() -> None:
    assert side_path(AnalysisError("m", side="B"), "a", "b") == "b"
    assert side_path(AnalysisError("m", side="B"), "a", None) == "a"  # B came from A's run
    assert side_path(AnalysisError("m", side="A"), "a", "b") == "a"
    assert side_path(AnalysisError("m"), "a", "b", both="a, b") == "a, b"


def test_diff_names_the_run_that_lacks_the_phase(tmp_path: Path) -> None:
    old = write_run(build(Spec(ranks=1, cycles=2)), tmp_path / "old.parquet", manifest(1))
    new = write_run(build(Spec(ranks=1, cycles=0, decode_steps=3)), tmp_path / "new.parquet", manifest(1))
    res = CliRunner().invoke(cli, ["diff", str(old), str(new), "--phase", "verify"])
    line = res.output.strip()
    assert res.exit_code == 1 and line.startswith(f"tracekit: error: {new}: "), line
    assert "new run" not in line and "\n" not in line
