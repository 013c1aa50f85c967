"""Issue 12, capture under faults: real gloo ranks on the CPU, real signals, the real CLI.

Each test starts ``tracekit capture`` in its own session (like a shell job), follows its
progress lines, and sends the signal a user (or the kernel) would: Ctrl-C to the process
group, SIGINT to the launcher alone, SIGKILL to one rank mid-window or before the window,
a second capture to the same output. Checked: the exit status, the exact lines, the run
written, no process of the session left, no temp or lock file left.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import tty as termios_tty
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")

from tracekit.store import load_run

FAULT_CLI = Path(__file__).resolve().parent / "fault_cli.py"
SMALL = ["--device", "cpu", "--warmup", "1", "--batch-size", "2", "--ctx", "32", "--layers", "1"]


class Capture:
    """A ``tracekit capture`` process in its own session, its stderr followed line by line."""

    def __init__(self, cwd: Path, world: int, cycles: int, out: str = "run.parquet", fault: str | None = None,
                 extra: tuple[str, ...] = (), tty: bool = False) -> None:
        # fault "RANK@CYCLE:KIND": that rank fails at that cycle (tests/fault_cli.py; nothing in tracekit)
        # tty: stderr is a terminal (raw, so lines end in \n), where capture prints every rank's cycles
        # done every few seconds: the condition a test waits on to act inside the window
        cmd = [sys.executable, "-m", "tracekit"] if fault is None else [sys.executable, str(FAULT_CLI), fault]
        master, slave = pty.openpty() if tty else (-1, -1)
        if tty:
            termios_tty.setraw(slave)
        self.p = subprocess.Popen(
            [*cmd, "capture", *SMALL, "--world", str(world), "--cycles", str(cycles), *extra, "-o", out],
            cwd=cwd, stdout=subprocess.PIPE, stderr=slave if tty else subprocess.PIPE, text=True,
            start_new_session=True,
        )
        if tty:
            os.close(slave)
        self._stream = os.fdopen(master, "r", errors="replace") if tty else self.p.stderr
        self.err: list[str] = []
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._stream is not None
        with contextlib.suppress(OSError):  # a terminal whose last writer ended reads EIO: the end
            for line in self._stream:
                with self._cv:
                    self.err.append(line.rstrip("\n"))
                    self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def wait_window_cycles(self, n: int, warmup: int = 1) -> None:
        """Until every rank has done ``n`` cycles of its profiling window (the terminal's progress line
        ``capture: 6 s, cycles done: ranks 0-1 3/601``, printed every few seconds)."""
        def done(line: str) -> int:
            counts = [int(c) for c in re.findall(r"(\d+)/\d+", line.split("cycles done:", 1)[1])]
            return min(counts) - warmup

        self.wait_for(r"cycles done: ", lambda line: done(line) >= n)

    def wait_for(self, pattern: str, also: Callable[[str], bool] = lambda _: True, timeout: float = 240) -> str:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                for line in self.err:
                    if rx.search(line) and also(line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.err))
                self._cv.wait(min(left, 0.5))

    def pids(self) -> dict[int, int]:
        line = self.wait_for(r"pid per rank: ")
        return {int(r): int(p) for r, p in re.findall(r"(\d+): (\d+)", line.split("pid per rank:")[1])}

    def finish(self, timeout: float = 240) -> tuple[int, str]:
        assert self.p.stdout is not None
        out = self.p.stdout.read()
        rc = self.p.wait(timeout)
        self._reader.join(10)
        return rc, out


def _session_left(sid: int, wait_s: float = 15) -> list[str]:
    """Live (non-zombie) processes still in session ``sid``, after waiting up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        left = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if fields[0] != "Z" and int(fields[3]) == sid:
                left.append(f"{d.name}: {stat[:80]}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.3)


def _clean(d: Path, cap: Capture, *, shard_dir: bool = False) -> None:
    assert _session_left(cap.p.pid) == []
    names = sorted(p.name for p in d.iterdir())
    assert not [n for n in names if n.endswith((".tmp", ".lock"))], names
    assert ("run.parquet.d" in names) == shard_dir, names


def _verify_cycles(run_path: Path) -> dict[int, int]:
    ev = load_run(run_path).events
    v = ev.filter(pl.col("kind") == "range", pl.col("phase") == "verify", pl.col("phase_id").is_not_null())
    return {int(r): n for r, n in v.group_by("rank").agg(pl.col("cycle").n_unique()).iter_rows()}


@pytest.mark.parametrize("target", ["group", "launcher"])
def test_ctrl_c_ends_the_window_and_keeps_the_cycles(tmp_path: Path, target: str) -> None:
    cap = Capture(tmp_path, world=2, cycles=600, tty=True)
    cap.wait_window_cycles(1)  # inside the window (a cycle of it done): Ctrl-C now keeps cycles
    if target == "group":
        os.killpg(cap.p.pid, signal.SIGINT)  # Ctrl-C in a terminal: every process of the job
    else:
        os.kill(cap.p.pid, signal.SIGINT)  # the launcher alone
    rc, out = cap.finish()
    assert rc == 130, "\n".join(cap.err)
    stop = cap.wait_for(r"^capture: Ctrl-C: every rank ends its window after")
    n = int(re.search(r"after (\d+) of 600 cycles", stop).group(1))  # type: ignore[union-attr]
    assert 0 < n < 600
    assert stop.endswith("and writes what it captured (Ctrl-C again to abort)")
    first = out.splitlines()[0]
    assert first.startswith("wrote run.parquet (") and first.endswith(f"(interrupted: {n} of 600 cycles)")
    assert "interrupted: Ctrl-C ended the window early; the run holds the cycles captured on every rank" in out
    man = load_run(tmp_path / "run.parquet").manifest
    assert man["interrupted"]["cycles_done"] == n and man["interrupted"]["cycles_requested"] == 600
    assert "missing_ranks" not in man
    assert {r: s["window"]["cycles"] for r, s in man["ranks"].items()} == {"0": n, "1": n}
    assert _verify_cycles(tmp_path / "run.parquet") == {0: n, 1: n}  # the same cycles on every rank
    _clean(tmp_path, cap)


def test_second_capture_is_refused_and_a_second_ctrl_c_aborts(tmp_path: Path) -> None:
    cap = Capture(tmp_path, world=2, cycles=400)
    cap.wait_for(r"pid per rank: ")
    second = subprocess.run([sys.executable, "-m", "tracekit", "capture", *SMALL, "--world", "2", "-o", "run.parquet"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert second.returncode == 1
    assert second.stderr == (f"tracekit: error: run.parquet: another tracekit (pid {cap.p.pid}) is writing this output "
                             "(lock file run.parquet.lock; remove it only if that process is gone)\n")
    assert (tmp_path / "run.parquet.d").is_dir()  # the first capture's shard directory is untouched
    cap.wait_for(r"^capture: profiling window started")
    os.killpg(cap.p.pid, signal.SIGINT)
    cap.wait_for(r"^capture: Ctrl-C: ")
    os.killpg(cap.p.pid, signal.SIGINT)
    rc, out = cap.finish()
    assert rc == 130 and out == ""
    last = cap.err[-1]
    assert re.fullmatch(r"tracekit: error: run\.parquet: aborted \(SIGINT twice\): (nothing was captured|\d rank "
                        r"shard\(s\) kept in run\.parquet\.d; merge them with `tracekit merge run\.parquet\.d -o "
                        r"run\.parquet`)", last), last
    assert not (tmp_path / "run.parquet").exists()
    _clean(tmp_path, cap, shard_dir="kept in" in last)


def test_rank_killed_mid_window_is_a_partial_run(tmp_path: Path) -> None:
    cap = Capture(tmp_path, world=2, cycles=600, tty=True)
    pids = cap.pids()
    cap.wait_window_cycles(1)  # mid-window: a cycle of it done on every rank
    os.kill(pids[1], signal.SIGKILL)
    rc, out = cap.finish()
    assert rc == 3, "\n".join(cap.err)
    root = cap.wait_for(r"^rank 1: killed by SIGKILL")
    assert re.fullmatch(r"rank 1: killed by SIGKILL in the profiling window after \d+ of 600 cycles \(root cause\)",
                        root), "\n".join(cap.err)  # the whole stderr: which rank was named first, and why
    why = root.removeprefix("rank 1: ").removesuffix(" (root cause)")
    assert f"  missing rank 1: {why}" in out.splitlines()
    run = tmp_path / "run.parquet"
    why += " (its log: run.parquet.d/rank-00001.log)"  # the manifest also names the log kept
    assert load_run(run).ranks == [0] and load_run(run).manifest["missing_ranks"] == {"1": why}
    warn = f"tracekit: warning: run.parquet: partial run: rank 1 missing (rank 1: {why})"
    for cmd in (["attribute"], ["spec"], ["gap"]):
        r = subprocess.run([sys.executable, "-m", "tracekit", *cmd, "run.parquet"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert warn in r.stderr.splitlines(), (cmd, r.stderr)
    _clean(tmp_path, cap, shard_dir=True)  # the logs are kept
    assert sorted(p.name for p in (tmp_path / "run.parquet.d").iterdir()) == ["rank-00000.log", "rank-00001.log"]


def test_rank_killed_before_the_window_names_the_root_cause_first(tmp_path: Path) -> None:
    cap = Capture(tmp_path, world=4, cycles=2)
    pids = cap.pids()
    cap.wait_for(r"^capture: process group up")
    os.kill(pids[2], signal.SIGKILL)
    rc, out = cap.finish()
    assert rc == 1 and out == ""
    ranks = [ln for ln in cap.err if re.match(r"rank \d: ", ln)]
    assert ranks[0] == "rank 2: killed by SIGKILL before the profiling window (root cause)", cap.err
    peers = ranks[1:4]
    assert sorted(ln.split(":")[0] for ln in peers) == ["rank 0", "rank 1", "rank 3"]
    for ln in peers:
        assert re.match(r"rank \d: lost its peer \(rank 2\) before the profiling window: failed: \w+", ln), ln
        assert len(ln) < 300
    assert cap.err[-1] == ("tracekit: error: run.parquet: no rank produced data: rank 2: killed by SIGKILL before the "
                           "profiling window (root cause); ranks 0-1,3 lost their peer (logs kept in run.parquet.d/)")
    assert len(cap.err) < 25
    logs = sorted(p.name for p in (tmp_path / "run.parquet.d").iterdir())
    assert logs == [f"rank-0000{r}.log" for r in range(4)]
    _clean(tmp_path, cap, shard_dir=True)


def test_rank_killed_after_its_window_costs_the_others_nothing(tmp_path: Path) -> None:
    """Issue 30: rank 1 dies in the unprofiled cycles after the window (cycle 4: 1 warm-up + 3 profiled),
    while rank 0 runs them too and then waits on its dead peer in a collective. Each rank wrote its
    shard before those cycles: both windows are kept, rank 1 is named as what ended the run."""
    cap = Capture(tmp_path, world=2, cycles=3, fault="1@4:exit")  # rank 1 alone, a real process exit at that point
    rc, out = cap.finish()
    assert rc == 0, "\n".join(cap.err)
    assert cap.wait_for(r"^rank 1: exited") == "rank 1: exited with code 17 after its profiling window (root cause)"
    assert "ranks: 2 of 2 captured (world 2); cycles per rank: 3..3 of 3 (after 1 warm-up)" in out.splitlines()
    run = tmp_path / "run.parquet"
    assert _verify_cycles(run) == {0: 3, 1: 3}
    assert "missing_ranks" not in load_run(run).manifest
    assert "reference timed before the window only" in out  # rank 1 never timed the cycles after it
    _clean(tmp_path, cap, shard_dir=True)  # the logs are kept


def test_a_stopped_rank_is_named_the_root_cause(tmp_path: Path) -> None:
    """Issue 30: SIGSTOP on rank 1 once its window started (a stopped process, like Ctrl-Z on one rank):
    rank 0 then blocks in a collective waiting for it and goes silent too. Rank 1 is killed for no
    progress and named the root cause (found stopped); rank 0, killed for silence too or failing once
    its peer is gone, lost its peer (or, when it kept its window, the run is partial without rank 1).
    No process of the session is left (a stopped one included)."""
    cap = Capture(tmp_path, world=2, cycles=2000, extra=("--timeout", "30"))
    pids = cap.pids()
    try:
        cap.wait_for(r"^capture: profiling window started")
        os.kill(pids[1], signal.SIGSTOP)
        rc, out = cap.finish(timeout=400)
    finally:
        for pid in pids.values():  # a failed check must leave no stopped process behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if cap.p.poll() is None:
            os.killpg(cap.p.pid, signal.SIGKILL)
            cap.p.wait(60)
    assert rc in (1, 3), "\n".join(cap.err)
    root = cap.wait_for(r"^rank 1: .*\(root cause\)$")
    assert re.fullmatch(r"rank 1: stopped \(SIGSTOP or SIGTSTP\), no progress for 30 s \(killed\) in the profiling "
                        r"window after \d+ of 2000 cycles \(root cause\)", root), cap.err
    if rc == 1:  # rank 0 lost its window too
        peer = cap.wait_for(r"^rank 0: lost its peer")
        assert re.fullmatch(r"rank 0: lost its peer \(rank 1\) in the profiling window after \d+ of 2000 cycles: .+",
                            peer)
        assert out == "" and cap.err[-1] == (f"tracekit: error: run.parquet: no rank produced data: {root}; rank 0 "
                                             "lost its peer (logs kept in run.parquet.d/)"), cap.err
    else:  # rank 0 ended its window when its peer went away and kept it
        why = root.removeprefix("rank 1: ").removesuffix(" (root cause)")
        assert f"  missing rank 1: {why}" in out.splitlines(), out
        assert load_run(tmp_path / "run.parquet").ranks == [0]
    _clean(tmp_path, cap, shard_dir=True)


def test_one_sigterm_to_the_launcher_is_said_as_one(tmp_path: Path) -> None:
    """Issue 30: one SIGTERM to a capture aborts it and is named as it came, "aborted (SIGTERM)" (it
    was said "SIGTERM twice"); no process of the session, lock or temp file is left."""
    cap = Capture(tmp_path, world=2, cycles=2000)
    cap.wait_for(r"^capture: profiling window started")
    os.kill(cap.p.pid, signal.SIGTERM)
    rc, out = cap.finish()
    assert rc == 130 and out == "", "\n".join(cap.err)
    assert re.fullmatch(r"tracekit: error: run\.parquet: aborted \(SIGTERM\): (nothing was captured|\d rank "
                        r"shard\(s\) kept in run\.parquet\.d; merge them with `tracekit merge run\.parquet\.d -o "
                        r"run\.parquet`)", cap.err[-1]), cap.err
    assert not (tmp_path / "run.parquet").exists()
    _clean(tmp_path, cap, shard_dir="kept in" in cap.err[-1])
