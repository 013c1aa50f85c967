"""Issue 30, reliability round 3: hostile and degenerate inputs at the CLI, one rule per class.

Every case checks the exit status, the one line, that the input is unchanged (sha256) and that no
temp or lock file is left; the cases that grew memory without end check the child's peak RSS.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import dumps, gpu_rank

from tracekit.cli import cli
from tracekit.store import MANIFEST_KEY, load_run, read_manifest, write_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
H200 = SAMPLES / "h200x2-forensics" / "run.parquet"


def _run(args: list[str]) -> tuple[int, str, str]:
    res = CliRunner(env={"COLUMNS": "200"}).invoke(cli, args)
    err = "".join(ln for ln in res.stderr.splitlines(keepends=True) if "`tracekit upgrade" not in ln)
    return res.exit_code, res.stdout, err


_PEAK = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[2:])
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(r.returncode)
"""


def _proc(args: list[str], cwd: Path, timeout: float = 120) -> tuple[int, str, str, int]:
    """The real CLI in a child: exit status, stdout, stderr and that child's peak RSS (MB). The child is
    started from a small interpreter (its peak counts from that size, not from this test process's)."""
    peak = cwd / ".peak"
    r = subprocess.run([sys.executable, "-c", _PEAK, str(peak), sys.executable, "-m", "tracekit", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=timeout)
    rss = int(peak.read_text()) // 1024
    peak.unlink()
    return r.returncode, r.stdout, r.stderr, rss


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".tmp", ".lock")))


def _one_error(err: str, path: Path | str, what: str) -> None:
    assert err == f"tracekit: error: {path}: {what}\n", err


# --- manifests: shape, depth, ranges -------------------------------------------------------------


def _with_manifest(dst: Path, raw: str) -> Path:
    """H200's events under a manifest given as raw JSON text."""
    import pyarrow.parquet as pq

    table = pq.read_table(H200)
    meta = dict(pq.read_metadata(H200).metadata or {})
    meta[MANIFEST_KEY] = raw.encode()
    pq.write_table(table.replace_schema_metadata(meta), dst)
    return dst


def _man() -> dict[str, Any]:
    return read_manifest(H200)


@pytest.mark.parametrize(("name", "raw", "what"), [
    ("list", "[1, 2]", "manifest is an array, not a JSON object"),
    ("string", '"x"', "manifest is a string, not a JSON object"),
    ("deep", "[" * 100_000 + "]" * 100_000, "manifest is nested too deeply (more than about"),
    ("ranks-string", json.dumps({**_man(), "ranks": "abc"}), "manifest key ranks: Expected `object`, got `str`"),
    ("ranks-list", json.dumps({**_man(), "ranks": [1, 2]}), "manifest key ranks: Expected `object`, got `array`"),
    ("version-string", json.dumps({**_man(), "schema_version": "1"}),
     'manifest schema_version is a string "1"; this tracekit reads the integer 1'),
    ("world", json.dumps({**_man(), "world_size": 10**12}), "manifest world_size 1000000000000 is out of range (1 .. 65536)"),
    ("rank-key", json.dumps({**_man(), "missing_ranks": {str(2**40): "x"}}),
     "manifest missing_ranks: rank 1099511627776 is out of range (0 .. 65535)"),
])
@pytest.mark.parametrize("cmd", ["info", "attribute", "report"])
def test_a_bad_manifest_is_one_line_for_every_reader(tmp_path: Path, name: str, raw: str, what: str, cmd: str) -> None:
    run = _with_manifest(tmp_path / f"{name}.parquet", raw)
    before = _digest(run)
    args = [cmd, str(run)] + (["-o", str(tmp_path / "r.html")] if cmd == "report" else [])
    code, out, err = _run(args)
    assert code == 1 and out == "", err
    assert err.startswith(f"tracekit: error: {run}: {what}") and err.count("\n") == 1, err
    assert _digest(run) == before and _leftovers(tmp_path) == []


