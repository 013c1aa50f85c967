"""Error policy shared by every tracekit command: bad data is one line and exit 1.

``guarded`` turns a TracekitError (and OS errors on inputs and outputs) into
``tracekit: error: <file>: rank <r>: <what>`` on stderr and the error's exit status
(1; 2 for an output that is an input; 130 for an aborted capture); with
``tracekit --debug`` the traceback is shown instead. Usage errors stay click's (exit 2).

Exit statuses of every command (``tracekit --help`` and the README list them):
0 done; 1 bad data or an error, one line; 2 usage error; 3 partial run (written, but some
rank of the world has no data: the manifest's ``missing_ranks`` and one line say which);
130 interrupted (Ctrl-C; 143 SIGTERM and 129 SIGHUP while an output is written: 128 + the signal, the
output left as it was, its lock and temp files removed). Output that cannot be written makes a 0 a 1 (quietly for a stdout closed by its
reader, ``| head``: ``tracekit.process_exit``).
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from tracekit.errors import TracekitError
from tracekit.render.text import echo

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_INTERRUPTED = 130


class _State:
    debug = False


def _fail(msg: str, code: int = EXIT_ERROR) -> None:
    echo(f"tracekit: error: {msg}", err=True)
    sys.exit(code)


def os_error_line(exc: OSError) -> str:
    """One line for an OS error: the file, then what is wrong (a too-long name says its length)."""
    name = exc.filename
    what = exc.strerror or str(exc)
    if exc.errno == errno.ENAMETOOLONG and name is not None:
        from tracekit.outputs import name_max

        longest = max((len(os.fsencode(p)) for p in str(name).split("/")), default=0)
        what = f"file name too long ({longest} bytes in one name; this file system allows {name_max(os.path.dirname(str(name)) or '.')})"
    if exc.errno == errno.ENOSPC:
        what = "no space left on device (the partial file was removed; an existing output is untouched)"
    return f"{name}: {what}" if name is not None else what


def guarded(fn: F) -> F:
    """Turn TracekitError (and OS errors) into one line and its exit status."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TracekitError as exc:
            if _State.debug:
                raise
            _fail(exc.one_line(), exc.exit_code)
        except OSError as exc:
            if _State.debug:
                raise
            _fail(os_error_line(exc))
        except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM / SIGHUP too while an output is written (Stopped)
            import signal

            from tracekit.outputs import remove_leftovers, stopped_line

            remove_leftovers()  # what the unwinding missed (a signal between a temp file's creation and its try)
            signum = int(getattr(exc, "signum", signal.SIGINT))
            echo(stopped_line(signum), err=True)
            sys.exit(128 + signum)

    return wrapper  # type: ignore[return-value]


__all__ = ["EXIT_ERROR", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_PARTIAL", "EXIT_USAGE", "F", "_State", "guarded",
           "os_error_line"]
