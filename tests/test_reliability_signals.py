"""Issue 30: SIGTERM, SIGINT and SIGHUP to a command that writes an output, as real processes.

The command ends with one line and status 128 + the signal, its lock and temp files gone, its inputs
and the previous output unchanged, and the next writer finds no stale lock to replace. Every wait is
on a condition (a file appears, a process ends), never on a clock.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kineto_synth import gpu_rank

from tracekit.outputs import sidecar

HERE = Path(__file__).resolve().parent
PAUSE_CLI = HERE / "pause_cli.py"
SAMPLES = HERE.parent / "samples"
H200 = SAMPLES / "h200x2-forensics" / "run.parquet"
WAIT_S = 300.0  # only a bound on a hung child: every wait below ends when its condition holds

_KERNEL = ('{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {pid}, '
           '"ts": {t}.000, "dur": 2.000, "args": {{"correlation": {c}}}}}, '
           '{{"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "pid": {dev}, "tid": 7, '
           '"ts": {k}.000, "dur": 5.000, "args": {{"device": {dev}, "stream": 7, "correlation": {c}}}}}')


def big_rank(path: Path, rank: int, kernels: int) -> Path:
    """A real rank trace (``gpu_rank``) with ``kernels`` more launch/kernel pairs after it (tens of MB):
    an ingest of it runs long enough to be signalled while it reads."""
    text = gpu_rank(rank).write(path, indent=None).read_text()
    head, tail = text.rsplit("]", 1)
    t0 = 5_150_227_800_000 + rank  # us, after the small rank's own events
    extra = ", ".join(_KERNEL.format(pid=1000 + rank, dev=rank, t=t0 + 10 * i, k=t0 + 10 * i + 2, c=1_000_000 + i)
                      for i in range(kernels))
    path.write_text(f"{head}, {extra}]{tail}")
    return path


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _until(cond: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    """Wait until ``cond()`` holds; fail at once if ``proc`` ended first (it did not reach the state)."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the command ended (status {proc.returncode}) before {what}: {err[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.communicate()
            pytest.fail(f"no {what} after {WAIT_S:.0f} s")
        time.sleep(0.002)  # a poll interval, not a synchronisation: the loop waits on the condition


def _nice() -> None:
    os.nice(19)  # the child yields the CPU to this test on a loaded box: it is signalled mid-work
    # A suite started under nohup (or as a background job) passes SIGHUP (SIGINT) ignored to its children,
    # and tracekit keeps an ignored signal ignored (by design): the child here starts with the defaults.
    for s in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def _leftovers(d: Path) -> list[str]:
    """Temp files, lock files and staging directories a writer leaves when it does not clean up."""
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".tmp", ".lock")) or ".shards-" in p.name
                  or ".stage-" in p.name or p.name.startswith(".ingest-stage-"))


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("big")
    return big_rank(d / "r0.json", 0, 150_000), big_rank(d / "r1.json", 1, 150_000)


@pytest.mark.parametrize(("sig", "whole_mb"), [(signal.SIGTERM, None), (signal.SIGINT, None), (signal.SIGHUP, None),
                                              (signal.SIGTERM, "0")])
