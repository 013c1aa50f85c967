"""Kernel family names for grouping (diff, stragglers).

``tracekit.names.normalize_kernel_name`` when present (template arguments,
tile sizes and the like stripped so one family groups across builds); until
that module exists the full name is its own family.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import polars as pl


def _normalizer() -> Callable[[str], str] | None:
    try:
        mod = importlib.import_module("tracekit.names")
    except ImportError:
        return None
    fn = getattr(mod, "normalize_kernel_name", None)
    return fn if callable(fn) else None


def family_column(names: pl.Series) -> pl.Series:
    """A ``family`` Series aligned with ``names`` (nulls stay null)."""
    norm = _normalizer()
    if norm is None:
        return names.cast(pl.String()).alias("family")
    uniq = names.drop_nulls().unique().to_list()
    table = pl.DataFrame(
        {"name": uniq, "family": [norm(n) for n in uniq]},
        schema={"name": pl.String(), "family": pl.String()},
    )
    return (
        pl.DataFrame({"name": names.cast(pl.String())})
        .join(table, on="name", how="left", maintain_order="left")
        .get_column("family")
    )
