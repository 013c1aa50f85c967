"""Issue 29: ``tracekit report`` rank by rank (``render.report.collect_ranked``, ``--executor``).

The page's embedded documents (``_documents``: info, attribute, gap, spec, ranks, and with ``--b-run`` the
diff and A's gap against B) and the plots drawn must be the whole-run path's: on a 64-rank set generated
at test time by ``bench/scale_gen.py`` from the real 2-rank H200 traces (ingested as a sharded run,
merged into one file), on the committed multi-rank sample pairs read rank by rank from one file, through
the CLI (progress per rank) and through a Dask LocalCluster of 2 workers.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.executor import LocalExecutor

pytest.importorskip("plotly", reason="tracekit[report] not installed")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
needs_dask = pytest.mark.skipif(importlib.util.find_spec("distributed") is None,
                                reason="Dask is the optional extra tracekit[dask]: not installed")


@pytest.fixture(scope="module")
def set64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks (bench/scale_gen.py, the graphed source), a sharded run ``run/`` and ``run.parquet``."""
    d = tmp_path_factory.mktemp("report64")
    gen = subprocess.run([sys.executable, str(REPO / "bench" / "scale_gen.py"), str(d), "64", "--source", "graphed"],
                         capture_output=True, text=True, timeout=600)
    assert gen.returncode == 0, gen.stderr
    r = CliRunner().invoke(cli, ["ingest", str(d / "64"), "-o", str(d / "run") + "/", "-q"])
    assert r.exit_code == 0, r.output
    m = CliRunner().invoke(cli, ["merge", str(d / "run"), "-o", str(d / "run.parquet")])
    assert m.exit_code == 0, m.output
    return d


def _docs(path: str, b_path: str | None = None, *, ranked: bool, names: dict[str, str]) -> dict[str, Any]:
    """``_documents`` of ``collect`` (rank by rank or whole), the runs' paths replaced by ``names``."""
    from tracekit.render.report import _documents
    from tracekit.render.report.collect import collect

    whole: list[str] = []
    got = collect(path, b_path=b_path, executor=LocalExecutor() if ranked else None, whole=whole.append)
    assert not whole, whole  # rank by rank applied
    text = json.dumps(_documents(*got))
    for p, name in names.items():
        text = text.replace(p, name)
    a = got[0]
    return {"docs": json.loads(text), "arrivals": a.arrivals.to_dicts(),
            "composition": None if a.composition.value is None else a.composition.value.to_dicts()}


def test_64_ranks_documents_equal_the_whole_run(set64: Path) -> None:
    run, one = str(set64 / "run"), str(set64 / "run.parquet")
    got = _docs(run, ranked=True, names={run: "RUN"})
    want = _docs(one, ranked=False, names={one: "RUN"})
    docs = got["docs"]["a"]
    assert docs["missing"] == {} and all(docs[k] is not None for k in ("info", "attribute", "gap", "spec", "ranks"))
    assert docs["info"]["events"] == 402_624 and len(docs["info"]["ranks"]) == 64
    assert len(got["arrivals"]) > 0 and got["composition"]
    assert got == want


def test_64_ranks_against_a_b_run_equal_the_whole_run(set64: Path) -> None:
    """--b-run: B's documents, the diff and A's gap against B (the run against itself)."""
    run, one = str(set64 / "run"), str(set64 / "run.parquet")
    got = _docs(run, run, ranked=True, names={run: "RUN"})
    want = _docs(one, one, ranked=False, names={one: "RUN"})
    assert got["docs"]["diff"] is not None and got["docs"]["gap_b_run"] is not None
    assert got == want


PAIRS = [(SAMPLES / "h200x2-builtin" / "graphed.parquet", SAMPLES / "h200x2-builtin" / "eager.parquet"),
         (SAMPLES / "h200-transformers" / "spec.parquet", SAMPLES / "h200-transformers" / "base.parquet")]


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[p[0].parent.name for p in PAIRS])
def test_sample_pairs_read_rank_by_rank_equal_the_whole_run(a: Path, b: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed pairs read rank by rank from one file (TRACEKIT_ANALYSIS_WHOLE_MB=0); the transformers
    pair's B runs without speculation: spec's decode step comes from B's phase rows."""
    names = {str(a): "A", str(b): "B"}
    want = _docs(str(a), str(b), ranked=False, names=names)
    monkeypatch.setenv("TRACEKIT_ANALYSIS_WHOLE_MB", "0")
    got = _docs(str(a), str(b), ranked=True, names=names)
    assert got == want




def test_cli_report_of_shards_draws_what_the_whole_run_draws(set64: Path) -> None:
    from tracekit.render.report import build_report

    got = build_report(str(set64 / "run"), str(set64 / "ranked.html"), executor=LocalExecutor())
    want = build_report(str(set64 / "run.parquet"), str(set64 / "whole.html"))
    assert got.drawn == want.drawn and got.missing == want.missing and len(got.drawn) == 6  # SOL: no model config
    res = subprocess.run([sys.executable, "-m", "tracekit", "report", "run", "-o", "cli.html"], cwd=set64,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "report: pass 1 (collectives, phases): rank 63 done, 64/64" in res.stderr  # progress, per rank
    assert "pass 2 (per-rank tables): rank 63 done, 64/64" in res.stderr
    assert (set64 / "cli.html").stat().st_size > 0


@needs_dask
def test_dask_local_documents_equal_the_whole_run(set64: Path) -> None:
    from tracekit.executor import open_executor
    from tracekit.render.report import _documents
    from tracekit.render.report.collect import collect

    one = str(set64 / "run.parquet")
    ex = open_executor("dask-local:2")
    try:
        got = collect(one, executor=ex, kind="dask-local")  # any executor but local: rank by rank
    finally:
        ex.close()
    assert json.dumps(_documents(*got)) == json.dumps(_documents(*collect(one)))
