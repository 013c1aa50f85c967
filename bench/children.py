"""The environment of the benchmarks' child processes (one definition, used by every bench that times
a fresh process).

``child_env(**extra)``: ``os.environ`` without ``PYTHONDONTWRITEBYTECODE`` (some shells, this project's
sandboxes among them, set it): with it, every child compiles each tracekit module from source again
(~0.1 CPU s per CLI process measured on ``tracekit export``: 244 ``compile`` calls, 0.11 s), a cost no
installed tracekit pays, as its bytecode is cached after the first run. ``warm_bytecode(tree)`` writes
that cache for a checkout before the first timed round, so no round pays it either.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path


def child_env(**extra: str) -> dict[str, str]:
    """``os.environ`` for a timed child: bytecode caching on, ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def warm_bytecode(tree: Path) -> None:
    """Write the bytecode cache of ``tree``'s tracekit package (as its first run would)."""
    compileall.compile_dir(str(tree / "tracekit"), quiet=1)


__all__ = ["child_env", "warm_bytecode"]
