"""Real multi-rank GPU traces under samples/ (captured on the GPU machine by this project):
ingest them and check per-rank kernel counts, busy and span against an independent reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_reference import load, rank_stats

from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _trace_sets() -> list[tuple[Path, str]]:
    """(directory, window prefix) of every sample set with >= 2 rank traces, e.g. eager-rank-0000{0,1}."""
    sets: dict[tuple[Path, str], int] = {}
    for p in sorted(SAMPLES.rglob("*-rank-*.trace.json*")):
        sets[(p.parent, p.name.split("-rank-")[0])] = sets.get((p.parent, p.name.split("-rank-")[0]), 0) + 1
    return [k for k, n in sets.items() if n >= 2]


SETS = _trace_sets()


def test_the_committed_trace_sets_are_found() -> None:
    found = {(str(d.relative_to(SAMPLES)), prefix) for d, prefix in SETS}
    assert {("h200x2-builtin", "eager"), ("h200x2-builtin", "graphed")} <= found


@pytest.mark.parametrize(("trace_dir", "prefix"), SETS, ids=lambda v: str(v.relative_to(SAMPLES)) if isinstance(v, Path) else v)
def test_real_sample_counts_busy_span(tmp_path: Path, trace_dir: Path, prefix: str) -> None:
    files = sorted(trace_dir.glob(f"{prefix}-rank-*.trace.json*"))
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", *map(str, files), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(CliRunner().invoke(cli, ["info", str(out), "--json"]).output)
    by_rank = {r["rank"]: r for r in doc["ranks"]}
    assert sorted(by_rank) == list(range(len(files)))
    for f in files:
        d = load(f)
        rank = int(f.name.split("-rank-")[1].split(".")[0])
        dist = (d.get("distributedInfo") or {}).get("rank")
        assert dist in (None, rank)
        want = rank_stats(d)
        got = by_rank[rank]
        assert want["kernels"] > 0
        for key in ("kernels", "kernel_ns", "busy_ns", "span_ns", "comm_ns"):
            assert got[key] == want[key], (f.name, key, got[key], want[key])


def test_sample_directory_walk_skips_non_trace_json(tmp_path: Path) -> None:
    assert SETS, "the committed sample traces are missing"
    trace_dir, prefix = SETS[0]
    # a directory holding one window of traces next to a bench.json: the JSON is skipped and said
    d = tmp_path / "w"
    d.mkdir()
    for f in trace_dir.glob(f"{prefix}-rank-*.trace.json*"):
        (d / f.name).write_bytes(f.read_bytes())
    (d / "bench.json").write_text('{"device": "H200"}')
    res = CliRunner().invoke(cli, ["ingest", str(d), "-o", str(tmp_path / "run.parquet")])
    assert res.exit_code == 0, res.output
    assert "bench.json" in res.output and "not a trace" in res.output