def test_a_signal_during_ingest_leaves_no_lock_no_temp_and_the_old_output(big: tuple[Path, Path], tmp_path: Path,
                                                                         sig: signal.Signals, whole_mb: str | None) -> None:
    """``whole_mb`` "0": the rank-by-rank ingest (staged beside the output) instead of the whole one."""
    r0, r1 = big
    env = dict(os.environ)
    if whole_mb is not None:
        env["TRACEKIT_INGEST_WHOLE_MB"] = whole_mb
    out = tmp_path / "run.parquet"
    small = gpu_rank(0).write(tmp_path / "s0.json"), gpu_rank(1).write(tmp_path / "s1.json")
    first = subprocess.run([sys.executable, "-m", "tracekit", "ingest", *map(str, small), "-o", str(out)],
                           capture_output=True, text=True, timeout=WAIT_S)
    assert first.returncode == 0, first.stderr
    before = {p: _digest(p) for p in (r0, r1, out)}
    lock = sidecar(out, ".lock")
    proc = subprocess.Popen([sys.executable, "-m", "tracekit", "ingest", str(r0), str(r1), "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_nice, env=env)
    _until(lock.exists, proc, "the output's lock file appeared")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 128 + sig, err
    assert err == f"tracekit: interrupted ({signal.Signals(sig).name})\n"
    assert not lock.exists() and _leftovers(tmp_path) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.parquet", "s0.json", "s1.json"]  # nothing else left
    assert {p: _digest(p) for p in before} == before  # inputs and the old output as they were
    again = subprocess.run([sys.executable, "-m", "tracekit", "ingest", *map(str, small), "-o", str(out)],
                           capture_output=True, text=True, timeout=WAIT_S)
    assert again.returncode == 0 and "stale lock" not in again.stderr, again.stderr


def _shards(d: Path) -> Path:
    import polars as pl

    from tracekit.store import load_run, read_manifest, write_run

    run = load_run(H200)
    man = read_manifest(H200)
    d.mkdir()
    for r in (0, 1):
        write_run(run.events.filter(pl.col("rank") == r), d / f"rank-{r:05d}.parquet",
                  {**man, "ranks": {str(r): man["ranks"][str(r)]}})
    return d


WRITERS = {
    "ingest": lambda d, out: ["ingest", str(gpu_rank(0).write(d / "a0.json")), str(gpu_rank(1).write(d / "a1.json")),
                              "-o", str(out)],
    "export": lambda d, out: ["export", str(H200), "-o", str(out)],
    "align": lambda d, out: ["align", str(H200), "-o", str(out)],
    "report": lambda d, out: ["report", str(H200), "-o", str(out)],
    "merge": lambda d, out: ["merge", str(_shards(d / "run.parquet.d")), "-o", str(out)],
    "logs": lambda d, out: ["logs", str(SAMPLES / "logs" / "sglang-0.5.23.log"), "-o", str(out)],
}


@pytest.mark.parametrize("command", sorted(WRITERS))
def test_sigterm_while_the_output_is_written_removes_the_temp_file(command: str, tmp_path: Path) -> None:
    """Every writer (the one handler in tracekit.outputs): SIGTERM once the output's temp file is written
    and about to be renamed (tests/pause_cli.py holds it there until a signal comes)."""
    suffix = {"export": ".pftrace", "report": ".html"}.get(command, ".parquet")
    out = tmp_path / f"out{suffix}"
    out.write_bytes(b"the previous output\n")
    args = WRITERS[command](tmp_path, out)
    inputs = [q for a in args[1:] for q in ([Path(a)] if Path(a).is_file() else sorted(Path(a).glob("*")))
              if q.is_file() and q != out]
    before = {p: _digest(p) for p in [*inputs, out]}
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, str(PAUSE_CLI), str(ready), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _until(ready.exists, proc, "the temp file was written")
    ready.unlink()
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 143 and err.endswith("tracekit: interrupted (SIGTERM)\n"), err
    assert err.count("\n") == 1 or command == "report", err  # report may say what it drew first
    assert _leftovers(tmp_path) == [] and not [q for q in tmp_path.rglob("*") if ".parts" in q.name]
    assert {p: _digest(p) for p in before} == before


def test_the_handler_is_put_back_when_the_lock_is_released(tmp_path: Path) -> None:
    from tracekit.outputs import OutputLock, StopOnSignal

    was = signal.getsignal(signal.SIGTERM)
    with OutputLock(tmp_path / "o.parquet"), OutputLock(tmp_path / "p.parquet"):
        assert signal.getsignal(signal.SIGTERM) == StopOnSignal._on
    assert signal.getsignal(signal.SIGTERM) == was
