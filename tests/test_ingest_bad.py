"""Bad inputs: each gives a correct result or one clear line naming the file (and rank), exit 1."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_synth import TraceBuilder, gpu_rank

from tracekit.cli import cli
from tracekit.errors import BadTraceError, RankError
from tracekit.ingest import ingest_traces
from tracekit.store import read_manifest, read_run


def _cli(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(cli, args)
    return res.exit_code, res.output


def _one_error_line(out: str) -> str:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1, out
    assert "Traceback" not in out
    assert lines[0].startswith("tracekit: error: ")
    return lines[0]


def _good_pair(d: Path) -> tuple[Path, Path]:
    return gpu_rank(0).write(d / "r0.json.gz"), gpu_rank(1).write(d / "r1.json.gz")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("truncated.json.gz", None, "truncated or corrupt gzip"),
        ("empty.json", b"", "empty file"),
        ("notatrace.json", json.dumps({"hello": [1, 2, 3]}).encode(), "not a trace"),
        ("wrongshape.json", json.dumps({"traceEvents": {"a": 1}}).encode(), "not a Kineto trace"),
        ("cut.json", None, "truncated or malformed JSON"),
        ("garbage.json", b"\x00\x01binary", "not JSON"),
    ],
)
def test_unreadable_file_is_one_line_exit_1(tmp_path: Path, name: str, content: bytes | None, message: str) -> None:
    path = tmp_path / name
    if name == "truncated.json.gz":
        whole = gzip.compress(json.dumps(gpu_rank(0).doc()).encode())
        path.write_bytes(whole[: len(whole) // 2])
    elif name == "cut.json":
        text = json.dumps(gpu_rank(0).doc())
        path.write_text(text[: len(text) // 2])
    else:
        assert content is not None
        path.write_bytes(content)
    with pytest.raises(BadTraceError, match=message) as exc:
        ingest_traces([path])
    assert exc.value.path == str(path)
    code, out = _cli(["ingest", str(path), "-o", str(tmp_path / "run.parquet")])
    assert code == 1
    line = _one_error_line(out)
    assert str(path) in line and message in line
    assert not (tmp_path / "run.parquet").exists()


def test_skip_policy_ingests_good_files_and_reports_bad_once(tmp_path: Path) -> None:
    _good_pair(tmp_path)
    (tmp_path / "broken.json").write_text('{"traceEvents": [{"ph": "X", "ts": 1')
    out_path = tmp_path / "run.parquet"
    code, out = _cli(["ingest", str(tmp_path), "-o", str(out_path)])
    assert code == 1 and "broken.json" in _one_error_line(out)
    code, out = _cli(["ingest", str(tmp_path), "-o", str(out_path), "--on-error", "skip"])
    assert code == 0, out
    assert out.count("broken.json") == 1 and "skipped 1 file(s)" in out
    assert sorted(read_run(out_path)["rank"].unique().to_list()) == [0, 1]
    man = read_manifest(out_path)
    assert [s["path"] for s in man["ingest"]["skipped"]] == [str(tmp_path / "broken.json")]


def test_metadata_only_file_is_skipped_and_said(tmp_path: Path) -> None:
    _good_pair(tmp_path)
    meta_only = TraceBuilder(rank=5, world_size=2)  # no events at all
    meta_only.write(tmp_path / "meta.json")
    run = ingest_traces([tmp_path])
    assert run.ranks == [0, 1]
    assert run.manifest["ingest"]["skipped"][0]["reason"].startswith("metadata only")
    only = tmp_path / "only"
    only.mkdir()
    TraceBuilder(rank=0, world_size=1).write(only / "m.json")
    code, out = _cli(["ingest", str(only), "-o", str(tmp_path / "x.parquet")])
    assert code == 1 and "metadata only" in _one_error_line(out)


def test_cpu_only_trace_is_ingested_and_said(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    b.range("tracekit:decode|cycle=0", 0, 10_000)
    b.op("aten::add", 1000, 2000)
    path = b.write(tmp_path / "cpu.json")
    out_path = tmp_path / "run.parquet"
    code, out = _cli(["ingest", str(path), "-o", str(out_path)])
    assert code == 0, out
    assert "rank 0: CPU-only trace" in out
    assert read_run(out_path).height == 2


def test_duplicate_rank(tmp_path: Path) -> None:
    gpu_rank(0).write(tmp_path / "a.json")
    gpu_rank(0).write(tmp_path / "b.json")
    gpu_rank(1).write(tmp_path / "c.json")
    with pytest.raises(RankError, match="duplicate rank 0") as exc:
        ingest_traces([tmp_path])
    assert exc.value.rank == 0
    code, out = _cli(["ingest", str(tmp_path), "-o", str(tmp_path / "run.parquet")])
    line = _one_error_line(out)
    assert code == 1 and "rank 0" in line and "b.json" in line


def test_missing_rank_is_an_error_unless_allowed(tmp_path: Path) -> None:
    gpu_rank(0, world=4).write(tmp_path / "r0.json")
    gpu_rank(2, world=4).write(tmp_path / "r2.json")
    with pytest.raises(RankError, match="missing rank"):
        ingest_traces([tmp_path])
    code, out = _cli(["ingest", str(tmp_path), "-o", str(tmp_path / "run.parquet")])
    line = _one_error_line(out)
    assert code == 1 and "missing rank(s) 1,3 of world size 4" in line
    run = ingest_traces([tmp_path], allow_missing_ranks=True)
    assert run.ranks == [0, 2]
    assert set(run.manifest["missing_ranks"]) == {"1", "3"}  # never silently rank 0
    code, out = _cli(["ingest", str(tmp_path), "-o", str(tmp_path / "run.parquet"), "--allow-missing-ranks"])
    assert code == 3 and "missing ranks 1,3: no trace for this rank" in out  # exit 3: partial run


def test_overlapping_kernels_busy_is_a_union(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    b.kernel("fused_moe_kernel", 0, 1000, 5000)  # [1000, 6000)
    b.kernel("act_and_mul_kernel", 100, 4000, 5000)  # [4000, 9000) overlaps on the same stream
    b.kernel("nvjet_tst", 200, 20_000, 1000)  # [20000, 21000)
    path = b.write(tmp_path / "ov.json")
    out_path = tmp_path / "run.parquet"
    assert _cli(["ingest", str(path), "-o", str(out_path), "-q"])[0] == 0
    code, out = _cli(["info", str(out_path), "--json"])
    assert code == 0
    r = json.loads(out)["ranks"][0]
    assert r["kernel_ns"] == 11_000  # the sum double counts the overlap
    assert r["busy_ns"] == 9_000  # [1000, 9000) + [20000, 21000)
    assert r["span_ns"] == 20_000
    assert r["busy_ns"] <= r["span_ns"]


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert _cli(["ingest", "-o", str(tmp_path / "x.parquet")])[0] == 2  # no TRACES
    assert _cli(["ingest", str(tmp_path)])[0] == 2  # no -o
    assert _cli(["ingest", str(tmp_path), "-o", "x", "--on-error", "maybe"])[0] == 2


def test_no_such_input_and_bad_category_file(tmp_path: Path) -> None:
    code, out = _cli(["ingest", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.parquet")])
    assert code == 1 and "nope.json: no such file" in _one_error_line(out)
    _good_pair(tmp_path)
    bad = tmp_path / "cats.toml"
    bad.write_text('[[rule]]\ncategory = "gpu"\npattern = "x"\n')
    code, out = _cli(["ingest", str(tmp_path), "-o", str(tmp_path / "x.parquet"), "--categories", str(bad)])
    assert code == 1 and "cats.toml" in _one_error_line(out) and "'gpu'" in out


def test_info_on_a_bad_run_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"nope")
    code, out = _cli(["info", str(junk)])
    assert code == 1 and "junk.parquet" in _one_error_line(out)