def test_merge_of_a_shard_declaring_a_huge_world_is_one_line_not_memory(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    d.mkdir()
    _with_manifest(d / "rank-00000.parquet", json.dumps({**_man(), "world_size": 10**12}))
    code, _, err, _ = _proc(["merge", str(d), "-o", "out.parquet"], tmp_path)
    assert code == 1
    _one_error(err, d / "rank-00000.parquet", "manifest world_size 1000000000000 is out of range (1 .. 65536)")
    assert not (tmp_path / "out.parquet").exists() and _leftovers(tmp_path) == []


def test_null_start_and_negative_duration_in_a_run_are_one_line(tmp_path: Path) -> None:
    run = load_run(H200)
    ev = run.events.with_columns(pl.when(pl.int_range(pl.len()) == 5).then(None).otherwise(pl.col("start_ns"))
                                 .alias("start_ns"))
    bad = write_run(ev, tmp_path / "null.parquet", run.manifest)
    for cmd in (["info", str(bad)], ["report", str(bad), "-o", str(tmp_path / "r.html")]):
        code, out, err = _run(cmd)
        assert code == 1 and out == ""
        assert err.startswith(f"tracekit: error: {bad}: 1 event(s) with no start_ns (first: rank 0, kind "), err
    ev = run.events.with_columns(pl.when(pl.int_range(pl.len()) == 7).then(-360_000).otherwise(pl.col("dur_ns"))
                                 .alias("dur_ns"))
    neg = write_run(ev, tmp_path / "neg.parquet", run.manifest)
    code, _, err = _run(["attribute", str(neg)])
    assert code == 1 and "1 event(s) with no or a negative dur_ns (first: rank 0" in err and err.count("\n") == 1


def test_a_run_with_a_bogus_kind_names_the_kind_column(tmp_path: Path) -> None:
    ev = load_run(H200).events.with_columns(pl.col("kind").cast(pl.String), pl.col("category").cast(pl.String))
    ev = ev.with_columns(pl.when(pl.int_range(pl.len()) == 3).then(pl.lit("bogus")).otherwise(pl.col("kind"))
                         .alias("kind"))
    run = tmp_path / "old.parquet"
    ev.write_parquet(run, metadata={MANIFEST_KEY.decode(): json.dumps(_man())})
    code, _, err = _run(["info", str(run)])
    assert code == 1
    assert err.startswith(f"tracekit: error: {run}: column kind: 1 event(s) of a kind tracekit does not know "
                          "('bogus', rank 0, "), err


# --- inputs: regular files only, bounded decompression and depth ------------------------------------


@pytest.mark.parametrize("cmd", ["ingest", "info"])
def test_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path, cmd: str) -> None:
    fifo = tmp_path / "in.json"
    os.mkfifo(fifo)
    for src, kind in ((fifo, "a FIFO (named pipe)"), (Path("/dev/zero"), "a character device")):
        args = [cmd, str(src)] + (["-o", "o.parquet"] if cmd == "ingest" else [])
        code, out, err, _ = _proc(args, tmp_path, timeout=60)  # a blocking open would hang here
        assert code == 1 and out == ""
        _one_error(err, src, f"is {kind}, not a regular file (tracekit reads regular files only)")
    assert _leftovers(tmp_path) == [] and not (tmp_path / "o.parquet").exists()


def test_a_gzip_bomb_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:  # 1 GiB of spaces: ~1 MB compressed, ratio ~1000
        fh.write(b'{"traceEvents": [')
        block = b" " * (1 << 24)
        for _ in range(64):
            fh.write(block)
        fh.write(b"]}")
    before = _digest(bomb)
    code, out, err, rss = _proc(["ingest", str(bomb), "-o", "o.parquet"], tmp_path)
    assert code == 1 and out == ""
    size = bomb.stat().st_size
    assert err.startswith(f"tracekit: error: {bomb}: gzip data inflates to more than {128 * size} bytes ({size} "
                          "compressed; the limit is 128x the compressed size, at least 64 MiB)"), err
    assert "refused as a likely decompression bomb (TRACEKIT_MAX_GZIP_RATIO raises it)" in err
    assert rss < 600, rss  # the limit (128x: 128 MiB here) plus the interpreter, never the 1 GiB
    assert _digest(bomb) == before and _leftovers(tmp_path) == []


