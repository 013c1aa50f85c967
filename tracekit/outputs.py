"""Where a command may write: one rule for every output, temp names that fit, one writer at a time.

- :func:`check_output` refuses, before anything is read, an output that is one of the inputs
  (exit 2), a name longer than the file system allows (exit 1) and an output whose parent
  directory does not exist (exit 1): tracekit never creates a directory you did not name.
- :func:`atomic_write` is how every output file is written: into a temp file beside it
  (:func:`temp_beside`), renamed over the output when complete (:func:`publish`); on any failure
  the temp file is removed and the output left as it was.
- :func:`temp_beside` is a temp file in the output's directory whose name fits whenever the
  output's own name fits (``.NAME.xxxxxxxx.tmp``, NAME shortened when needed).
- :func:`sidecar` is a fixed name beside an output (``run.parquet.lock``, ``run.parquet.d``),
  shortened with a hash of the full name when the plain one would not fit.
- :class:`OutputLock` is ``<output>.lock`` beside the output, created exclusively and holding
  the writer's pid, host and process start time; a second writer is refused naming that pid,
  and a lock whose process no longer runs (or is another process now) is stale and replaced.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, ClassVar

from tracekit.errors import OutputError, OutputIsInputError, OutputLockedError
from tracekit.procfs import start_ticks

DEFAULT_NAME_MAX = 255
_TEMP_RANDOM = 8  # characters tempfile adds


def name_max(directory: str | os.PathLike[str]) -> int:
    """Bytes one file name may have in ``directory`` (its nearest existing ancestor)."""
    d = Path(directory)
    while not d.exists() and d != d.parent:
        d = d.parent
    try:
        return int(os.pathconf(d if str(d) else ".", "PC_NAME_MAX"))
    except (OSError, ValueError):
        return DEFAULT_NAME_MAX


def _fit(name: str, limit: int) -> str:
    """``name`` cut to at most ``limit`` UTF-8 bytes, never inside a character."""
    raw = os.fsencode(name)
    if len(raw) <= limit:
        return name
    return raw[: max(limit, 0)].decode("utf-8", errors="ignore")


FULL_DISK_BYTES = 1 << 20  # less free space than this after a failed write: the disk is full


def named_os_error(exc: BaseException, dest: str | os.PathLike[str]) -> BaseException:
    """The error a failed write of ``dest`` should raise (its temp file already removed): an OS
    error names ``dest`` when it names no file; a writer library's own error (polars reports a
    full disk as a Parquet transport error) becomes ENOSPC when the disk has no room left."""
    if isinstance(exc, OSError):
        if exc.filename is None and exc.errno is not None:
            return OSError(exc.errno, exc.strerror or str(exc), os.fspath(dest))
        return exc
    if isinstance(exc, Exception):
        try:
            st = os.statvfs(Path(dest).parent)
        except OSError:
            return exc
        if st.f_bavail * st.f_frsize < FULL_DISK_BYTES:
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fspath(dest))
    return exc


def temp_beside(dest: str | os.PathLike[str]) -> str:
    """Create an empty temp file next to ``dest`` and return its path (its name always fits)."""
    out = Path(dest)
    parent = out.parent
    limit = name_max(parent)
    stem = _fit(out.name, limit - 2 - _TEMP_RANDOM - len(".tmp"))
    with signals_deferred():  # a stop signal finds it registered (removed) or not yet made
        fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=parent)
        os.close(fd)
        _TEMPS.add(tmp)
    return tmp


def publish(tmp: str | os.PathLike[str], dest: str | os.PathLike[str]) -> None:
    """Give a finished temp file the permissions a plain ``open(dest, "w")`` would (mkstemp makes
    it 0600), then rename it over ``dest`` atomically."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, dest)
    _TEMPS.discard(os.fspath(tmp))


