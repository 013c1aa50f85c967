"""Whole-trace attribution (analyzers.whole_trace) on a real capture with its phase ranges removed.

``samples/h200x2-builtin/graphed-rank-*.trace.json.gz`` (2 x H200) without any
user_annotation / gpu_user_annotation event: no phase is known, so each rank's GPU span
is one instance of phase ``trace``. The span is recomputed from the raw Kineto JSON by
``tests/kineto_reference.py`` (stdlib json, Decimal arithmetic).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_reference import load, rank_stats

from tracekit.cli import cli
from tracekit.ingest import ingest_traces
from tracekit.store import write_run

H200 = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"
BUCKET_ORDER_LEN = 12


@pytest.fixture(scope="module")
def no_phases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    d = tmp_path_factory.mktemp("noph")
    paths, spans = [], []
    for src in sorted(H200.glob("graphed-rank-*.trace.json.gz")):
        doc = json.loads(gzip.decompress(src.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if "user_annotation" not in str(e.get("cat", ""))]
        out = d / src.name.removesuffix(".gz")
        out.write_text(json.dumps(doc))
        paths.append(out)
        spans.append(rank_stats(load(out))["span_ns"])
    run = d / "run.parquet"
    ing = ingest_traces(paths)
    write_run(ing.events, run, ing.manifest)
    return run, spans


def test_whole_gpu_span_is_one_trace_instance_per_rank(no_phases: tuple[Path, list[int]]) -> None:
    run, spans = no_phases
    res = CliRunner().invoke(cli, ["attribute", str(run), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["whole_trace"] is True and "no phase ranges found" in doc["notes"][0]
    assert [p["phase"] for p in doc["phases"]] == ["trace", "trace"]
    for item, span in zip(doc["phases"], spans, strict=True):
        assert item["instances"] == 1 and item["gpu_window_ns"] == span
        assert sum(item["buckets_ns"].values()) == span  # exact integer sum
        assert item["graph_launches"] > 0 and item["gpu_events"] > 0
    text = CliRunner().invoke(cli, ["attribute", str(run)]).output
    assert "no phase ranges found" in " ".join(text.split()) and "phase 'trace'" in " ".join(text.split())


def test_a_named_phase_that_is_absent_is_still_an_error(no_phases: tuple[Path, list[int]]) -> None:
    res = CliRunner().invoke(cli, ["attribute", str(no_phases[0]), "--phase", "verify"])
    assert res.exit_code == 1 and "no phase or range name matches" in res.output
