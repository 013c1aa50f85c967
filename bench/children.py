"""The environment of the benchmarks' child processes (one definition, used by every bench that times
a fresh process).

``child_env(**extra)``: ``os.environ`` without ``PYTHONDONTWRITEBYTECODE`` (some shells, this project's
sandboxes among them, set it): with it, every child compiles each tracekit module from source again
(~0.1 CPU s per CLI process measured on ``tracekit export``: 244 ``compile`` calls, 0.11 s), a cost no
installed tracekit pays, as its bytecode is cached after the first run. ``warm_bytecode(tree)`` writes
that cache for a checkout before the first timed round, so no round pays it either.

``imports_only(statement)``: the code of a child that measures a command's imports alone, ending as the
``tracekit`` program ends (no interpreter teardown).

``measure(cmd, env, cwd, keep_stdout=False)``: one child process (stdout discarded unless kept), with its CPU (user + system, from
wait4), minor faults, peak RSS and wall time; stderr goes to a file (a pipe left unread while
waiting would block a child that writes more than the pipe holds).
"""

from __future__ import annotations

import compileall
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` for a timed child: bytecode caching on, ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def imports_only(statement: str) -> str:
    """``python -c`` code measuring a command's start-up alone: ``statement`` (its imports), then the end the
    ``tracekit`` program takes (``tracekit/process_exit.py``: the atexit handlers, then ``os._exit``, no
    interpreter teardown), so the two compare."""
    return f"{statement}\nimport atexit, os\natexit._run_exitfuncs()\nos._exit(0)\n"


def warm_bytecode(tree: Path) -> None:
    """Write the bytecode cache of ``tree``'s tracekit package (as its first run would), the packages it
    links in (``tracekit/analyzers``, ``tracekit/collectors``: compileall does not follow links) included."""
    for d in ("tracekit", "analyzers", "collectors"):
        if (tree / d).is_dir():
            compileall.compile_dir(str(tree / d), quiet=1)


@dataclass(frozen=True)
class Usage:
    """What one child process used: CPU seconds (user + system), system seconds, minor page faults,
    peak RSS (MB), wall seconds; ``failed``: its exit code and last stderr line, else None; its stdout
    when kept."""

    cpu: float
    system: float
    faults: int
    rss_mb: float
    wall: float
    failed: str | None
    stdout: str = ""


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
            keep_stdout: bool = False) -> Usage:
    """Run ``cmd`` and measure it through wait4 (see the module docstring)."""
    with tempfile.TemporaryFile() as err, (tempfile.TemporaryFile() if keep_stdout else open(os.devnull, "w+b")) as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd)
        try:
            _, status, ru = os.wait4(proc.pid, 0)
        except BaseException:  # interrupted: the child is stopped and reaped, not left behind
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        err.seek(0)
        text = err.read().decode(errors="replace").strip()
        out.seek(0)
        stdout = out.read().decode(errors="replace")
    failed = None if proc.returncode == 0 else f"failed ({proc.returncode}): {text.splitlines()[-1] if text else ''}"
    return Usage(ru.ru_utime + ru.ru_stime, ru.ru_stime, ru.ru_minflt, ru.ru_maxrss / 1024.0, wall, failed, stdout)


__all__ = ["Usage", "child_env", "imports_only", "measure", "warm_bytecode"]
