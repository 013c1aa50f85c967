"""Every ``--json`` output is a declared, versioned document (tracekit.documents), listed in
docs/documents.md with its version and keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.documents import DOCUMENTS, document_type

REPO = Path(__file__).resolve().parents[1]
MAIN = REPO / "samples" / "h200x2-mainjob"
CPU = REPO / "samples" / "cpu8-builtin" / "run.parquet"

COMMANDS = {
    "info": ["info", f"{MAIN}/eager.parquet", "--json"],
    "attribute": ["attribute", f"{MAIN}/eager.parquet", "--json", "--by", "cycle"],
    "attribute-seq": ["attribute", f"{MAIN}/eager.parquet", "--json", "--by", "seq"],
    "attribute-host": ["attribute", str(CPU), "--json"],
    "gap": ["gap", f"{MAIN}/eager.parquet", "--b-run", f"{MAIN}/graphed.parquet", "--a", "verify",
            "--b", "verify", "--json", "--by", "rank"],
    "gap-host": ["gap", str(CPU), "--json"],
    "ranks": ["ranks", f"{MAIN}/eager.parquet", "--json"],
    "spec": ["spec", f"{MAIN}/eager.parquet", "--json"],
    "diff": ["diff", f"{MAIN}/graphed.parquet", f"{MAIN}/eager.parquet", "--json"],
    "sol-what-if": ["sol", "--model", str(REPO / "samples" / "sol" / "kimi-k2.5.config.json"), "--gpu", "H200",
                    "--tp", "8", "--tokens", "4", "--seq-len", "32768", "--json"],
}
LOGS = REPO / "samples" / "logs"


def _doc(args: list[str]) -> dict[str, object]:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)  # stdout: an old sample run adds a line on stderr
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_every_json_output_is_a_declared_document(case: str) -> None:
    doc = _doc(COMMANDS[case])
    assert list(doc)[:2] == ["document", "schema_version"]
    kind = document_type(doc)
    assert kind.name == case.split("-")[0]
    assert kind.problems(doc) == []


def test_validate_trace_document(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    res = CliRunner().invoke(cli, ["export", str(CPU), "-o", str(out), "--window", ":2ms"])
    assert res.exit_code == 0, res.output
    doc = _doc(["validate-trace", str(out), "--json"])
    assert document_type(doc).problems(doc) == [] and doc["document"] == "validate-trace"


def test_logs_document(tmp_path: Path) -> None:
    doc = _doc(["logs", str(LOGS / "sglang-0.5.9.log"), "-o", str(tmp_path / "r.parquet"), "--json"])
    assert document_type(doc).problems(doc) == [] and doc["document"] == "logs"


def test_docs_page_lists_every_document_and_version() -> None:
    page = (REPO / "docs" / "documents.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| (\d+) \|", page, re.M))
    assert rows == {d.name: str(d.version) for d in DOCUMENTS}
    for d in DOCUMENTS:
        section = page.split(f"## `{d.name}`", 1)[1].split("\n## ", 1)[0]
        for key in (*d.keys, *d.optional):
            assert f"`{key}`" in section, (d.name, key)
