"""The ingest fast paths give exactly what the general ones give."""

from __future__ import annotations

import gc
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import schema
from tracekit.errors import TracekitError
from tracekit.ingest import _sort_part, ingest_traces
from tracekit.ingest.exact import us_text_to_ns
from tracekit.ingest.kineto import _decode, _Event, parse_kineto

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


def _trace(extra: list[dict[str, object]]) -> bytes:
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "kernel", "name": "k1", "pid": 0, "tid": 7, "ts": 5150227743625.066, "dur": 3.5,
         "args": {"device": 0, "stream": 7, "correlation": 11}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 12, "tid": 12, "ts": 5150227743620.001,
         "dur": 2.0, "args": {"correlation": 11}},
        {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": 5150227743625.066, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "mark", "pid": 12, "tid": 12, "ts": 5150227743621.5, "s": "t"},
        *extra,
    ]
    return json.dumps({"traceEvents": events, "baseTimeNanoseconds": 0}).encode()


def test_unknown_ph_falls_back_to_the_plain_decoder() -> None:
    """A ph outside the tagged union (here "Z") decodes plainly: same events, one more dropped."""
    plain = parse_kineto(_trace([]), "a.json")
    odd = parse_kineto(_trace([{"ph": "Z", "name": "odd", "pid": 1, "tid": 1, "ts": 1.0}]), "b.json")
    assert plain.events.height == 3
    assert odd.events.equals(plain.events)
    key = "non-events (metadata, flows, counters)"
    assert odd.dropped[key] == plain.dropped[key] + 1 == 3
    assert plain.events.get_column("start_ns").to_list()[0] == 5150227743625066  # digits float64 cannot hold
    assert not isinstance(_decode(_trace([]), "a")[1][0], _Event)  # the tagged decoder took it
    assert isinstance(_decode(_trace([{"ph": "Z"}]), "b")[1][0], _Event)


def test_unknown_categories_counted_by_lowercased_cat() -> None:
    extra: list[dict[str, object]] = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1.0, "dur": 9.0},
        {"ph": "X", "cat": "trace", "name": "again", "pid": 1, "tid": 1, "ts": 2.0, "dur": 1.0},
        {"ph": "X", "name": "no cat", "pid": 1, "tid": 1, "ts": 3.0, "dur": 1.0},
        {"ph": "X", "cat": "Kernel", "name": "old_spelling", "pid": 0, "tid": 7, "ts": 4.0, "dur": 1.0},
        {"ph": "X", "cat": "cuda_runtime", "pid": 1, "tid": 1, "ts": 5.0, "dur": 1.0},  # no name
    ]
    p = parse_kineto(_trace(extra), "c.json")
    assert p.dropped["cat=trace"] == 2 and p.dropped["cat=None"] == 1
    kept_ph = 3 + len(extra)  # X and i events of the trace
    unknown = sum(v for k, v in p.dropped.items() if k.startswith("cat="))
    assert p.events.height + unknown == kept_ph
    assert p.events.filter(pl.col("name") == "old_spelling").get_column("kind").to_list() == ["kernel"]


def test_ingest_restores_the_garbage_collector(tmp_path: Path) -> None:
    good = tmp_path / "rank0.json"
    good.write_bytes(_trace([]))
    bad = tmp_path / "rank1.json"
    bad.write_bytes(b"{not json")
    assert gc.isenabled()
    assert ingest_traces([good]).events.height == 3
    assert gc.isenabled()
    with pytest.raises(TracekitError):
        ingest_traces([bad])
    assert gc.isenabled()
    gc.disable()
    try:
        ingest_traces([good])
        assert not gc.isenabled()
    finally:
        gc.enable()
