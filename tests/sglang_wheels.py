"""Real sglang wheels for the contract tests (tests/wheels.py: downloaded once, cached, unpacked).

Cache: ``$TRACEKIT_SGLANG_WHEELS`` (default ``~/.cache/tracekit/sglang-wheels``).
A wheel that is neither cached nor downloadable (offline) skips the test that
needs it, with the reason.
"""

from __future__ import annotations

from pathlib import Path

import wheels


def cache_dir() -> Path:
    return wheels.cache_dir("sglang")


def wheel(version: str) -> Path:
    return wheels.wheel("sglang", version)


def source(version: str) -> Path:
    """Directory holding the wheel's ``sglang`` package (only ``.py`` files unpacked)."""
    return wheels.source("sglang", version)
