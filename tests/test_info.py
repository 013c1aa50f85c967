"""`tracekit info`: per-rank numbers checked against an independent reading of the JSON,
manifest differences (launcher env vs ranks), rendering."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner
from kineto_reference import load, rank_stats
from kineto_synth import gpu_rank
from rich.console import Console

from tracekit.cli import cli
from tracekit.finalize import stamp
from tracekit.render.info import render_info
from tracekit.store import new_manifest, write_run
from tracekit.summary import manifest_differences, run_summary


def _ingest(tmp_path: Path, files: list[Path]) -> dict[str, object]:
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", *map(str, files), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["info", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(res.output)
    return doc


def test_info_json_matches_independent_computation(tmp_path: Path) -> None:
    files = [
        gpu_rank(0, world=3).write(tmp_path / "1733-TP-0.trace.json.gz"),
        gpu_rank(1, world=3, skew=123_457).write(tmp_path / "1733-TP-1.trace.json"),
        gpu_rank(2, world=3, skew=-77_001).write(tmp_path / "1733-TP-2.trace.json.gz"),
    ]
    doc = _ingest(tmp_path, files)
    assert doc["world_size"] == 3 and doc["ranks_present"] == [0, 1, 2]
    ranks = {r["rank"]: r for r in doc["ranks"]}  # type: ignore[attr-defined]
    for r, f in enumerate(files):
        want = rank_stats(load(f))
        got = {k: ranks[r][k] for k in want}
        assert got == want, (r, got, want)
        assert ranks[r]["busy_ns"] < ranks[r]["kernel_ns"]  # the overlap on one stream counts once
        bc = ranks[r]["by_category_ns"]
        assert bc["allreduce"] == 33_000 + 7_000 + 11_000 and bc["memory"] == 4_000
        assert sum(v for k, v in bc.items() if k != "memory") == ranks[r]["kernel_ns"]
    assert doc["events_by_kind"]["kernel"] == 27  # type: ignore[index]
    assert doc["unmatched_kernels"] == []
    assert doc["differences"] == []


def test_launcher_nccl_variable_missing_in_ranks_is_loud(tmp_path: Path) -> None:
    ev = pl.DataFrame({"rank": [0, 1], "kind": ["kernel"] * 2, "name": ["nvjet_x"] * 2, "category": ["gemm"] * 2,
                       "start_ns": [0, 0], "dur_ns": [5, 7]})
    man = new_manifest(
        source="capture",
        world_size=2,
        launcher={"env": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}},
        ranks={
            "0": {"pid": 11, "env": {"NCCL_PROTO": "LL", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "versions": {"torch": "2.11"},
                  "dilation": {"verify": 1.2}, "gpu": {"name": "H200", "sm_clock_mhz": 1980, "pcie_gen": 5}},
            "1": {"pid": 12, "env": {"NCCL_PROTO": "Simple", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "versions": {"torch": "2.12"},
                  "dilation": {"verify": 1.3}, "gpu": {"name": "H200", "sm_clock_mhz": 1410, "pcie_gen": 4}},
        },
    )
    found = manifest_differences(man)
    diffs = {(d.key, d.kind): d for d in found}
    algo = diffs[("env.NCCL_ALGO", "launcher_only")]
    assert algo.loud and algo.values == {"launcher": "Ring", "0": None, "1": None}
    assert not diffs[("env.NCCL_PROTO", "ranks_differ")].loud
    assert diffs[("env.NCCL_PROTO", "launcher_differs")].values == {"launcher": "LL", "0": "LL", "1": "Simple"}
    keys = {d.key for d in found}
    assert "versions.torch" in keys and "pid" not in keys and "env.CUDA_DEVICE_MAX_CONNECTIONS" not in keys
    assert "gpu.pcie_gen" in keys  # configuration differs: reported
    assert "gpu.sm_clock_mhz" not in keys and "dilation.verify" not in keys  # measurements: not "differences"
    assert found[0].key == "env.NCCL_ALGO" and [d for d in found if d.loud] == [algo]  # loud first
    doc = run_summary(ev, man)
    assert doc["versions"]["torch"] == {"0": "2.11", "1": "2.12"}
    console = Console(record=True, width=160, color_system="standard", force_terminal=True)
    render_info(doc, console)
    text = console.export_text(styles=True)
    assert "\x1b[1;31menv.NCCL_ALGO" in text  # bold red
    assert "\x1b[1;31menv.NCCL_PROTO" not in text
    assert "set in launcher, absent in rank(s)" in text
    path = write_run(ev, tmp_path / "run.parquet", man)
    res = CliRunner().invoke(cli, ["info", str(path)])
    assert res.exit_code == 0 and "NCCL_ALGO" in res.output and "per rank" in res.output


def test_info_reports_missing_ranks_and_unmatched(tmp_path: Path) -> None:
    ev = pl.DataFrame({"rank": [0, 0, 2], "kind": ["kernel"] * 3, "name": ["mystery_kernel", "nvjet_a", "mystery_kernel"],
                       "category": ["other", "gemm", "other"], "start_ns": [0, 10, 0], "dur_ns": [5, 5, 9]})
    man = new_manifest(source="ingest", world_size=3, ranks={"0": {}, "2": {}}, missing_ranks={"1": "no trace for this rank among the inputs"})
    path = write_run(ev, tmp_path / "run.parquet", stamp(man))
    res = CliRunner().invoke(cli, ["info", str(path), "--json"])
    doc = json.loads(res.output)
    assert doc["missing_ranks"] == {"1": "no trace for this rank among the inputs"}
    assert doc["unmatched_kernels"] == [{"name": "mystery_kernel", "normalized": "mystery_kernel", "count": 2, "total_ns": 14}]
    res = CliRunner().invoke(cli, ["info", str(path)])
    assert "missing rank 1" in res.output and "mystery_kernel" in res.output