def _trace(tmp_path: Path, name: str, fn: Any = None, text: str | None = None) -> Path:
    doc = json.loads(dumps(gpu_rank(0, world=1).doc()))
    if fn is not None:
        fn(doc)
    p = tmp_path / name
    p.write_text(text if text is not None else json.dumps(doc))
    return p


def _kernels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]


def test_json_nested_beyond_the_decoders_depth_is_one_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for name, text in (("args.json", '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
                                     f'"ts": 1, "dur": 1, "args": {{"z": {deep}}}}}]}}'),
                       ("top.json", f'{{"foo": {deep}, "traceEvents": []}}')):
        p = _trace(tmp_path, name, text=text)
        code, out, err = _run(["ingest", str(p), "-o", str(tmp_path / "o.parquet")])
        assert code == 1 and out == ""
        assert err.startswith(f"tracekit: error: {p}: the JSON is nested too deeply (more than about "), err


@pytest.mark.parametrize(("key", "value", "what"), [
    ("world_size", 10**9, "distributedInfo: world_size 1000000000 is out of range (1 .. 65536)"),
    ("rank", 2**40, "distributedInfo: rank 1099511627776 is out of range (0 .. 65535)"),
])
def test_a_huge_world_or_rank_in_a_trace_is_one_line_with_bounded_memory(tmp_path: Path, key: str, value: int,
                                                                          what: str) -> None:
    p = _trace(tmp_path, "t.json", lambda d: d["distributedInfo"].__setitem__(key, value))
    code, _, err, rss = _proc(["ingest", str(p), "-o", "o.parquet"], tmp_path)
    assert code == 1
    _one_error(err, p, what)
    assert rss < 600, rss


def _begin_end(d: dict[str, Any]) -> None:
    """Every complete (X) event of a trace document as a B/E pair."""
    out = []
    for e in d["traceEvents"]:
        if e.get("ph") == "X":
            out.append({**{k: v for k, v in e.items() if k != "dur"}, "ph": "B"})
            out.append({"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]})
    d["traceEvents"] = out


def test_a_trace_of_begin_end_events_is_said_as_such(tmp_path: Path) -> None:
    p = _trace(tmp_path, "be.json", _begin_end)
    code, _, err = _run(["ingest", str(p), "-o", str(tmp_path / "o.parquet")])
    assert code == 1
    assert err.startswith(f"tracekit: error: {p}: the trace's 42 timed events are all B/E (begin/end) pairs: "), err


# --- never a silent wrong number ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fn", "reason"), [
    ("negdur", lambda d: _kernels(d)[0].__setitem__("dur", -360.0), "negative duration"),
    ("device", lambda d: _kernels(d)[0]["args"].__setitem__("device", 70000), "device out of range (-1 .. 32767)"),
    ("bigdur", lambda d: _kernels(d)[0].__setitem__("dur", 9.2e15),
     "duration out of range (> 2^62 ns = 4611686018427387904)"),
])
def test_events_out_of_range_are_dropped_and_said_by_ingest_and_info(tmp_path: Path, name: str, fn: Any,
                                                                     reason: str) -> None:
    p = _trace(tmp_path, f"{name}.json", fn)
    before = _digest(p)
    out = tmp_path / "o.parquet"
    code, _, err = _run(["ingest", "-q", str(p), "-o", str(out)])
    assert code == 0, err
    line = next(ln for ln in err.splitlines() if "ingest left out" in ln)
    assert line.startswith(f"tracekit: warning: {out}: rank 0: ingest left out ") and f": {reason} (first: " in line
    code, _, err = _run(["info", str(out)])
    assert code == 0 and f"of {p}: {reason} (first: " in err, err
    ev = load_run(out).events
    assert ev.get_column("dur_ns").min() >= 0 and ev.get_column("start_ns").min() > 0  # type: ignore[operator]
    assert _digest(p) == before


