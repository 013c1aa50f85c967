"""How a tracekit process ends once its work is done, without the interpreter's teardown.

A normal interpreter exit frees every object one by one (the run's table, the layout's arrays,
dictionaries of names) and unloads every module before the process ends; the operating system
would take all of it back at once. On a ~1 M-event export that teardown was 0.15-0.25 CPU s of
a ~1 s command (``bench/results/process-exit.txt``), so the CLI ends through ``end_process``:

- ``end_process(code)``: what ``sys.exit(code)`` does (``None`` is 0, an integer is itself, anything
  else is printed to stderr and is 1), the ``atexit`` handlers run and stdout / stderr flushed, then
  ``os._exit``. Every file tracekit writes is closed (and published) before its command returns;
  Python's buffered stdout / stderr are what would otherwise be lost. When a thread that Python
  would wait for is still running, the normal exit is taken instead (``SystemExit``).
  A stdout closed by its reader (``tracekit attribute RUN | head``) ends the process quietly with
  status 120, as Python's own exit would, without its "Exception ignored" message.
- ``exit_now(code)``: stdout / stderr flushed, then ``os._exit`` at once: no ``atexit`` handlers,
  no waiting for threads (the capture's rank processes: NCCL's threads must not keep one alive).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

BROKEN_STDOUT = 120  # the status Python ends with when flushing stdout fails at exit


def flush_stdio() -> bool:
    """Flush stdout and stderr; False when stdout could not be written (its reader went away)."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout:
                ok = False
    return ok


def exit_now(code: int) -> NoReturn:
    """Flush stdout and stderr (``os._exit`` skips Python's buffers) and end the process with ``code``."""
    flush_stdio()
    os._exit(code)


def status_of(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives (a non-integer code is printed to stderr: status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(OSError, ValueError):
        print(code, file=sys.stderr)
    return 1


def _waited_threads() -> bool:
    """Whether a thread that the interpreter's exit would wait for (not daemon, not this one) still runs."""
    me = threading.current_thread()
    return any(t.is_alive() and not t.daemon and t is not me for t in threading.enumerate())


def end_process(code: object = None) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown (module docstring)."""
    if _waited_threads() or threading.current_thread() is not threading.main_thread():
        raise SystemExit(code)
    status = status_of(code)
    atexit._run_exitfuncs()
    if not flush_stdio() and status == 0:
        status = BROKEN_STDOUT
    os._exit(status)


__all__ = ["BROKEN_STDOUT", "end_process", "exit_now", "flush_stdio", "status_of"]
