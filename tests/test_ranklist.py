"""One rank-list syntax for every command (tracekit.ranklist)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.ranklist import parse_rank_list


def test_syntax() -> None:
    assert parse_rank_list("all") is None and parse_rank_list(" ALL ") is None
    assert parse_rank_list("3") == (3,)
    assert parse_rank_list("5,0,5") == (0, 5)
    assert parse_rank_list("0-3,7") == (0, 1, 2, 3, 7)
    for bad in ("", "0,x", "-1", "3-1", "1-"):
        with pytest.raises(ValueError):
            parse_rank_list(bad)


def test_capture_and_export_read_the_same_ranges(tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    # a range is read by capture too: 0-3 is refused for a 2-rank world (not as bad syntax)
    r = CliRunner().invoke(cli, ["capture", "--device", "cpu", "--world", "2", "--ranks", "0-3", "-o", str(out)])
    assert r.exit_code == 2 and "outside 0..1" in r.output, r.output
    bad = CliRunner().invoke(cli, ["capture", "--device", "cpu", "--ranks", "0,x", "-o", str(out)])
    assert bad.exit_code == 2 and "not a rank or rank range: 'x'" in bad.output
    sample = Path(__file__).resolve().parents[1] / "samples" / "cpu8-builtin" / "run.parquet"
    e = CliRunner().invoke(cli, ["export", str(sample), "-o", str(tmp_path / "t.json"), "--ranks", "all",
                                 "--window", ":1ms"])
    assert e.exit_code == 0, e.output
    e2 = CliRunner().invoke(cli, ["export", str(sample), "-o", str(tmp_path / "t.json"), "--ranks", "0,x"])
    assert e2.exit_code == 2 and "not a rank or rank range: 'x'" in e2.output