def test_time_stamps_that_overflow_int64_are_said_never_wrapped(tmp_path: Path) -> None:
    p = _trace(tmp_path, "base.json", lambda d: d.__setitem__("baseTimeNanoseconds", 2**63 - 10))
    code, _, err = _run(["ingest", "-q", str(p), "-o", str(tmp_path / "o.parquet")])
    assert code == 1 and err.count("\n") == 1
    assert err == (f"tracekit: error: {p}: every event is out of range (21 no usable time stamp (missing, or ts + "
                   "baseTimeNanoseconds overflows int64 ns); first: range 'tracekit:verify|cycle=0|bs=2' at ts None ns, "
                   "dur 400000 ns)\n"), err
    assert not (tmp_path / "o.parquet").exists() and _leftovers(tmp_path) == []


def test_an_infinite_duration_is_dropped_not_zero(tmp_path: Path) -> None:
    good = _trace(tmp_path, "g.json")
    p = _trace(tmp_path, "inf.json", text=good.read_text().replace('"dur": ', '"dur": 1e400, "x": ', 1))
    code, _, err = _run(["ingest", "-q", str(p), "-o", str(tmp_path / "o.parquet")])
    assert code == 0
    assert "no usable duration (not a finite number of µs in the int64 ns range) (first: " in err, err


def test_kernels_joined_to_no_launch_and_shared_correlation_ids_are_said(tmp_path: Path) -> None:
    def corrupt(d: dict[str, Any]) -> None:
        _kernels(d)[0]["args"]["correlation"] = 999_999
        launches = [e for e in d["traceEvents"] if e.get("cat") == "cuda_runtime" and "Launch" in e["name"]]
        launches[1]["args"]["correlation"] = launches[2]["args"]["correlation"]
    p = _trace(tmp_path, "corr.json", corrupt)
    out = tmp_path / "o.parquet"
    for args in (["ingest", "-q", str(p), "-o", str(out)], ["info", str(out)]):
        code, _, err = _run(args)
        assert code == 0
        lines = [ln for ln in err.splitlines() if "correlation" in ln]
        assert len(lines) == 2, err
        assert lines[0].startswith(f"tracekit: warning: {out}: 2 GPU event(s) joined no launch (")
        assert lines[0].endswith("first: rank 0, 'nvjet_tst_128x64_64x8_1x1_v_bz_TNT', correlation 999999")
        assert lines[1].startswith(f"tracekit: warning: {out}: 2 launch rows share a correlation id")


def test_attribute_says_the_gpu_time_in_no_phase() -> None:
    code, out, _ = _run(["attribute", str(SAMPLES / "h200x2-mainjob" / "eager.parquet")])
    assert code == 0
    assert ("GPU time in no phase (profiled window, sum of durations): 347.298 ms of 616.725 ms (56.3%) in 4 GPU "
            "event(s), not in the tables above") in out.splitlines()
    code, out, _ = _run(["attribute", str(H200)])
    assert code == 0 and "GPU time in no phase" not in out  # every GPU event of that run is in a phase


# --- terminal output is text ----------------------------------------------------------------------


