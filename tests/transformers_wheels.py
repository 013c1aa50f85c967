"""Real transformers wheels for the contract tests (tests/wheels.py: downloaded once, cached, unpacked).

Cache: ``$TRACEKIT_TRANSFORMERS_WHEELS`` (default ``~/.cache/tracekit/transformers-wheels``).
Only the modules the hook table names are unpacked (generation loop, candidate
generators, the preset model families). Offline and not cached: the test skips
with the reason.
"""

from __future__ import annotations

from pathlib import Path

import wheels

PREFIXES = ("transformers/generation/", "transformers/models/deepseek_v3/", "transformers/models/llama/",
            "transformers/__init__.py")


def source(version: str) -> Path:
    """Directory holding the wheel's ``transformers`` package (the modules above, ``.py`` only)."""
    return wheels.source("transformers", version, PREFIXES)
