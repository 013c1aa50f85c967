"""Issue 30's audit (docs/reliability.md): the failures whose tests did not check every part of the rule
at the CLI, each run here as a real ``tracekit`` process in its own session: the exit status, the one
line, every input's sha256 unchanged, no output, temp or lock file left, no process of the session
left, and the process's peak memory bounded."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from test_reliability_round3 import _PEAK, H200, _begin_end, _digest, _trace, _with_manifest

from tracekit.store import load_run, read_manifest, write_run

RSS_MB = 600  # the interpreter, polars and one small run; the cases that grew without end went to GBs


def _session_left(sid: int) -> list[str]:
    """Live processes of session ``sid`` (the command and everything it started)."""
    left = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == sid:
                left.append(d.name)
    return left


def _null_start(d: Path) -> Path:
    run = load_run(H200)
    ev = run.events.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("start_ns"))
                                 .alias("start_ns"))
    return write_run(ev, d / "null.parquet", run.manifest)


def _shard_dir(d: Path) -> Path:
    s = d / "run.parquet.d"
    s.mkdir()
    _with_manifest(s / "rank-00000.parquet", json.dumps({**read_manifest(H200), "world_size": 10**12}))
    return s


DEEP = "[" * 100_000 + "]" * 100_000

# name -> (make the input in a directory, the command's arguments after the input, exit status, the line)
CASES: dict[str, tuple[Callable[[Path], Path], list[str], int, str]] = {
    "manifest-list": (lambda d: _with_manifest(d / "m.parquet", "[1, 2]"), ["info"], 1,
                      "manifest is an array, not a JSON object"),
    "manifest-ranks-string": (lambda d: _with_manifest(d / "m.parquet", json.dumps({**read_manifest(H200), "ranks": "abc"})),
                              ["attribute"], 1, "manifest key ranks: Expected `object`, got `str`"),
    "manifest-deep": (lambda d: _with_manifest(d / "m.parquet", DEEP), ["info"], 1,
                      "manifest is nested too deeply (more than about"),
    "trace-deep": (lambda d: _trace(d, "t.json", text=f'{{"foo": {DEEP}, "traceEvents": []}}'), ["ingest"], 1,
                   "the JSON is nested too deeply (more than about"),
    "merge-huge-world": (_shard_dir, ["merge"], 1, "manifest world_size 1000000000000 is out of range (1 .. 65536)"),
    "trace-huge-world": (lambda d: _trace(d, "t.json", lambda doc: doc["distributedInfo"].__setitem__("world_size", 10**9)),
                         ["ingest"], 1, "distributedInfo: world_size 1000000000 is out of range (1 .. 65536)"),
    "trace-huge-rank": (lambda d: _trace(d, "t.json", lambda doc: doc["distributedInfo"].__setitem__("rank", 2**40)),
                        ["ingest"], 1, "distributedInfo: rank 1099511627776 is out of range (0 .. 65535)"),
    "begin-end-only": (lambda d: _trace(d, "be.json", _begin_end), ["ingest"], 1,
                       "the trace's 42 timed events are all B/E (begin/end) pairs: "),
    "base-time-overflow": (lambda d: _trace(d, "b.json", lambda doc: doc.__setitem__("baseTimeNanoseconds", 2**63 - 10)),
                           ["ingest"], 1, "every event is out of range (21 no usable time stamp"),
    "null-start-in-run": (_null_start, ["report"], 1, "1 event(s) with no start_ns (first: rank 0, kind "),
    "version-string": (lambda d: _with_manifest(d / "m.parquet", json.dumps({**read_manifest(H200), "schema_version": "1"})),
                       ["spec"], 1, 'manifest schema_version is a string "1"; this tracekit reads the integer 1'),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_failure_is_one_line_with_nothing_changed_or_left(tmp_path: Path, case: str) -> None:
    make, args, status, what = CASES[case]
    inputs = tmp_path / "in"
    inputs.mkdir()
    src = make(inputs)
    before = {p: _digest(p) for p in inputs.rglob("*") if p.is_file()}
    out = tmp_path / ("r.html" if args[0] == "report" else "o.parquet")
    cmd = [*args, str(src)] + (["-o", str(out)] if args[0] in ("ingest", "merge", "report") else [])
    peak = tmp_path / ".peak"
    p = subprocess.Popen([sys.executable, "-c", _PEAK, str(peak), sys.executable, "-m", "tracekit", *cmd],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    stdout, err = p.communicate(timeout=300)
    assert p.returncode == status, err
    line = f"tracekit: error: {src if args[0] != 'merge' else src / 'rank-00000.parquet'}: {what}"
    assert err.startswith(line) and err.count("\n") == 1 and stdout == "", err
    assert {q: _digest(q) for q in before} == before  # every input as it was
    assert sorted(q.name for q in tmp_path.iterdir()) == [".peak", "in"]  # no output, temp or lock file
    assert sorted(q.name for q in inputs.rglob("*") if q not in before and q.is_file()) == []
    assert _session_left(p.pid) == []  # nothing it started is left running
    rss_mb = int(peak.read_text()) // 1024
    assert rss_mb < RSS_MB, rss_mb


def test_an_export_window_past_int64_is_a_usage_error_and_writes_nothing(tmp_path: Path) -> None:
    """``export --window 0:9223372036854775807s`` was an OverflowError traceback."""
    run = tmp_path / "run.parquet"
    run.write_bytes(H200.read_bytes())
    before = _digest(run)
    for window, why in (("0:9223372036854775807s", "'9223372036854775807s' is out of range (at most 2^62 ns, about "
                                                    "146 years)"),
                        ("0:1e400s", "not a time: '1e400s' (use ns, or a number with ns/us/ms/s)")):
        r = subprocess.run([sys.executable, "-m", "tracekit", "export", str(run), "-o", str(tmp_path / "w.json.gz"),
                            "--window", window], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stdout == ""
        assert r.stderr.splitlines()[-1] == f"Error: {why}", r.stderr
    assert _digest(run) == before and sorted(q.name for q in tmp_path.iterdir()) == ["run.parquet"]


def test_records_a_lite_capture_lost_are_said_by_info(tmp_path: Path) -> None:
    """The CUPTI client's dropped records (a lite capture on a GPU whose activity buffers filled) are in the
    manifest; ``info`` says them in one line per rank, never a silently smaller GPU time."""
    man = read_manifest(H200)
    man["ranks"]["1"].setdefault("session", {})["cupti_client"] = {"mode": "launch", "dropped_records": 7}
    run = write_run(load_run(H200).events, tmp_path / "lost.parquet", man)
    r = subprocess.run([sys.executable, "-m", "tracekit", "info", str(run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (f"tracekit: warning: {run}: rank 1: CUPTI dropped 7 activity record(s) during the capture (its buffers "
            "were full): their GPU time is not in the run") in r.stderr.splitlines()
    plain = subprocess.run([sys.executable, "-m", "tracekit", "info", str(H200)], capture_output=True, text=True,
                           timeout=300)
    assert "CUPTI dropped" not in plain.stderr
