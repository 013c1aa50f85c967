"""The compiled core (``tracekit._core``, built from ``tracekit/_core.c`` by the package's
build), or None when it is not built or ``TRACEKIT_PURE=1`` asks for the reference paths.

Every function of the core has a numpy / Python reference next to its caller; the tests
run both and compare the outputs byte for byte.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("TRACEKIT_PURE") == "1":
        return None
    try:
        from tracekit import _core
    except ImportError:
        return None
    return _core


core: ModuleType | None = _load()

__all__ = ["core"]
