"""Kernel family names for grouping (diff, stragglers): ``tracekit.finalize.names.normalize_names``."""

from __future__ import annotations

import polars as pl

from tracekit.finalize.names import normalize_names


def family_column(names: pl.Series) -> pl.Series:
    """A ``family`` Series aligned with ``names`` (nulls stay null)."""
    return normalize_names(names.cast(pl.String())).alias("family")