def test_names_are_printed_as_text_never_markup_or_escape_sequences(tmp_path: Path) -> None:
    evil = "zz_odd[/bold][bold]x[/] \x1b]0;pwned\x07\x1b[31mzz"  # no category rule matches: info lists it
    run = load_run(H200)
    kern = run.events.get_column("kind") == "kernel"
    first = kern.arg_true()[0]
    row = pl.int_range(pl.len()) == first
    ev = run.events.with_columns(pl.when(row).then(pl.lit(evil)).otherwise(pl.col("name")).alias("name"),
                                 pl.when(row).then(pl.lit("other")).otherwise(pl.col("category").cast(pl.String))
                                 .alias("category"))
    bad = write_run(ev, tmp_path / "evil\x1b[2J.parquet", run.manifest)
    for args in (["info", str(bad)], ["gap", str(bad)], ["diff", str(H200), str(bad)], ["attribute", str(bad)]):
        code, out, err = _run(args)
        assert code == 0, (args, err)
        assert "\x1b" not in out + err and "\x07" not in out + err, args
    code, out, err = _run(["info", str(bad), "--top", "50"])
    assert "│ zz_odd[/bold][bold]x[/] \\x1b]0;pwned\\x07\\x1b[31mzz │" in out, out
    code, _, err = _run(["info", str(tmp_path / "no\x1b[31m.parquet")])
    assert code == 1 and err == f"tracekit: error: {tmp_path}/no\\x1b[31m.parquet: no such file or directory\n"


# --- one open file per read -------------------------------------------------------------------------


_WRITER = """
import sys, polars as pl
from tracekit.store import load_run, write_run
src, dst = sys.argv[1], sys.argv[2]
run = load_run(src)
a = run.events
b = run.events.filter(pl.col("rank") == 0)
versions = [(a, {**run.manifest, "marker": a.height}), (b, {**run.manifest, "marker": b.height})]
import os
tmp = [write_run(ev, dst + f".v{i}", man) for i, (ev, man) in enumerate(versions)]
print("ready", flush=True)
i = 0
while sys.stdin.readline().strip() != "stop":  # one replacement per line the test sends
    os.link(tmp[i % 2], dst + ".new")
    os.replace(dst + ".new", dst)
    i += 1
    print("replaced", i, flush=True)
"""


