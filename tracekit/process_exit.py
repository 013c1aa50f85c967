"""How a tracekit process ends once its work is done, without the interpreter's teardown.

A normal interpreter exit frees every object one by one and unloads every module before the
process ends; the operating system takes all of it back at once (what that costs:
``bench/results/process-exit.txt``). The ``tracekit`` program ends through ``end_process``:

- ``end_process(code)``: what ``sys.exit(code)`` does (``None`` is 0, an integer is itself, anything
  else is printed to stderr and is 1), the ``atexit`` handlers run and the output buffers flushed
  (Python's stdout / stderr and the C library's, for what native libraries printed), then
  ``os._exit``. Every file tracekit writes is closed (and published) before its command returns.
  The interpreter's normal exit is taken instead (``SystemExit``) when a thread that it would wait
  for still runs, off the main thread, under a profiler or tracer (``python -m cProfile -m tracekit``,
  pdb, coverage: they write their results after the program), and when ``TRACEKIT_NORMAL_EXIT=1``
  is set (for tools this cannot see, such as memray). Buffered output that cannot be written at the
  end ends the process with status 1 where it would have been 0 (a status already set is kept, its
  error said): quietly when stdout was closed by its reader (``tracekit attribute RUN | head``), as click
  ends a command whose stdout closes while it writes, else with one line (``tracekit: error: stdout: No
  space left on device``). Where the interpreter's own exit is taken, Python's rule applies (its "Exception ignored"
  message and status 120).
- ``exit_now(code)``: the buffers flushed, then ``os._exit`` at once, whatever the flush raises: no
  ``atexit`` handlers, no waiting for threads (the capture's rank processes: NCCL's threads must not
  keep one alive).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

from tracekit import settings

NORMAL_EXIT_ENV = "TRACEKIT_NORMAL_EXIT"


def _flush_c_stdio() -> None:
    """Flush the C library's stdio buffers (``fflush(NULL)``): ``os._exit`` skips libc's ``exit``."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).fflush(None)


def flush_stdio() -> Exception | None:
    """Flush Python's stdout and stderr, then the C library's buffers; what flushing stdout raised (its
    reader went away, a full disk), else None."""
    failed: Exception | None = None
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception as exc:
            if stream is sys.stdout:
                failed = exc
    _flush_c_stdio()
    return failed


def stdout_error_line(exc: BaseException) -> str:
    """The one line for output that could not be written to stdout (a full disk, a closed device)."""
    return f"tracekit: error: stdout: {getattr(exc, 'strerror', None) or exc}"


def exit_now(code: int) -> NoReturn:
    """Flush the output buffers (``os._exit`` skips them) and end the process with ``code``, whatever happens."""
    try:
        flush_stdio()
    finally:
        os._exit(code)


def status_of(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives (a non-integer code is printed to stderr: status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def normal_exit_needed() -> bool:
    """Whether the interpreter's own exit must run (see the module docstring)."""
    if settings.current().normal_exit:
        return True
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return True
    me = threading.current_thread()
    if me is not threading.main_thread():
        return True
    return any(t.is_alive() and not t.daemon and t is not me for t in threading.enumerate())


def end_process(code: object = None) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown (module docstring)."""
    import errno

    from tracekit.cli_errors import EXIT_ERROR

    if normal_exit_needed():
        raise SystemExit(code)
    status = status_of(code)
    try:
        atexit._run_exitfuncs()
        failed = flush_stdio()
        if failed is not None and status == 0:  # a status already set is kept (its error was said)
            status = EXIT_ERROR
            if not (isinstance(failed, OSError) and failed.errno == errno.EPIPE):  # anything but a closed pipe: said
                with contextlib.suppress(Exception):
                    sys.stderr.write(stdout_error_line(failed) + "\n")
                    sys.stderr.flush()
    finally:
        os._exit(status)


__all__ = ["NORMAL_EXIT_ENV", "end_process", "exit_now", "flush_stdio", "normal_exit_needed", "status_of",
           "stdout_error_line"]