@contextlib.contextmanager
def atomic_write(dest: str | os.PathLike[str]) -> Iterator[str]:
    """Write ``dest`` atomically: yields the path of a temp file beside it for the body to write;
    when the body returns, the temp file is renamed over ``dest`` (:func:`publish`). On any failure
    (the body's or the rename's) the temp file is removed, ``dest`` is left as it was, and the
    error is raised naming ``dest`` (:func:`named_os_error`: a full disk is ENOSPC)."""
    tmp = temp_beside(dest)
    try:
        yield tmp
        publish(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _TEMPS.discard(tmp)
        named = named_os_error(exc, dest)
        if named is not exc:
            raise named from None
        raise


def sidecar(dest: str | os.PathLike[str], suffix: str) -> Path:
    """``dest`` + ``suffix`` beside ``dest``; when that name is too long, a shortened name with a
    hash of the full one (deterministic, so every process finds the same file)."""
    out = Path(dest)
    limit = name_max(out.parent)
    full = out.name + suffix
    if len(os.fsencode(full)) <= limit:
        return out.with_name(full)
    tag = "~" + hashlib.sha1(os.fsencode(out.name)).hexdigest()[:8]
    return out.with_name(_fit(out.name, limit - len(tag) - len(os.fsencode(suffix))) + tag + suffix)


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        return False
    return a.resolve() == b.resolve()


def _inside(child: Path, directory: Path) -> bool:
    try:
        child.resolve().relative_to(directory.resolve())
    except ValueError:
        return False
    return True


def _expand(inputs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    out: list[Path] = []
    for raw in inputs:
        s = os.fspath(raw)
        if glob.has_magic(s) and not os.path.exists(s):
            out.extend(Path(h) for h in glob.glob(s, recursive=True))
        else:
            out.append(Path(s))
    return out


def check_name(path: str | os.PathLike[str]) -> None:
    """Refuse a path with a component longer than the file system allows (one line, not a traceback)."""
    p = Path(path)
    for part in p.parts:
        n = len(os.fsencode(part))
        limit = name_max(p.parent)
        if n > limit:
            raise OutputError(f"file name too long ({n} bytes in one name; this file system allows {limit})",
                              path=str(path))


def check_output(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (), *,
                 runs: bool = True) -> Path:
    """The one rule for every output path; see the module docstring. Returns ``out`` as a Path.

    ``runs``: the inputs are runs (a file or a shard directory), so writing inside an input
    directory is refused too; trace directories (ingest) only refuse their own files.
    """
    p = Path(out)
    check_name(p)
    for src in _expand(inputs):
        if _same(p, src):
            raise OutputIsInputError(f"the output is an input: writing it would destroy {src} (nothing was read "
                                     "or written; choose another output)", path=str(p))
        if runs and src.is_dir() and _inside(p, src):
            raise OutputIsInputError(f"the output is inside the input directory {src} (nothing was read or written; "
                                     "choose another output)", path=str(p))
    parent = p.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"directory {parent} {what} (tracekit creates no missing directories: "
                          f"mkdir -p {parent} first if it is the one you meant)", path=str(p))
    if p.is_dir():
        raise OutputError("is a directory (give a file name)", path=str(p))
    return p


def _alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = start_ticks(pid)
    return start is None or now is None or now == start


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_TEMPS: set[str] = set()  # temp files begun (temp_beside) and not yet published or removed
_HELD: set[OutputLock] = set()  # locks this process holds


class Stopped(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP while an output lock is held: the command unwinds (temp files removed,
    locks released) and ends with status ``exit_code`` (128 + the signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


def stopped_line(signum: int) -> str:
    """The one line of a command ended by a signal."""
    return f"tracekit: interrupted ({signal.Signals(signum).name})"


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """The stop signals held back (in the main thread) while a lock or temp file is made or removed and
    registered: one that comes meanwhile is handled right after, never between the two."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def remove_leftovers() -> None:
    """The temp files this process began and did not publish, and the locks it holds, removed: what a
    stop signal's unwinding missed (``guarded`` calls it before a stopped command ends; a second signal
    calls it at once)."""
    for tmp in list(_TEMPS):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        _TEMPS.discard(tmp)
    for lock in list(_HELD):
        lock.release()


class StopOnSignal:
    """The handler of SIGINT / SIGTERM / SIGHUP while this process holds an output lock (see the module
    docstring); installed when the first lock is taken in the main thread, the previous handlers put
    back when the last one is released. A handler set meanwhile by someone else (the capture
    launcher's :class:`Interrupts`) is theirs until they restore ours."""

    _depth = 0
    _prev: ClassVar[dict[int, Any]] = {}
    _stopping = False

    @classmethod
    def _on(cls, signum: int, _frame: FrameType | None) -> None:
        if not cls._stopping:
            cls._stopping = True
            raise Stopped(signum)
        remove_leftovers()  # a second signal while unwinding: end now
        with contextlib.suppress(Exception):
            sys.stderr.write(stopped_line(signum) + "\n")
            sys.stderr.flush()
        os._exit(128 + signum)

    @classmethod
    def enter(cls) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if cls._depth == 0:
            cls._stopping = False
            for s in STOP_SIGNALS:
                with contextlib.suppress(ValueError, OSError):
                    prev = signal.getsignal(s)
                    if prev == signal.SIG_IGN:  # ignored by whoever started us (nohup): stays ignored
                        continue
                    cls._prev[s] = signal.signal(s, cls._on)
        cls._depth += 1

    @classmethod
    def leave(cls) -> None:
        if threading.current_thread() is not threading.main_thread() or cls._depth == 0:
            return
        cls._depth -= 1
        if cls._depth == 0:
            for s, h in cls._prev.items():
                with contextlib.suppress(ValueError, TypeError, OSError):
                    if signal.getsignal(s) == cls._on:  # still ours: put the previous one back
                        signal.signal(s, h)
            cls._prev.clear()


class OutputLock:
    """``<output>.lock``: one writer per output at a time (see the module docstring).

    ``stale`` is set to the pid of the dead holder when a stale lock was replaced.
    """

    def __init__(self, out: str | os.PathLike[str]) -> None:
        self.out = Path(out)
        self.path = sidecar(self.out, ".lock")
        self.stale: int | None = None
        self._held = False

    def _holder(self) -> dict[str, object] | None:
        """The lock file's record, or None while it is being written or when it is garbage (not an
        object, or a pid that is no positive integer of the pid range)."""
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(doc, dict):
            return None
        pid = doc.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < (1 << 22):  # Linux pid_max <= 2^22
            return None
        return doc

    def refuse_if_held(self) -> None:
        """OutputLockedError now if a live process on this host holds the lock (a command that
        takes seconds to start, like capture importing torch, checks first; ``acquire`` still decides)."""
        holder = self._holder()
        if holder is None:
            return
        pid = int(str(holder["pid"]))
        host = str(holder.get("host", ""))
        start = holder.get("start")
        if host != socket.gethostname() or _alive(pid, None if start is None else str(start)):
            raise self._locked(pid, host)

    def _locked(self, pid: int, host: str) -> OutputLockedError:
        where = f"pid {pid}" + ("" if host == socket.gethostname() else f" on host {host}")
        return OutputLockedError(f"another tracekit ({where}) is writing this output (lock file {self.path}; "
                                 "remove it only if that process is gone)", path=str(self.out))

    def acquire(self) -> OutputLock:
        StopOnSignal.enter()  # before the lock file exists: a signal from here on removes it
        try:
            return self._acquire()
        except BaseException:
            StopOnSignal.leave()
            raise

    def _acquire(self) -> OutputLock:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "start": start_ticks(os.getpid()),
              "since_unix_ns": time.time_ns()}
        for _attempt in range(3):
            with signals_deferred():  # made, written and registered before a stop signal is handled
                if self._create(me):
                    return self
            holder = self._holder()
            if holder is None:  # being written right now, or garbage: garbage once it is old
                with contextlib.suppress(OSError):
                    if time.time() - self.path.stat().st_mtime > 10:
                        self.path.unlink()
                        continue
                time.sleep(0.1)
                continue
            pid = int(str(holder["pid"]))
            host = str(holder.get("host", ""))
            start = holder.get("start")
            if host == me["host"] and not _alive(pid, None if start is None else str(start)):
                self.stale = pid
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                continue
            raise self._locked(pid, host) from None
        raise OutputLockedError(f"lock file {self.path} holds no live tracekit's record (no valid pid): remove it "
                                "if no tracekit writes this output (it is replaced by itself once 10 s old)",
                                path=str(self.out))

    def _create(self, me: dict[str, object]) -> bool:
        """Create the lock file holding ``me``; False when it exists already."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
        except BaseException as exc:  # a full disk: leave no empty lock behind
            with contextlib.suppress(OSError):
                self.path.unlink()
            named = named_os_error(exc, self.path)
            if named is not exc:
                raise named from None
            raise
        self._held = True
        _HELD.add(self)
        return True

    def release(self) -> None:
        if not self._held:
            return
        with signals_deferred():
            holder = self._holder()
            if holder is not None and holder.get("pid") == os.getpid():
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
            self._held = False
            _HELD.discard(self)
        StopOnSignal.leave()

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


@contextlib.contextmanager
def claimed_output(out: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (), *,
                   runs: bool = True) -> Iterator[OutputLock]:
    """:func:`check_output`, then hold the output's lock while the body writes it."""
    check_output(out, inputs, runs=runs)
    with OutputLock(out) as lock:
        yield lock


__all__ = ["STOP_SIGNALS", "OutputLock", "StopOnSignal", "Stopped", "atomic_write", "check_name", "check_output", "claimed_output", "name_max", "named_os_error", "publish", "remove_leftovers", "sidecar",
           "signals_deferred", "stopped_line", "temp_beside"]