def test_a_concurrent_writer_never_tears_a_read(tmp_path: Path) -> None:
    """A writer process replaces run.parquet by rename (two versions: every rank, rank 0 alone) while
    this process reads it; each read's manifest must describe that read's events. The writer renames
    between the reader's opening and its reading of the events (the test steps it through a pipe: no
    sleeps), the place where a reader that opened the file twice paired the two versions."""
    import threading

    import tracekit.store as store

    dst = tmp_path / "run.parquet"
    w = subprocess.Popen([sys.executable, "-c", _WRITER, str(H200), str(dst)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert w.stdin is not None and w.stdout is not None
    assert w.stdout.readline().strip() == "ready"
    w.stdin.write("go\n")
    w.stdin.flush()
    assert w.stdout.readline().split()[0] == "replaced"
    orig = store._read_file
    lock = threading.Lock()

    def read_then_rename(path: Path) -> Any:  # every file read, then a rename before the events are used
        got = orig(path)
        with lock:
            w.stdin.write("go\n")  # type: ignore[union-attr]
            w.stdin.flush()  # type: ignore[union-attr]
            w.stdout.readline()  # type: ignore[union-attr]
        return got

    store._read_file = read_then_rename  # type: ignore[assignment]
    try:
        for _ in range(8):
            run = load_run(dst)
            assert run.manifest["marker"] == run.events.height
    finally:
        store._read_file = orig  # type: ignore[assignment]
        w.stdin.write("stop\n")
        w.stdin.flush()
        w.wait(30)


_LOOPING_WRITER = """
import os, sys
dst = sys.argv[1]
print("ready", flush=True)
i = 0
while True:  # until the test kills it: replace as fast as it can
    os.link(dst + f".v{i % 2}", dst + ".new")
    os.replace(dst + ".new", dst)
    i += 1
"""


def test_reads_under_a_free_running_writer_are_whole(tmp_path: Path) -> None:
    """The same two versions, replaced as fast as a process can while 25 reads run (before, ~18% of
    reads paired one version's manifest with the other's events)."""
    run = load_run(H200)
    dst = tmp_path / "run.parquet"
    b = run.events.filter(pl.col("rank") == 0)
    write_run(run.events, f"{dst}.v0", {**run.manifest, "marker": run.events.height})
    write_run(b, f"{dst}.v1", {**run.manifest, "marker": b.height})
    os.link(f"{dst}.v0", dst)
    w = subprocess.Popen([sys.executable, "-c", _LOOPING_WRITER, str(dst)], stdout=subprocess.PIPE, text=True)
    try:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for _ in range(25):
            got = load_run(dst)
            assert got.manifest["marker"] == got.events.height
    finally:
        w.kill()
        w.wait(30)


# --- locks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pid", ['"abc"', str(10**30), "-5", "true"])
def test_a_lock_file_with_a_bad_pid_is_one_line_then_replaced_when_old(tmp_path: Path, pid: str) -> None:
    import socket

    r0 = gpu_rank(0, world=1).write(tmp_path / "r0.json")
    out = tmp_path / "o.parquet"
    lock = tmp_path / "o.parquet.lock"
    lock.write_text(f'{{"pid": {pid}, "host": "{socket.gethostname()}"}}')
    code, _, err = _run(["ingest", "-q", str(r0), "-o", str(out)])
    assert code == 1
    assert err == (f"tracekit: error: {out}: lock file {lock} holds no live tracekit's record (no valid pid): remove "
                   "it if no tracekit writes this output (it is replaced by itself once 10 s old)\n")
    old = lock.stat().st_mtime - 60
    os.utime(lock, (old, old))
    code, _, err = _run(["ingest", "-q", str(r0), "-o", str(out)])
    assert code == 0, err
    assert load_run(out).ranks == [0] and _leftovers(tmp_path) == []


_CAPTURE_UNDER_LOCK = """
import atexit, sys
atexit.register(lambda: print("torch imported:", "torch" in sys.modules, file=sys.stderr))
from tracekit.cli import main
sys.argv = ["tracekit", "capture", "--device", "cpu", "-o", sys.argv[1]]
main()
"""


def test_a_second_capture_to_a_locked_output_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    from tracekit.outputs import OutputLock

    out = tmp_path / "run.parquet"
    with OutputLock(out):  # this process, alive: a live holder
        r = subprocess.run([sys.executable, "-c", _CAPTURE_UNDER_LOCK, str(out)], capture_output=True, text=True,
                           timeout=120)
    assert r.returncode == 1
    assert r.stderr == (f"tracekit: error: {out}: another tracekit (pid {os.getpid()}) is writing this output (lock file "
                        f"{out}.lock; remove it only if that process is gone)\ntorch imported: False\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_one_sigterm_is_said_as_one_and_a_silent_rank_is_the_root_cause() -> None:
    import signal

    from tracekit.collectors.capture import CaptureConfig
    from tracekit.collectors.launcher import Interrupts, explain
    from tracekit.collectors.merge import _failures
    from tracekit.collectors.progress import Watch

    intr = Interrupts()
    with pytest.raises(KeyboardInterrupt):
        intr._on(signal.SIGTERM, None)
    assert intr.how() == "SIGTERM"
    twice = Interrupts()
    twice._on(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        twice._on(signal.SIGINT, None)
    assert twice.how() == "SIGINT twice"
    mixed = Interrupts()
    mixed._on(signal.SIGINT, None)
    with pytest.raises(KeyboardInterrupt):
        mixed._on(signal.SIGTERM, None)
    assert mixed.how() == "SIGINT, then SIGTERM"
    # SIGSTOP on rank 1 at t=100: rank 0's collective fails at t=160 (not recognised as a collective error),
    # the launcher kills the silent rank 1 at t=400; rank 1 went silent first: it is the root cause
    w = Watch()
    w.window_started = {0, 1}
    w.last_cycle = {0: 5, 1: 5}
    w.errors[0] = ("RuntimeError: timed out", False, 160.0)
    w.died = {0: 161.0, 1: 400.0}
    w.timed_out[1] = 300.0
    w.silent_since[1] = 100.0

    class _P:
        exitcode = -9

    lines = [ln for _, ln in explain(_failures(CaptureConfig(out="x", world=2), w, {0: _P(), 1: _P()}))]
    assert lines[0] == "rank 1: no progress for 300 s (killed) in the profiling window after 2 of 8 cycles (root cause)"


def test_script_sequences_in_names_and_env_values_cannot_blank_the_report(tmp_path: Path) -> None:
    import re

    evil = "<!--<script>x</script>&\u2028"
    run = load_run(H200)
    first = (run.events.get_column("kind") == "kernel").arg_true()[0]
    row = pl.int_range(pl.len()) == first
    ev = run.events.with_columns(pl.when(row).then(pl.lit(evil)).otherwise(pl.col("name")).alias("name"))
    man = json.loads(json.dumps(run.manifest))
    man["ranks"]["0"].setdefault("env", {})["TK_EVIL"] = evil
    bad = write_run(ev, tmp_path / "evil.parquet", man)
    out = tmp_path / "r.html"
    code, _, err = _run(["report", str(bad), "-o", str(out)])
    assert code == 0, err
    html = out.read_text()
    blocks = re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', html, re.S)
    assert blocks and all("<" not in b and ">" not in b and "&" not in b for b in blocks)
    docs = [json.loads(b) for b in blocks]  # every block is whole JSON: nothing ended an element early
    assert evil in json.dumps(docs, ensure_ascii=False)  # the data is there, as it was


def test_ctrl_c_stops_an_ingest_and_leaves_no_lock_or_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (KeyboardInterrupt in the main thread) while a file is read: exit 130, the lock and any
    temp file gone, the input unchanged."""
    import tracekit.ingest as ingest_mod

    r0 = gpu_rank(0).write(tmp_path / "r0.json")
    r1 = gpu_rank(1).write(tmp_path / "r1.json")
    before = _digest(r0)

    def interrupted(*_: Any, **__: Any) -> Any:
        assert (tmp_path / "o.parquet.lock").exists()  # the lock is held while the inputs are read
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest_mod, "_read_parts", interrupted)
    code, out, err = _run(["ingest", str(r0), str(r1), "-o", str(tmp_path / "o.parquet")])
    assert code == 130 and out == "" and err == "tracekit: interrupted (SIGINT)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r0.json", "r1.json"] and _digest(r0) == before


def test_a_name_over_the_limit_is_one_line_in_a_run_and_left_out_at_ingest(tmp_path: Path) -> None:
    """A run holding one huge kernel name made info take gigabytes (issue 30): names over 1 MiB are one line
    when a run is read (memory: the decoded column, nothing more) and left out, said, at ingest."""
    run = load_run(H200)
    first = (run.events.get_column("kind") == "kernel").arg_true()[0]
    big = "k" * (32 << 20)
    ev = run.events.with_columns(pl.when(pl.int_range(pl.len()) == first).then(pl.lit(big)).otherwise(pl.col("name"))
                                 .alias("name"))
    bad = write_run(ev, tmp_path / "big.parquet", run.manifest)
    code, out, err, rss = _proc(["info", str(bad)], tmp_path)
    assert code == 1 and out == ""
    _one_error(err, bad, "1 event(s) with a name longer than 1 MiB (first: rank 0, kernel, 33,554,432 bytes)")
    assert rss < 800, rss
    p = _trace(tmp_path, "long.json", lambda d: _kernels(d)[0].__setitem__("name", "n" * (2 << 20)))
    code, _, err = _run(["ingest", "-q", str(p), "-o", str(tmp_path / "o.parquet")])
    assert code == 0
    assert ": name longer than 1 MiB (first: kernel 'nnnn" in err, err
