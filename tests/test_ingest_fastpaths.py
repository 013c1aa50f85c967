"""The ingest fast paths give exactly what the general ones give."""

from __future__ import annotations

from decimal import Decimal

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import schema
from tracekit.ingest import _sort_part
from tracekit.ingest.exact import us_text_to_ns

_row = st.tuples(
    st.integers(0, 6),  # start: a small range, so (start, dur) ties are common
    st.integers(0, 3),  # dur
    st.sampled_from(["kernel", "launch", "op", "range"]),
    st.sampled_from(["a", "b", "c"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_row, max_size=30), st.booleans())
def test_sort_part_is_sort_events(rows: list[tuple[int, int, str, str]], spread: bool) -> None:
    df = pl.DataFrame(
        {
            "rank": pl.Series([3] * len(rows), dtype=pl.Int32),
            # spread: distinct starts, the integer-only path is taken
            "start_ns": [r[0] + (i * 100 if spread else 0) for i, r in enumerate(rows)][::-1],
            "dur_ns": [r[1] for r in rows],
            "kind": [r[2] for r in rows],
            "name": [r[3] for r in rows],
            "pos": list(range(len(rows))),
        },
        schema_overrides={"start_ns": pl.Int64, "dur_ns": pl.Int64},
    )
    assert _sort_part(df).equals(schema.sort_events(df))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-(10**18), 10**19), st.integers(0, 4)), min_size=1, max_size=8))
def test_us_text_to_ns_digit_exact(vals: list[tuple[int, int]]) -> None:
    """Literals with 0-4 decimals and up to 20 digits (int64 overflow -> null), mixed in one column."""
    texts = []
    for v, dec in vals:
        sign = "-" if v < 0 else ""
        digits = str(abs(v)).rjust(dec + 1, "0")
        texts.append(sign + (digits[:-dec] + "." + digits[-dec:] if dec else digits))
    want = []
    for t in texts:
        ns = int((Decimal(t) * 1000).to_integral_value())
        want.append(ns if -(2**63) < ns < 2**63 else None)
    assert us_text_to_ns(texts).to_list() == want
