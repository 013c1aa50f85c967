"""Exact decimal-microsecond to integer-nanosecond conversion.

Kineto prints ``ts``/``dur`` as microseconds with three decimals (older traces:
integer microseconds). The JSON decoder hands us the literal text of each
number (``float_hook=str``), so the conversion below never goes through a
float: ``"5150227743625.066"`` becomes ``5150227743625066`` ns, digit for digit.

The common forms (``123``, ``-4``, ``123.4``, ``123.456``) are converted
vectorised with polars; anything else (exponents, more than three decimals) goes
through :class:`decimal.Decimal` one value at a time and is rounded half-even to
the nanosecond.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

import polars as pl

_MAX_MAG = (2**63 - 1) // 1000  # |integer digits| beyond this would overflow int64 ns


def _slow_ns(text: str) -> int | None:
    try:
        d = Decimal(text)
    except InvalidOperation:
        return None
    if not d.is_finite():
        return None
    ns = int((d * 1000).to_integral_value())  # ROUND_HALF_EVEN by default
    return ns if -(2**63) < ns < 2**63 else None


def _three_decimals(s: pl.Series) -> pl.Series | None:
    """The common case, every value ``<digits>.<3 digits>`` (<= 18 digits): drop the dot and cast.
    None when any value needs the general path. Four cheap string kernels: find, length, replace,
    cast (the check reuses the cast column instead of recomputing it)."""
    if s.null_count() == s.len():
        return s.cast(pl.Int64).rename("ns")
    v = pl.col("s")
    frame = pl.DataFrame({"s": s}).with_columns(ns=v.str.replace(".", "", literal=True).cast(pl.Int64, strict=False))
    length = v.str.len_bytes().cast(pl.Int64)
    bad = v.is_not_null() & (
        (length - v.str.find(".", literal=True).cast(pl.Int64) != 4).fill_null(True)
        | (length > 19)
        | pl.col("ns").is_null()
    )
    if frame.select(bad.any()).item():
        return None
    return frame.get_column("ns")


def us_text_to_ns(values: Sequence[object] | pl.Series) -> pl.Series:
    """Convert microsecond literals (str, int, or None) to an Int64 Series of ns.

    Unparseable values become null (callers decide whether that is an error).
    """
    s = values if isinstance(values, pl.Series) else pl.Series(values, dtype=pl.String, strict=False)
    if s.dtype != pl.String:
        s = s.cast(pl.String)
    fast = _three_decimals(s)
    if fast is not None:
        return fast
    frame = pl.DataFrame({"s": s})
    dot = pl.col("s").str.find(".", literal=True)
    decimals = (pl.col("s").str.len_bytes().cast(pl.Int64) - dot.cast(pl.Int64) - 1).fill_null(0)
    scale = (
        pl.when(decimals == 3).then(1)
        .when(decimals == 2).then(10)
        .when(decimals == 1).then(100)
        .when(decimals == 0).then(1000)
        .otherwise(None)
        .cast(pl.Int64)
    )
    digits = pl.col("s").str.replace(".", "", literal=True).cast(pl.Int64, strict=False)
    safe = digits.abs() <= _MAX_MAG
    ns = frame.select(pl.when(safe).then(digits * scale).otherwise(None).alias("ns")).to_series()
    # values the fast path could not take (exponents, > 3 decimals, huge): exact Decimal fallback
    bad = ns.is_null() & s.is_not_null()
    if bad.any():
        idx = bad.arg_true()
        fixed = [_slow_ns(t) for t in s.gather(idx).to_list()]
        ns = ns.scatter(idx, pl.Series(fixed, dtype=pl.Int64))
    return ns.rename("ns")
