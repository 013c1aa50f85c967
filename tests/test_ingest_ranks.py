"""Rank resolution: distributedInfo, SGLang file names, stage files, merged traces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from kineto_synth import dumps, gpu_rank

from tracekit.errors import RankError
from tracekit.ingest import ingest_traces
from tracekit.ingest.ranks import hint_from_name


@pytest.mark.parametrize(
    ("name", "tp", "dp", "pp", "rank", "stage"),
    [
        ("1733-TP-3.trace.json.gz", 3, None, None, None, None),
        ("prof-1733-TP-1-DP-0-PP-2-EP-1-DECODE.trace.json.gz", 1, 0, 2, None, "DECODE"),
        ("1733-TP-0-EXTEND.trace.json.gz", 0, None, None, None, "EXTEND"),
        ("trace_rank-5.json", None, None, None, 5, None),
        ("rank3.pt.trace.json", None, None, None, 3, None),
        ("host_worker12.1700.pt.trace.json.gz", None, None, None, 12, None),
        ("TP01-DP00", 1, 0, None, None, None),  # merge_profiles label
        ("profile.json", None, None, None, None, None),
    ],
)
def test_hint_from_name(name: str, tp: int | None, dp: int | None, pp: int | None, rank: int | None, stage: str | None) -> None:
    h = hint_from_name(name)
    assert (h.tp, h.dp, h.pp, h.rank, h.stage) == (tp, dp, pp, rank, stage)


def _no_dist(rank: int, world: int = 2) -> dict[str, object]:
    doc = gpu_rank(rank, world).doc()
    del doc["distributedInfo"]
    return doc


def test_sglang_names_without_distributed_info(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"1733-TP-{r}.trace.json").write_text(dumps(_no_dist(r)))
    run = ingest_traces([tmp_path])
    assert run.ranks == [0, 1]
    assert run.manifest["ranks"]["1"]["rank_source"] == "file name"


def test_distributed_info_beats_the_name(tmp_path: Path) -> None:
    gpu_rank(1).write(tmp_path / "1733-TP-0.trace.json")
    gpu_rank(0).write(tmp_path / "1733-TP-1.trace.json")
    run = ingest_traces([tmp_path])
    assert run.manifest["ranks"]["0"]["sources"] == [str(tmp_path / "1733-TP-1.trace.json")]


def test_sglang_stage_files_combine_into_one_rank(tmp_path: Path) -> None:
    for r in (0, 1):
        for stage, skew in (("EXTEND", 0), ("DECODE", 10_000_000)):
            gpu_rank(r, skew=skew).write(tmp_path / f"1733-TP-{r}-{stage}.trace.json.gz")
    run = ingest_traces([tmp_path])
    assert run.ranks == [0, 1]
    assert sorted(run.manifest["ranks"]["0"]["stages"]) == ["DECODE", "EXTEND"]
    k = run.events.filter((pl.col("rank") == 0) & (pl.col("kind") == "kernel"))
    assert k.height == 2 * 9


def test_same_stage_twice_is_a_duplicate(tmp_path: Path) -> None:
    gpu_rank(0).write(tmp_path / "a-TP-0-DECODE.trace.json")
    gpu_rank(0).write(tmp_path / "b-TP-0-DECODE.trace.json")
    gpu_rank(1).write(tmp_path / "a-TP-1-DECODE.trace.json")
    with pytest.raises(RankError, match="duplicate rank 0"):
        ingest_traces([tmp_path])


def test_several_files_without_any_rank_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(dumps(_no_dist(0)))
    (tmp_path / "b.json").write_text(dumps(_no_dist(1)))
    with pytest.raises(RankError, match="cannot tell its rank"):
        ingest_traces([tmp_path])
    run = ingest_traces([tmp_path / "a.json"], allow_missing_ranks=True)
    assert run.ranks == [0] and run.manifest["ranks"]["0"]["rank_source"].startswith("assumed")


def test_merged_profile_splits_back_into_ranks(tmp_path: Path) -> None:
    """SGLang merge_profiles: events concatenated, every pid relabelled '[TP0r] pid'."""
    merged: dict[str, object] = {"traceEvents": []}
    per_rank = {}
    for r in (0, 1):
        doc = json.loads(dumps(gpu_rank(r).doc()))  # floats, as merge_profiles' json.load sees them
        per_rank[r] = doc
        for e in doc["traceEvents"]:
            e["pid"] = f"[TP{r:02d}] {e['pid']}"
        merged["traceEvents"].extend(doc["traceEvents"])  # type: ignore[union-attr]
        for k, v in doc.items():
            if k != "traceEvents":
                merged.setdefault(k, v)
    path = tmp_path / "merged-1733.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(merged).encode()))
    # next to the per-rank files, a directory walk leaves the merged file out (it would duplicate)
    run = ingest_traces([path])
    assert run.ranks == [0, 1]
    for r in (0, 1):
        ev = run.events.filter(pl.col("rank") == r)
        k = ev.filter(pl.col("kind") == "kernel")
        assert k.height == 9
        assert set(k["device"].to_list()) == {r}  # '[TP01] 1' -> device 1
        assert set(ev.filter(pl.col("kind") == "op")["pid"].to_list()) == {1000 + r}
        # correlation ids collide across ranks in a merged file: the graph flag stays per rank
        assert ev.filter(pl.col("graph").fill_null(False) & (pl.col("kind") == "kernel")).height == 4
    assert "distributedInfo" not in run.manifest["ranks"]["1"]


def test_directory_walk_skips_redundant_merged_file(tmp_path: Path) -> None:
    for r in (0, 1):
        gpu_rank(r).write(tmp_path / f"1733-TP-{r}.trace.json.gz")
    merged = {"traceEvents": []}
    (tmp_path / "merged-1733.trace.json.gz").write_bytes(gzip.compress(json.dumps(merged).encode()))
    run = ingest_traces([tmp_path])
    assert run.ranks == [0, 1]
    assert all("merged" not in s["path"] for s in run.manifest["sources"])
