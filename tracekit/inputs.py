"""How every input is opened and every JSON document decoded: one rule each.

- :func:`open_input`: regular files only. A FIFO, a device (``/dev/zero``), a socket is refused in
  one line without blocking (opened non-blocking, checked with ``fstat`` on the open file, so what
  is checked is what is read).
- :func:`decode_json`: a bounded decode. JSON nested deeper than the decoder's limit (about
  ``sys.getrecursionlimit()`` levels) is one line, never a RecursionError; invalid JSON is one line.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import IO, Any

import msgspec

from tracekit.errors import TracekitError

_PLAIN = msgspec.json.Decoder()


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"


def open_input(path: str | os.PathLike[str], error: type[TracekitError] = TracekitError) -> IO[bytes]:
    """``path`` opened for binary reading, if it is a regular file; else ``error`` naming it."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error("no such file or directory", path=name) from None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # the CLI's os_error_line says how long, and the limit
            raise
        raise error(f"cannot read ({exc.strerror or exc})", path=name) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"is {_kind(mode)}, not a regular file (tracekit reads regular files only)", path=name)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def is_regular(path: Path) -> bool:
    """True for a regular file (symlinks followed), without opening it."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def too_deep(what: str, path: str | None, error: type[TracekitError] = TracekitError) -> TracekitError:
    """The one line for JSON nested deeper than a decoder goes (it raised RecursionError)."""
    return error(f"{what} is nested too deeply (more than about {sys.getrecursionlimit()} levels)", path=path)


def decode_json(data: bytes | bytearray | memoryview | str, *, what: str, path: str | None = None,
                error: type[TracekitError] = TracekitError) -> Any:
    """``data`` decoded (plain Python values); a document too deeply nested or not JSON is ``error``."""
    try:
        return _PLAIN.decode(data)
    except RecursionError:
        raise too_deep(what, path, error) from None
    except msgspec.DecodeError as exc:
        raise error(f"{what} is not valid JSON ({exc})", path=path) from None


__all__ = ["decode_json", "is_regular", "open_input", "too_deep"]
