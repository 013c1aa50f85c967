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


def test_format_rank_list_is_parse_rank_lists_inverse() -> None:
    from tracekit.ranklist import format_rank_list, parse_rank_list, rank_noun, ranks_by_reason

    assert format_rank_list(range(1, 128)) == "1-127"
    assert format_rank_list([7, 3, 0, 1, 2, 3]) == "0-3,7"
    assert format_rank_list(["5"]) == "5" and format_rank_list([]) == ""
    for ranks in ([0], [0, 2, 4], [*range(64), 100, 101, 127]):
        assert parse_rank_list(format_rank_list(ranks)) == tuple(ranks)
    assert rank_noun([4]) == "rank 4" and rank_noun(["1", "2"]) == "ranks 1-2"
    assert ranks_by_reason({"2": "gone", "1": "gone", "5": "killed", "3": "gone"}) == [
        ("ranks 1-3", "gone"), ("rank 5", "killed")]


def test_a_partial_set_names_its_missing_ranks_as_ranges() -> None:
    from tracekit.render.run_state import missing_line

    why = "no trace for this rank among the inputs"
    line = missing_line("run.parquet", {"missing_ranks": {str(r): why for r in range(1, 128)}})
    assert line == f"run.parquet: partial run: ranks 1-127 missing (ranks 1-127: {why})"
