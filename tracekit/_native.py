"""The compiled extensions (``tracekit._core`` for the export, ``tracekit._kineto`` for ingest,
``tracekit._walk`` for the attribution walk, built from ``tracekit/*.c`` by the package's build), each None when it is not built or
``TRACEKIT_PURE=1`` asks for the reference paths.

Every function of the core has a numpy / Python reference next to its caller; the tests
run both and compare the outputs byte for byte.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any


def _load(name: str) -> ModuleType | None:
    if os.environ.get("TRACEKIT_PURE") == "1":
        return None
    try:
        return importlib.import_module(f"tracekit.{name}")
    except ImportError:
        return None


core: ModuleType | None = _load("_core")
kineto: ModuleType | None = _load("_kineto")
walk: ModuleType | None = _load("_walk")


def arrow_stream(series: Any) -> Any:
    """The Arrow C stream capsule of one polars column, as one chunk: how ``_walk`` reads a column."""
    return (series.rechunk() if series.n_chunks() > 1 else series).__arrow_c_stream__()


__all__ = ["arrow_stream", "core", "kineto", "walk"]
