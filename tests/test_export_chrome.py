"""Chrome JSON export: same content as the Perfetto export, exact ns text, validation of bad JSON."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from export_data import exported_gpu, gpu_rows, synth_run

from tracekit.export import export_run
from tracekit.export.select import Selection
from tracekit.export.validate import validate_trace
from tracekit.store import read_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synth_run(tmp_path_factory.mktemp("run"), ranks=2, cycles=4)


@pytest.mark.parametrize("name", ["run.json", "run.json.gz"])
def test_json_export_valid_and_exact(run: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / name
    res = export_run(run, out, flows=("launches", "collectives"))
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    assert exported_gpu(chk.slices) == gpu_rows(read_run(run))
    assert chk.n_flows == res.n_flows > 0
    assert chk.n_slices == res.n_slices
    assert sorted(chk.processes.values()) == ["rank 0 · GPU 0 · node-a", "rank 1 · GPU 1 · node-a"]


def test_ts_text_has_three_decimals_from_ints(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    export_run(run, out)
    text = out.read_text()
    doc = json.loads(text)
    base = doc["baseTimeNanoseconds"]
    ev = read_run(run)
    assert base == int(ev["start_ns"].min())  # type: ignore[arg-type]
    stamps = re.findall(r'"ts":([0-9.]+)', text)
    assert stamps and all(re.fullmatch(r"\d+\.\d{3}", s) for s in stamps)
    # a kernel whose ns are not a multiple of 1000 keeps its last digits
    odd = ev.filter((ev["kind"] == "kernel") & (ev["start_ns"] % 1000 != 0)).row(0, named=True)
    rel = odd["start_ns"] - base
    assert f'"ts":{rel // 1000}.{rel % 1000:03d}' in text


def test_json_deterministic_gzip(run: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    export_run(run, a)
    export_run(run, b)
    assert a.read_bytes() == b.read_bytes()
    assert gzip.decompress(a.read_bytes()).startswith(b"{")


def test_json_selection(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    res = export_run(run, out, selection=Selection(ranks=(1,)))
    chk = validate_trace(out, collect=True)
    assert chk.ok and res.ranks == [1]
    ev = read_run(run)
    assert exported_gpu(chk.slices) == gpu_rows(ev.filter(ev["rank"] == 1))


def _write(p: Path, events: list[dict[str, object]]) -> Path:
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_json_validator_finds_problems(tmp_path: Path) -> None:
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "rank 0"}},
            {"ph": "M", "name": "process_name", "pid": 2, "tid": 0, "args": {"name": "rank 0 again"}}]
    bad = _write(tmp_path / "bad.json", [
        *meta,
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.0, "dur": 5.0},
        {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 3.0, "dur": 5.0},  # partial overlap
        {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 1.0},  # flow without end
        {"ph": "E", "pid": 1, "tid": 2, "ts": 2.0},  # E without B
        {"ph": "C", "name": "c", "pid": 1, "ts": 2.0, "args": {"v": "x"}},
        {"ph": "X", "name": "c", "pid": 1, "tid": 3, "ts": 1.0001, "dur": 1},  # sub-ns timestamp
    ])
    chk = validate_trace(bad)
    text = "\n".join(chk.problems)
    assert not chk.ok
    for needle in ("partially overlaps", "flow 7: 1 start(s), 0 end(s)", "E without B", "counter without numeric",
                   "rank 0 appears as 2 processes", "not a number of µs"):
        assert needle in text, (needle, text)


def test_json_truncated_gzip_is_bad_trace(run: Path, tmp_path: Path) -> None:
    from tracekit.errors import BadTraceError

    out = tmp_path / "t.json.gz"
    export_run(run, out)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(out.read_bytes()[:200])
    with pytest.raises(BadTraceError, match="not a readable JSON trace"):
        validate_trace(cut)
