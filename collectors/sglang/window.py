"""tracekit's own recording window inside every SGLang scheduler process (profile modes lite, timing).

In ``full`` mode SGLang's ``/start_profile`` records everything, tracekit's phase ranges
included (``record_function``). In ``lite`` the profiler records CUDA activity only, so a
``record_function`` range is lost; in ``timing`` no profiler runs at all. In both, each
scheduler process records its phase ranges itself, into a ``RangeRecorder``
(``collectors/ranges.py``: ``time.time_ns()`` at open and close, the clock Kineto stamps its
events with; the native thread id; CUDA events around each phase in ``timing`` on a GPU), and
hands them out through files in the ranks' ``TRACEKIT_SGLANG_DIR`` (where they already write
their environment manifests: rankinfo.py), on the server's host.

Protocol (capture side ``open_window`` / ``WindowHandle``; server side ``Agent``):

1. The capture writes ``window.json`` atomically: ``{"id", "mode": "lite"|"timing",
   "cycles": N or null, "state": "open", "created_unix_ns", "deadline_unix_ns"}``.
2. Every scheduler process notices it (the hooks call ``Agent.tick`` at each cycle boundary
   and look at the file at most every ``POLL_NS``; a watcher thread looks instead while the
   scheduler has been idle for ``Agent.idle_ns``), starts recording (``hooks.start_recording``,
   ``record_function`` off) and writes ``<id>/ack-TP-<r>.json``, exclusively: a second process
   with the same TP rank (data or pipeline parallel replicas) writes ``clash-TP-<r>-<pid>.json``
   instead and records nothing, and the capture refuses the window naming both pids.
3. It stops when ``state`` becomes ``"stop"`` (lite: after one more cycle, whose ranges the capture
   cuts away, so that SGLang v2's accept lengths of the last profiled cycle, handed over in the
   next one, are recorded; for a scheduler that runs no more cycles, ``Agent.idle_ns`` after the stop
   was seen), or another id appears, or the file is removed,
   or, with ``cycles``, at the cycle boundary after that many cycles, or at the deadline or
   after ``MAX_ROWS`` ranges (a capture that died with its window open; a window past its
   deadline is never started); then writes
   ``<id>/ranges-TP-<r>.parquet`` (range rows in the schema's columns, not finalized) and last
   ``<id>/ranges-TP-<r>.json`` (rank, pid, Kineto thread key -> native thread id, why it
   stopped, cycles, window times): the JSON says the rank is done.

Nothing here may break serving: every failure is logged once and the hooked call goes on.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("tracekit.sglang")

CONTROL = "window.json"
MODES = ("lite", "timing")
POLL_NS = 100_000_000  # the hooks look at the control file at most every 100 ms
IDLE_NS = 1_000_000_000  # the watcher acts when no cycle began for 1 s ...
IDLE_CYCLES = 4  # ... and for this many times the median of the window's last cycles (a loaded machine's are slow),
IDLE_MAX_NS = 30_000_000_000  # ... at most 30 s
MAX_ROWS = 1_000_000  # a window stops itself after this many ranges (~100k cycles), whatever the capture does
ACK_RE = re.compile(r"^ack-TP-(\d+)\.json$")
DONE_RE = re.compile(r"^ranges-TP-(\d+)\.json$")
CLASH_RE = re.compile(r"^clash-TP-(\d+)-\d+\.json$")


def _staged(path: Path, data: bytes) -> str:
    """``data`` in a temporary file beside ``path`` (its directory made): the caller renames or links it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _staged(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _claim(path: Path, data: bytes) -> bool:
    """Write ``path`` only if nobody has: False when another process wrote it first. A hard link of a
    staged file is exclusive and complete at once; where the filesystem has no hard links, an exclusive
    create (O_EXCL) is, and the content follows it (readers take an unreadable file as not yet written)."""
    tmp = _staged(path, data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return True
    finally:
        Path(tmp).unlink(missing_ok=True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


# --- server side: in every scheduler process ------------------------------------------------


class Agent:
    """One scheduler process's side of the protocol. ``rec`` is the hooks' Recorder (``cycle``, ``rank``)."""

    def __init__(self, rec: Any, directory: Path | None = None) -> None:
        self.rec = rec
        self._dir = directory
        self._checked = False
        self._refused = False  # the control directory was refused (said once in the log)
        self._lock = threading.Lock()
        self._last_tick = time.monotonic_ns()
        self._cycle_ns: list[int] = []  # the last few intervals between the window's cycle boundaries
        self._last_poll = 0
        self._seen: tuple[int, int] | None = None  # (inode, mtime) of the control file last read
        self._done: set[str] = set()
        self._active: dict[str, Any] | None = None
        self._recorder: Any = None
        self._device: int | None = None
        self._watcher: threading.Thread | None = None

    def directory(self) -> Path:
        """The private control directory (``rankinfo.private_dir``, checked once); ControlDirError if unusable."""
        if self._dir is None or not self._checked:
            from tracekit.collectors.sglang.rankinfo import private_dir

            self._dir = private_dir(self._dir)
            self._checked = True
        return self._dir

    def tick(self) -> None:
        """At a cycle boundary on the scheduler thread (nothing of this process's phases is open)."""
        now = time.monotonic_ns()
        if self._active is not None:  # the window's cycles only (not the model load, not idle hours before it)
            self._cycle_ns = [*self._cycle_ns[-8:], now - self._last_tick]
        self._last_tick = now
        act = self._active
        if act is not None and act["cycles"] is not None and self.rec.cycle - act["first_cycle"] >= act["cycles"]:
            with self._lock:
                self._finish("cycles")
            return
        if act is not None and act["drain"] is not None and self.rec.cycle >= act["drain"]:
            with self._lock:
                self._finish("stopped by the capture")
            return
        if now - self._last_poll < POLL_NS:
            return
        self._last_poll = now
        if self._device is None:
            self._device = _current_device()
        with self._lock:
            self._poll()

    def idle_ns(self) -> int:
        """How long without a cycle boundary makes the scheduler idle: ``IDLE_NS``, or ``IDLE_CYCLES`` times
        the median of its last cycles when that is longer (on a loaded machine a cycle can outlast 1 s; taking
        such a scheduler for idle ended a lite window without its drain cycle, losing the last accept lengths).
        The median: one long pause between requests does not make a later stop wait."""
        recent = sorted(self._cycle_ns)
        return min(IDLE_MAX_NS, max(IDLE_NS, IDLE_CYCLES * recent[len(recent) // 2])) if recent else IDLE_NS

    def _watch(self) -> None:
        """While a window records: stop it for an idle scheduler (no cycle boundary would)."""
        while self._active is not None:
            time.sleep(POLL_NS / 1e9 * 2)
            if time.monotonic_ns() - self._last_tick < self.idle_ns():
                continue
            try:
                with self._lock:
                    if self._device is not None and self._recorder is not None and self._recorder.cuda_events:
                        import torch

                        torch.cuda.set_device(self._device)
                    self._poll(boundary=False)
            except Exception:
                log.exception("tracekit: window watcher")
                return

    def _poll(self, boundary: bool = True) -> None:
        """Act on the control file. ``boundary``: called at a cycle boundary (the cycle counter has moved
        to the cycle about to run), not by the watcher of an idle scheduler (its last cycle is done)."""
        from tracekit.collectors.sglang.rankinfo import ControlDirError, inside

        try:
            path = self.directory() / CONTROL
        except ControlDirError as exc:
            if not self._refused:
                self._refused = True
                log.error("tracekit: %s; no recording window will start in this process", exc)
            return
        try:
            st = path.stat()
        except OSError:
            if self._active is not None:
                self._finish("control file removed", boundary)
            return
        act = self._active
        if (act is not None and act["drain"] is not None and not boundary
                and time.monotonic_ns() - act["drain_since"] >= self.idle_ns()):  # idle: the drained cycle never came
            self._finish("stopped by the capture", boundary)
            act = None
        if act is not None and (time.time_ns() > act["deadline"] or len(self._recorder) >= MAX_ROWS):
            self._finish("deadline passed" if time.time_ns() > act["deadline"] else f"{MAX_ROWS} ranges recorded",
                         boundary)
        key = (st.st_ino, st.st_mtime_ns)
        if key == self._seen:
            return
        doc = _read_json(path)
        if doc is None:
            return  # half-written by a non-atomic writer: read it next time
        self._seen = key
        wid, state = str(doc.get("id")), doc.get("state")
        if self._active is not None and (wid != self._active["id"] or state != "open"):
            if wid == self._active["id"] and self._active["mode"] == "lite":
                # one more cycle: SGLang v2 hands the last profiled cycle's accept lengths over in the next
                # one (the capture cuts that cycle's ranges away with the profiler's span, keeps the facts).
                # Seen by the watcher (no boundary for a while: an idle scheduler, or one that paused, as
                # while it exports its trace), the next cycle to run is the drained one; an idle scheduler's
                # window ends idle_ns after the stop was seen (never from the last boundary before the pause:
                # that lost the last cycle's accept lengths on a loaded machine)
                if self._active["drain"] is None:
                    self._active["drain"] = self.rec.cycle + (1 if boundary else 2)
                    self._active["drain_since"] = time.monotonic_ns()
            else:
                self._finish("stopped by the capture" if wid == self._active["id"] else "a new window replaced it",
                             boundary)
        deadline = doc.get("deadline_unix_ns")
        if (self._active is None and state == "open" and wid not in self._done and doc.get("mode") in MODES
                and isinstance(deadline, int) and time.time_ns() < deadline):
            try:
                inside(self.directory(), doc.get("id"))
            except ControlDirError as exc:  # an id that would lead out of the directory: never followed
                self._done.add(wid)
                log.error("tracekit: %s; window not started", exc)
                return
            self._start(doc)

    def _rank(self) -> int | None:
        r = self.rec.rank
        if r is None:
            from tracekit.collectors.sglang.runtime import rank_of

            r = rank_of(None)
        return r if isinstance(r, int) else None

    def _start(self, doc: dict[str, Any]) -> None:
        from tracekit.collectors.hooks import start_recording
        from tracekit.collectors.ranges import RangeRecorder
        from tracekit.collectors.sglang.rankinfo import inside

        mode = str(doc["mode"])
        cycles = doc.get("cycles")
        cuda = mode == "timing" and self._device is not None
        try:
            self._recorder = RangeRecorder(cuda_events=cuda)
        except Exception as exc:  # torch.cuda unusable here: host times only
            log.warning("tracekit: CUDA events unavailable (%r): host times only", exc)
            self._recorder = RangeRecorder(cuda_events=False)
        self._active = {"id": str(doc["id"]), "mode": mode, "cycles": cycles if isinstance(cycles, int) else None,
                        "first_cycle": self.rec.cycle, "start_unix_ns": time.time_ns(),
                        "deadline": int(doc["deadline_unix_ns"]), "drain": None, "drain_since": 0}
        self._cycle_ns = []
        rank = self._rank()
        ack = {"rank": rank, "pid": os.getpid(), "mode": mode, "cuda_events": self._recorder.cuda_events,
               "start_unix_ns": self._active["start_unix_ns"], "cycle": self.rec.cycle}
        ack_path = inside(self.directory(), self._active["id"]) / f"ack-TP-{_tag(rank)}.json"
        try:
            claimed = _claim(ack_path, json.dumps(ack).encode())
        except OSError:  # as before the claim: record; the capture names the rank that never acked
            log.exception("tracekit: cannot write %s", ack_path)
            claimed = True
        if not claimed:
            # another scheduler process has this TP rank (data or pipeline parallel replicas): its files
            # would be overwritten by ours; say so, record nothing
            other = _read_json(ack_path) or {}
            log.error("tracekit: TP rank %s of window %s is claimed by pid %s too: not recording",
                      rank, self._active["id"], other.get("pid"))
            self._write(f"clash-TP-{_tag(rank)}-{os.getpid()}.json",
                        json.dumps({**ack, "other_pid": other.get("pid")}).encode())
            self._done.add(self._active["id"])
            self._active, self._recorder = None, None
            return
        start_recording(self._recorder, record_function=False)
        self._watcher = threading.Thread(target=self._watch, name="tracekit-window", daemon=True)
        self._watcher.start()

    def _finish(self, why: str, boundary: bool = True) -> None:
        from tracekit.collectors.hooks import stop_recording

        act, rec = self._active, self._recorder
        if act is None or rec is None:
            return
        stop_recording()
        self._active, self._recorder = None, None
        self._done.add(act["id"])
        rank = self._rank()
        end = time.time_ns()
        try:
            frame = rec.frame(rank if rank is not None else -1, os.getpid())
            import io

            buf = io.BytesIO()
            frame.write_parquet(buf)
            self._write(f"ranges-TP-{_tag(rank)}.parquet", buf.getvalue(), act["id"])
            info = {"rank": rank, "pid": os.getpid(), "mode": act["mode"], "why": why, "ranges": len(rec),
                    "cuda_events": rec.cuda_events, "device": self._device,
                    "cycles": self.rec.cycle - act["first_cycle"] + (0 if boundary else 1),
                    "first_cycle": act["first_cycle"],
                    "start_unix_ns": act["start_unix_ns"], "end_unix_ns": end,
                    "thread_keys": {str(k): v for k, v in rec.thread_map().items()}}
            self._write(f"ranges-TP-{_tag(rank)}.json", json.dumps(info).encode(), act["id"])
        except Exception:
            log.exception("tracekit: writing the phase ranges of window %s failed", act["id"])

    def _write(self, name: str, data: bytes, wid: str | None = None) -> None:
        wid = wid if wid is not None else (self._active or {}).get("id", "x")
        from tracekit.collectors.sglang.rankinfo import ControlDirError, inside

        try:
            _write_atomic(inside(self.directory(), str(wid)) / name, data)
        except (OSError, ControlDirError):
            log.exception("tracekit: cannot write %s for window %s", name, wid)


def _tag(rank: int | None) -> str:
    return str(rank) if rank is not None and rank >= 0 else "x"


def _current_device() -> int | None:
    """The scheduler thread's CUDA device, or None without an initialised CUDA context."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:
        return None
    return None


# --- capture side ---------------------------------------------------------------------------


@dataclass
class RankRanges:
    """One rank's delivery: its range rows (schema columns, not finalized) and its info JSON."""

    rank: int
    events: Any  # pl.DataFrame
    info: dict[str, Any]


class WindowHandle:
    """The capture's handle on one window: wait for acks, stop it, collect every rank's ranges."""

    def __init__(self, directory: Path, wid: str, mode: str, cycles: int | None, deadline_unix_ns: int) -> None:
        self.directory = directory
        self.id = wid
        self.mode = mode
        self.cycles = cycles
        self.deadline_unix_ns = deadline_unix_ns
        self.path = directory / wid

    def _ranks(self, pattern: re.Pattern[str]) -> set[int]:
        if not self.path.is_dir():
            return set()
        return {int(m.group(1)) for p in self.path.iterdir() if (m := pattern.match(p.name))}

    def _wait(self, pattern: re.Pattern[str], world: int, timeout_s: float,
              on_idle: Callable[[], None] | None) -> list[int]:
        deadline = time.monotonic() + timeout_s
        while True:
            missing = [r for r in range(world) if r not in self._ranks(pattern)]
            if not missing or time.monotonic() >= deadline:
                return missing
            if on_idle is not None:
                on_idle()
            time.sleep(0.05)

    def wait_acks(self, world: int, timeout_s: float, on_idle: Callable[[], None] | None = None) -> list[int]:
        """Ranks (of 0..world-1) that have not started recording within ``timeout_s``."""
        return self._wait(ACK_RE, world, timeout_s, on_idle)

    def acks(self) -> dict[int, dict[str, Any]]:
        out = {}
        for r in self._ranks(ACK_RE):
            doc = _read_json(self.path / f"ack-TP-{r}.json")
            if doc is not None:
                out[r] = doc
        return out

    def clashes(self) -> dict[int, list[int]]:
        """TP ranks claimed by more than one scheduler process: rank -> the pids (first claimant first)."""
        out: dict[int, list[int]] = {}
        if not self.path.is_dir():
            return out
        for p in sorted(self.path.iterdir()):
            if CLASH_RE.match(p.name) and (doc := _read_json(p)) is not None:
                pids = out.setdefault(int(doc.get("rank", -1)), [doc.get("other_pid", -1)])
                pids.append(int(doc.get("pid", -1)))
        return out

    def stop(self) -> None:
        _write_control(self.directory, {"id": self.id, "mode": self.mode, "cycles": self.cycles, "state": "stop",
                                        "created_unix_ns": time.time_ns(), "deadline_unix_ns": self.deadline_unix_ns})

    def wait_ranges(self, world: int, timeout_s: float, on_idle: Callable[[], None] | None = None) -> list[int]:
        """Ranks that have not delivered their ranges within ``timeout_s``."""
        return self._wait(DONE_RE, world, timeout_s, on_idle)

    def ranges(self, world: int) -> list[RankRanges]:
        import polars as pl

        from tracekit.errors import TracekitError

        out = []
        for r in range(world):
            info = _read_json(self.path / f"ranges-TP-{r}.json")
            pq = self.path / f"ranges-TP-{r}.parquet"
            if info is None:
                raise TracekitError(f"rank {r}: no readable ranges-TP-{r}.json", path=str(self.path))
            try:
                ev = pl.read_parquet(pq)
            except Exception as exc:
                raise TracekitError(f"rank {r}: unreadable phase ranges ({exc.__class__.__name__})", path=str(pq)) from None
            out.append(RankRanges(rank=r, events=ev, info=info))
        return out


def _write_control(directory: Path, doc: dict[str, Any]) -> None:
    _write_atomic(directory / CONTROL, json.dumps(doc).encode())


def open_window(directory: Path, mode: str, cycles: int | None, max_s: float = 3600.0) -> WindowHandle:
    """Open a window of ``mode`` on every scheduler process that reads ``directory``.

    ``max_s``: the window's deadline; a rank stops recording then even if the capture never says
    so (a capture killed with its window open), and no rank starts a window past its deadline.
    """
    if mode not in MODES:
        raise ValueError(f"window mode must be one of {MODES}, not {mode!r}")
    now = time.time_ns()
    wid = f"window-{now}-{uuid.uuid4().hex[:6]}"
    deadline = now + int(max_s * 1e9)
    (directory / wid).mkdir(parents=True, exist_ok=True)
    _write_control(directory, {"id": wid, "mode": mode, "cycles": cycles, "state": "open", "created_unix_ns": now,
                               "deadline_unix_ns": deadline})
    return WindowHandle(directory, wid, mode, cycles, deadline)
