"""The compiled extensions (``tracekit._core`` for the export, ``tracekit._kineto`` for ingest,
``tracekit._walk`` for the attribution walk, built from ``tracekit/*.c`` by the package's build), each None when it is not built or
``TRACEKIT_PURE=1`` asks for the reference paths.

Every function of the core has a numpy / Python reference next to its caller; the tests
run both and compare the outputs byte for byte.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from tracekit import settings


def _load(name: str) -> ModuleType | None:
    if settings.current().pure:
        return None
    try:
        return importlib.import_module(f"tracekit.{name}")
    except ImportError:
        return None


core: ModuleType | None = _load("_core")
kineto: ModuleType | None = _load("_kineto")
walk: ModuleType | None = _load("_walk")


class _ArrowColumn:
    """A numpy array as an Arrow C array (``_kineto.arrow_array``: numbers without a copy, the array
    holding the numpy buffer until polars releases it; booleans bit-packed into a copy), which
    polars imports through the Arrow PyCapsule interface."""

    __slots__ = ("_caps",)

    def __init__(self, caps: tuple[Any, Any]) -> None:
        self._caps = caps

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[Any, Any]:
        return self._caps


# numpy dtype -> Arrow format of the columns _kineto.arrow_array copies
_ARROW_FORMATS = {"int64": "l", "int32": "i", "int16": "s", "int8": "c", "uint8": "C", "uint32": "I",
                  "uint64": "L", "float64": "g", "bool": "b"}


def series(name: str, values: Any) -> Any:
    """``pl.Series(name, values)`` of a 1-D numpy array of numbers or booleans, built through the Arrow
    C data interface (``_kineto.arrow_array``: the numbers' buffer shared, booleans packed) instead of polars' numpy constructor, whose
    first use in a process imports ``numpy.ma`` (~20 ms of CPU, more than the rest of a small ingest's
    frame building). The same Series (dtype, values, NaN kept); other arrays, or without the
    compiled module, go through ``pl.Series``."""
    import polars as pl

    fmt = _ARROW_FORMATS.get(values.dtype.name) if values.ndim == 1 and values.dtype.isnative else None
    if fmt is None or kineto is None:
        return pl.Series(name, values)
    import numpy as np

    return pl.Series(name, _ArrowColumn(kineto.arrow_array(np.ascontiguousarray(values), fmt))).alias(name)


def arrow_stream(series: Any) -> Any:
    """The Arrow C stream capsule of one polars column, as one chunk: how ``_walk`` reads a column."""
    return (series.rechunk() if series.n_chunks() > 1 else series).__arrow_c_stream__()


__all__ = ["arrow_stream", "core", "kineto", "series", "walk"]
