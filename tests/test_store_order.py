"""write_run's canonical order: skipped when the table is already sorted, applied otherwise."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.schema import conform, sort_events
from tracekit.store import is_canonical_order, new_manifest, read_run, write_run

ROW = st.tuples(st.integers(0, 2), st.integers(0, 5), st.integers(0, 3), st.sampled_from(["kernel", "op"]), st.sampled_from(["a", "b"]))


def _frame(rows: list[tuple[int, int, int, str, str]]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, schema=["rank", "start_ns", "dur_ns", "kind", "name"], orient="row"))


@settings(max_examples=200, deadline=None)
@given(st.lists(ROW, max_size=12))
def test_is_canonical_order_agrees_with_sort(rows: list[tuple[int, int, int, str, str]]) -> None:
    df = _frame(rows)
    s = sort_events(df)
    assert is_canonical_order(s)
    # a frame is canonical exactly when sorting leaves its key columns unchanged
    keys = ["rank", "start_ns", "dur_ns", "kind", "name"]
    assert is_canonical_order(df) == df.select(keys).equals(s.select(keys))


def test_nulls_in_keys_are_sorted_not_trusted(tmp_path: Path) -> None:
    df = _frame([(0, 5, 1, "op", "a"), (0, 1, 1, "op", "b")]).with_columns(pl.lit(None, dtype=pl.String).alias("name"))
    assert not is_canonical_order(df)
    out = read_run(write_run(df, tmp_path / "r.parquet", new_manifest()))
    assert out["start_ns"].to_list() == [1, 5]
    unsorted = _frame([(1, 0, 1, "op", "a"), (0, 9, 1, "op", "a"), (0, 3, 2, "op", "a"), (0, 3, 7, "op", "a")])
    back = read_run(write_run(unsorted, tmp_path / "u.parquet", new_manifest()))
    assert back.select("rank", "start_ns", "dur_ns").rows() == [(0, 3, 7), (0, 3, 2), (0, 9, 1), (1, 0, 1)]
