"""Graphed labels checked against the launches, on real GPU traces.

``samples/sglang-shapes-h200x2`` (2 x H200): the verify spans carry the modelled
``graphed`` fact (batch size <= 8) but every kernel was launched eagerly, so each of its
12 instances is flagged. ``samples/h200x2-builtin/graphed.parquet``: real CUDA graphs,
labels right, nothing flagged; relabelled eager by hand, the graphed phases are flagged
the other way round.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from tracekit.analyzers.attribution import attribute_instances, prepare
from tracekit.cli import cli
from tracekit.store import read_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def test_sglang_shapes_verify_labelled_graphed_but_launched_eager(tmp_path: Path) -> None:
    run = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "sglang-shapes-h200x2"), "-o", str(run)])
    assert res.exit_code == 0, res.output
    doc = json.loads(CliRunner().invoke(cli, ["attribute", str(run), "--json"]).stdout)
    verify = next(p for p in doc["all_ranks"] if p["phase"] == "verify")
    assert verify["graphed_label_conflicts"] == verify["instances"] == verify["graphed_instances"] == 12
    assert verify["graph_launches"] == 0 and verify["eager_launches"] > 0
    for p in doc["phases"]:
        assert p["graphed_label_conflicts"] == (p["instances"] if p["phase"] == "verify" else 0)
    text = " ".join(CliRunner().invoke(cli, ["attribute", str(run), "--phase", "verify"]).output.split())
    assert "label check: verify is labelled graphed in 12/12 instances, but 12 of its 12 instances issued eager" in text


def test_real_graphs_pass_and_a_wrong_eager_label_is_flagged() -> None:
    ev = read_run(SAMPLES / "h200x2-builtin" / "graphed.parquet")
    inst = attribute_instances(prepare(ev)[0])
    assert inst.get_column("graphed_label_conflict").sum() == 0
    graphed = inst.filter(pl.col("graphed") & (pl.col("eager_launches") == 0) & (pl.col("graph_launches") > 0))
    assert graphed.height > 0
    wrong = ev.with_columns(
        pl.when(pl.col("phase_id").is_in(graphed.get_column("phase_id").implode()) & (pl.col("kind") == "range"))
        .then(False).otherwise(pl.col("graphed")).alias("graphed")
    )
    flagged = attribute_instances(prepare(wrong)[0]).filter(pl.col("graphed_label_conflict"))
    assert sorted(flagged.get_column("phase_id").to_list()) == sorted(graphed.get_column("phase_id").to_list())
