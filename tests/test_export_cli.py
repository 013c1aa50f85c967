"""tracekit export / validate-trace on the command line: exit codes and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from export_data import synth_run

from tracekit.cli import cli

pytest.importorskip("perfetto")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_run(tmp_path_factory.mktemp("run"), ranks=2, cycles=3)


def test_export_then_validate(run: Path, tmp_path: Path) -> None:
    r = CliRunner()
    out = tmp_path / "v.pftrace"
    res = r.invoke(cli, ["export", str(run), "-o", str(out), "--phase", "verify", "--cycles", "1-2", "--ranks", "0,1",
                         "--flows", "all"])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "ranks 0,1" in res.output and "ui.perfetto.dev" in res.output
    res = r.invoke(cli, ["validate-trace", str(out)])
    assert res.exit_code == 0, res.output
    assert res.output.strip().endswith(": OK")
    res = r.invoke(cli, ["export", str(run), "-o", str(tmp_path / "w.json.gz"), "--window", "0:100us"])
    assert res.exit_code == 0, res.output
    assert r.invoke(cli, ["validate-trace", str(tmp_path / "w.json.gz"), "--json"]).exit_code == 0


def test_bad_trace_exits_1_with_problem_lines(tmp_path: Path) -> None:
    import json

    bad = tmp_path / "b.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "f", "bp": "e", "id": 3, "pid": 1, "tid": 1, "ts": 1.5}]}))
    res = CliRunner().invoke(cli, ["validate-trace", str(bad)])
    assert res.exit_code == 1
    assert "flow 3: 0 start(s), 1 end(s)" in res.output


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--window", "5s:"], 1, "no events in the selection"),
        (["--phase", "prefill"], 1, "no phase 'prefill' instances"),
        (["--ranks", "4"], 1, "rank(s) 4 not in the run"),
        (["--cycles", "1-2"], 2, "--cycles needs --phase"),
        (["--phase", "verify", "--cycles", "3-1"], 2, "empty cycle range"),
        (["--window", "9:3"], 2, "is empty"),
        (["--flows", "arrows"], 2, "unknown flow kind"),
    ],
)
def test_export_errors(run: Path, tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(tmp_path / "x.pftrace"), *args])
    assert res.exit_code == code, res.output
    assert needle in res.output
    if code == 1:
        assert res.output.count("\n") == 1 and res.output.startswith("tracekit: error: ")
        assert "Traceback" not in res.output


def test_unknown_suffix_and_missing_input(run: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["export", str(run), "-o", str(tmp_path / "x.txt")])
    assert res.exit_code == 2 and "cannot tell the format" in res.output
    res = CliRunner().invoke(cli, ["export", str(tmp_path / "none.parquet"), "-o", str(tmp_path / "x.pftrace")])
    assert res.exit_code == 1 and "none.parquet" in res.output
    res = CliRunner().invoke(cli, ["validate-trace", str(run)])
    assert res.exit_code == 1 and "neither a Perfetto protobuf trace nor Chrome JSON" in res.output
