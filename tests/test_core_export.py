"""The compiled core of the export (``tracekit._core``) against the numpy reference paths:
same lanes, same record order, same arg-set encodings, byte-identical .pftrace."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from export_data import layout_differences
from export_synth import make_events, make_manifest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tracekit._native import core
from tracekit.export import attribution_buckets, chrome, lanes, layout, perfetto
from tracekit.export.fastlayout import build_layout_fast
from tracekit.export.layout import build_layout
from tracekit.export.layout_reference import build_layout_reference
from tracekit.exporters import WriteContext
from tracekit.store import load_run

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "samples" / p for p in ("h200x2-builtin/eager.parquet", "h200x2-mainjob/eager.parquet",
                                        "cpu8-builtin/run.parquet", "h200x2-forensics/run.parquet")]

needs_core = pytest.mark.skipif(core is None, reason="tracekit._core is not built (pip install -e . builds it)")


def test_core_is_built_in_ci() -> None:
    # CI installs with the README's command, which builds the extension: it must be there
    if os.environ.get("CI") == "true" and os.environ.get("TRACEKIT_PURE") != "1":
        assert core is not None, "tracekit._core was not built by pip install"


class _Pure:
    """Context: the reference (polars / numpy / Python) paths of the layout, lanes and the Perfetto writer."""

    def __enter__(self) -> None:
        self.saved = (lanes.core, perfetto.core, layout.core)
        lanes.core = perfetto.core = layout.core = None

    def __exit__(self, *exc: object) -> None:
        lanes.core, perfetto.core, layout.core = self.saved


def _both(events: pl.DataFrame, manifest: dict[str, object], **kw: object) -> Iterator[bytes]:
    """The .pftrace and .json.gz bytes with the compiled paths, then with the reference paths;
    the two layouts compared field by field on the way."""
    bk = attribution_buckets(events, [])
    fast_lay = build_layout(events, manifest, buckets=bk, **kw)  # type: ignore[arg-type]
    with _Pure():
        ref_lay = build_layout(events, manifest, buckets=bk, **kw)  # type: ignore[arg-type]
    assert layout_differences(fast_lay, ref_lay) == []
    for pure, lay in ((False, fast_lay), (True, ref_lay)):
        buf, js = io.BytesIO(), io.BytesIO()
        ctx = WriteContext(path="x.json.gz", selection="whole run", source="s")
        if pure:
            with _Pure():
                perfetto.write_perfetto(lay, buf)  # type: ignore[arg-type]
                chrome.write(lay, js, ctx)  # type: ignore[arg-type]
        else:
            perfetto.write_perfetto(lay, buf)  # type: ignore[arg-type]
            chrome.write(lay, js, ctx)  # type: ignore[arg-type]
        yield buf.getvalue() + b"|" + js.getvalue()


@needs_core
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.parent.name)
def test_real_runs_byte_identical(path: Path) -> None:
    r = load_run(path)
    fast, ref = _both(r.events, r.manifest, flows=("launches", "collectives"), outstanding=True)
    assert len(fast) > 100_000
    assert fast == ref


@needs_core
@settings(max_examples=8, deadline=None)
@given(ranks=st.integers(1, 4), cycles=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_synthetic_runs_byte_identical(ranks: int, cycles: int, seed: int) -> None:
    ev = make_events(ranks, cycles, 6, seed=seed)
    fast, ref = _both(ev, make_manifest(ranks), flows=("launches", "collectives"), outstanding=True)
    assert fast == ref


@needs_core
@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), min_size=0, max_size=30), min_size=1, max_size=6))
def test_grouped_lanes_match_per_group(groups: list[list[tuple[int, int]]]) -> None:
    s_parts, e_parts, bounds = [], [], [0]
    for g in groups:
        s = np.array([a for a, _ in g], dtype=np.int64)
        e = s + np.array([d for _, d in g], dtype=np.int64)
        o = lanes.nesting_order(s, e)
        s_parts.append(s[o])
        e_parts.append(e[o])
        bounds.append(bounds[-1] + s.size)
    s_all, e_all = np.concatenate(s_parts), np.concatenate(e_parts)
    b = np.array(bounds, dtype=np.int64)
    fast = lanes.assign_lanes_grouped(s_all, e_all, b)
    with _Pure():
        ref = lanes.assign_lanes_grouped(s_all, e_all, b)
    assert fast[0].tolist() == ref[0].tolist()
    assert fast[1].tolist() == ref[1].tolist()


def _dep_lists(deps: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[list[int]]:
    c, o, f = deps
    return [f[a:a + k].tolist() for a, k in zip(o.tolist(), c.tolist(), strict=True)]


@needs_core
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(
    st.sampled_from(["cycle", "phase", "name", "bucket.moe"]),
    st.one_of(st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True), st.text(max_size=8),
              st.just(-0.0)),
), max_size=5).map(tuple), max_size=12))
def test_argset_encoding_matches_reference(sets: list[tuple[tuple[str, object], ...]]) -> None:
    lay = build_layout(make_events(1, 1, 2, seed=1), make_manifest(1))
    lay.argsets = list(sets)  # type: ignore[arg-type]
    ann_iid = {k: i + 1 for i, k in enumerate(["cycle", "phase", "name", "bucket.moe"])}
    s_fast, s_ref = perfetto._Strings(), perfetto._Strings()
    tab, deps = perfetto._encode_argsets(lay, ann_iid, s_fast)
    ref_tab, ref_deps = perfetto._encode_argsets_reference(lay, ann_iid, s_ref)
    assert tab.flat.tobytes() == ref_tab.flat.tobytes()
    assert tab.sizes.tolist() == ref_tab.sizes.tolist()
    assert _dep_lists(deps) == _dep_lists(ref_deps)
    assert s_fast.iid == s_ref.iid


@needs_core
def test_records_merge_matches_lexsort() -> None:
    lay = build_layout(make_events(3, 3, 6, seed=7), make_manifest(3), outstanding=True)
    fast = perfetto.records(lay)
    ref = perfetto.records_reference(lay)
    for a, b in zip(fast, ref, strict=True):
        assert a.tolist() == b.tolist()


_NULLABLE = ("name", "category", "args", "phase", "pid", "tid", "device", "stream", "batch_size", "num_tokens",
             "seq_len", "graphed", "graph", "accept_len", "coll_op", "group", "coll_seq", "correlation", "cycle", "dur_ns")


@needs_core
@settings(max_examples=25, deadline=None)
@example(seed=0, holes=[("name", 8024)], accept=[0.0], dup_start=False, strings="as made")  # a counter row without a name (found in CI)
@given(seed=st.integers(0, 10_000), holes=st.lists(st.tuples(st.sampled_from(_NULLABLE), st.integers(0, 10_000)), max_size=40),
       accept=st.lists(st.sampled_from([0.0, -0.0, float("nan"), 1.5, 2.0]), min_size=1, max_size=5),
       dup_start=st.booleans(), strings=st.sampled_from(["as made", "no args", "on every row"]))
def test_generated_runs_with_nulls_same_layout(seed: int, holes: list[tuple[str, int]], accept: list[float],
                                               dup_start: bool, strings: str) -> None:
    """Nulls where the schema allows them, -0.0 / NaN accept lengths, equal start times, the string args
    on most rows or on none (the compiled layout reads a string column only at its rows when at most a
    quarter of the rows have it): the compiled layout equals the reference one, and so do the .pftrace
    and .json.gz bytes."""
    ev = make_events(2, 2, 5, seed=seed).with_row_index("_i")
    n = ev.height
    if strings == "no args":
        ev = ev.with_columns(pl.lit(None, dtype=pl.String).alias("args"))
    elif strings == "on every row":
        ev = ev.with_columns(pl.format("g{}", pl.col("_i") % 3).alias("group"), pl.format("op{}", pl.col("_i") % 5).alias("coll_op"),
                             pl.format("a{}", pl.col("_i") % 4).alias("args"))
    for col, at in holes:
        ev = ev.with_columns(pl.when(pl.col("_i") == at % n).then(None).otherwise(pl.col(col)).alias(col))
    acc = pl.Series([accept[i % len(accept)] for i in range(n)], dtype=pl.Float64())
    ev = ev.with_columns(pl.when(pl.col("accept_len").is_not_null()).then(acc).otherwise(None).alias("accept_len"))
    if dup_start:  # many slices opening at one time, some of equal length
        ev = ev.with_columns(pl.when(pl.col("_i") % 7 == 0).then(pl.col("start_ns") // 1000 * 1000).otherwise(pl.col("start_ns"))
                             .alias("start_ns"))
    ev = ev.drop("_i")
    for kw in ({}, {"flows": ("launches", "collectives"), "outstanding": True}):
        fast, ref = _both(ev, make_manifest(2), **kw)
        assert fast == ref


@needs_core
def test_fast_layout_is_the_compiled_path() -> None:
    ev = make_events(2, 2, 4, seed=3)
    assert layout_differences(build_layout_fast(ev, make_manifest(2)), build_layout_reference(ev, make_manifest(2))) == []
    with _Pure():
        assert layout.core is None
    assert layout.core is not None


@needs_core
def test_first_seen_ids() -> None:
    from tracekit.export.fastlayout import first_seen

    rng = np.random.default_rng(5)
    for cols in ([rng.integers(0, 5, 1000)], [rng.integers(0, 3, 500), rng.integers(-(2**62), 2**62, 500) % 4],
                 [rng.integers(0, 2**40, 300)], [np.zeros(0, np.int64)],
                 [rng.integers(0, 2**40, 5000), rng.integers(0, 3, 5000)], [np.repeat(rng.integers(0, 900, 700), 3)]):
        n = cols[0].size
        for order in (None, rng.permutation(n), rng.integers(0, max(n, 1), n // 2) if n else None):
            ids, first = first_seen(cols, order=order)
            rows = list(zip(*(c.tolist() for c in cols), strict=True))
            if order is not None:
                rows = [rows[i] for i in order.tolist()]
            seen: dict[tuple[int, ...], int] = {}
            want = [seen.setdefault(r, len(seen)) for r in rows]
            assert ids.tolist() == want
            assert [rows[i] for i in first.tolist()] == list(seen)
    with pytest.raises(IndexError):
        first_seen([np.arange(3)], order=np.array([0, 5]))


@needs_core
def test_first_seen_rejects_bad_buffers() -> None:
    # _core.first_seen itself (fastlayout.first_seen sizes ids/first from the columns): each bad shape an error
    assert core is not None
    a3, a4 = np.arange(3, dtype=np.int64), np.arange(4, dtype=np.int64)
    ids, first = np.empty(3, np.int64), np.empty(3, np.int64)
    bad: list[tuple[tuple[object, ...], type[Exception], str]] = [
        (((), ids, first), ValueError, "no columns"),
        (((a3,), ids, np.empty(2, np.int64)), ValueError, "first: not as long as ids"),
        (((a3, a4), ids, first), ValueError, "columns of different lengths"),
        (((a4,), ids, first), ValueError, "columns not as long as ids"),
        (((a3,), ids, first, np.array([0, 1], np.int64)), ValueError, "order: not as long as ids"),
        (((a3,), ids, first, np.array([0, 1, 3], np.int64)), IndexError, "order: index out of range"),
        (((np.arange(3, dtype=np.int32),), ids, first), ValueError, "column"),  # 12 bytes: not int64 items
        (((a3,), np.empty(3, np.int64)[::-1], first), ValueError, "contiguous"),
    ]
    for call, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            core.first_seen(*call)
    ro = np.empty(3, np.int64)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        core.first_seen((a3,), ro, first)
    assert core.first_seen((a3, a3), ids, first) == 3 and ids.tolist() == [0, 1, 2]


@needs_core
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 300), span=st.sampled_from([5, 50, 2**40, 2**62]))
def test_launch_edges_first_launch_of_each_pair(seed: int, n: int, span: int) -> None:
    from tracekit.export.fastlayout import _launch_edges

    rng = np.random.default_rng(seed)
    rank = rng.integers(0, 3, n)
    corr = rng.integers(-span // 2, span // 2, n) if span < 2**62 else rng.integers(-(2**62), 2**62, n) * 2
    kind = rng.integers(0, 3, n)  # 0 launch, 1 GPU, 2 other
    first: dict[tuple[int, int], int] = {}
    for i in range(n):
        if kind[i] == 0:
            first.setdefault((int(rank[i]), int(corr[i])), i)
    want = sorted((first[(int(rank[i]), int(corr[i]))], i) for i in range(n)
                  if kind[i] == 1 and (int(rank[i]), int(corr[i])) in first)
    src, dst = _launch_edges(rank.astype(np.int64), corr.astype(np.int64), kind == 0, kind == 1)
    assert list(zip(src.tolist(), dst.tolist(), strict=True)) == want


_TAKE_DTYPES = [pl.Int64, pl.Int32, pl.Int16, pl.Int8, pl.UInt64, pl.UInt32, pl.UInt8, pl.Boolean]


@needs_core
@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 200), n_head=st.integers(0, 20), dtype=st.sampled_from(_TAKE_DTYPES),
       null_share=st.sampled_from([0.0, 0.3, 1.0]), sliced=st.booleans(), fill=st.sampled_from([0, 2, -7]))
def test_take_reads_the_column_through_the_index(seed: int, n: int, n_head: int, dtype: pl.DataType, null_share: float,
                                                 sliced: bool, fill: int) -> None:
    """``fastlayout._take`` (``tracekit._walk.take`` on the Arrow buffers) equals a concatenation and a
    gather of the column with nulls filled: every integer width, booleans, nulls, a sliced column."""
    from tracekit.export.fastlayout import _take

    rng = np.random.default_rng(seed)
    hi = 2 if dtype == pl.Boolean else 100
    raw = [None if rng.random() < null_share else int(rng.integers(0, hi)) for _ in range(n + 3)]
    col = pl.Series("c", [None if v is None else (bool(v) if dtype == pl.Boolean else v) for v in raw], dtype=dtype)
    if sliced:  # an Arrow offset: the rows after the first three
        col, raw = col.slice(3), raw[3:]
    else:
        col, raw = col.head(n), raw[:n]
    head_v = rng.integers(-50, 50, n_head)
    head_ok = rng.random(n_head) < 0.5
    src = rng.integers(-n_head, n, 300) if n or n_head else np.zeros(0, np.int64)
    if n == 0:
        src = src[src < 0]
    vals, ok = _take(col, src.astype(np.int64), (head_v, head_ok), fill=fill)
    want_v = [int(head_v[-1 - k]) if k < 0 else (fill if raw[k] is None else int(raw[k])) for k in src.tolist()]
    want_ok = [bool(head_ok[-1 - k]) if k < 0 else raw[k] is not None for k in src.tolist()]
    assert vals.tolist() == want_v
    assert ok.tolist() == want_ok


@needs_core
def test_take_refuses_what_it_cannot_read() -> None:
    from tracekit.export.fastlayout import _take

    with pytest.raises(IndexError):
        _take(pl.Series([1, 2, 3]), np.array([3], dtype=np.int64))
    with pytest.raises(IndexError):
        _take(pl.Series([1, 2, 3]), np.array([-1], dtype=np.int64))  # no head rows
    with pytest.raises(ValueError, match="not an integer"):
        _take(pl.Series(["a", "b"]), np.array([0], dtype=np.int64))
    vals, ok = _take(pl.Series([None, None]), np.array([1, 0], dtype=np.int64), fill=5)  # a column of nulls
    assert vals.tolist() == [5, 5] and ok.tolist() == [False, False]


@needs_core
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_values=st.sampled_from([1, 7, 300, 6000]), n=st.integers(0, 4000),
       null_share=st.sampled_from([0.0, 0.2, 0.9]), long=st.booleans(), from_parquet=st.booleans())
def test_intern_gives_each_row_its_value(tmp_path_factory: pytest.TempPathFactory, seed: int,
                                                             n_values: int, n: int, null_share: float, long: bool,
                                                             from_parquet: bool) -> None:
    """``fastlayout._intern`` (``tracekit._walk.intern``, with its cache keyed by the Arrow view): each row
    reads back its value, each value listed once: short and long strings, nulls, more distinct views than
    the cache holds, and a column read back from parquet, where the rows of one value share one copy of
    its bytes."""
    from tracekit.export.fastlayout import _intern

    rng = np.random.default_rng(seed)
    pad = "x" * 40 if long else ""
    pool = [f"{pad}v{i}" for i in range(n_values)] + [""]
    vals = [None if rng.random() < null_share else pool[int(rng.integers(0, len(pool)))] for _ in range(n)]
    col = pl.Series("s", vals, dtype=pl.String)
    if from_parquet:
        path = tmp_path_factory.mktemp("intern") / "s.parquet"
        pl.DataFrame({"s": col}).write_parquet(path)
        col = pl.read_parquet(path)["s"]
    rows = np.sort(rng.choice(n, size=n // 2, replace=False)).astype(np.int64) if n else np.zeros(0, np.int64)
    ids, distinct = _intern(col, rows)
    got = [distinct[i] for i in ids.tolist()]
    assert got == [vals[r] for r in rows.tolist()]
    assert len(set(distinct)) == len(distinct)  # each value once (None included)


@needs_core
@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(0, 3000), null_share=st.sampled_from([0.0, 0.3, 0.95, 1.0]),
       enum=st.booleans(), null_as=st.sampled_from([None, "", "v1"]), head=st.integers(0, 3))
def test_codes_give_each_row_its_value(seed: int, n: int, null_share: float, enum: bool, null_as: str | None,
                                       head: int) -> None:
    """``fastlayout._codes`` (the codes written in place by ``_walk.intern``, a null row code 0, then one
    lookup per distinct value): after the ``head`` codes, each row's code names its value in the string
    table, a null as ``null_as``; the nulls of a String column and of an Enum alike, "" a value of its own."""
    from tracekit.export.fastlayout import _codes, _Strings

    rng = np.random.default_rng(seed)
    pool = ["v0", "v1", "v2", ""]
    vals = [None if rng.random() < null_share else pool[int(rng.integers(0, len(pool)))] for _ in range(n)]
    col = pl.Series("s", vals, dtype=pl.Enum(pool) if enum else pl.String)
    rows = np.sort(rng.choice(n, size=n // 2, replace=False)).astype(np.int64) if n else np.zeros(0, np.int64)
    strings = _Strings()
    first = strings.get("v2")
    got = _codes(col, rows, strings, np.full(head, first, np.int64), null_as=null_as)
    assert got[:head].tolist() == [first] * head
    assert [strings.values[c] for c in got[head:].tolist()] == [null_as if vals[r] is None else vals[r] for r in rows.tolist()]
    assert len(set(strings.values)) == len(strings.values)


@needs_core
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 2000), k=st.integers(1, 14),
       spans=st.lists(st.sampled_from([1, 2, 3, 250, 70_000, 1 << 40, 1 << 63]), min_size=14, max_size=14))
def test_pack_keeps_tuples_apart(seed: int, n: int, k: int, spans: list[int]) -> None:
    """``fastlayout._pack`` (ranges by ``_core.col_ranges``, combined columns by ``_core.pack_rows``): two
    rows get equal packed tuples exactly when their tuples are equal: small and huge ranges, negative
    values, fewer columns out than in where the ranges allow; ``pack_rows`` refuses a value outside its range."""
    from tracekit.export.fastlayout import _pack, first_seen

    rng = np.random.default_rng(seed)
    cols = []
    for s in spans[:k]:
        lo = int(rng.integers(-(1 << 62), 1 << 62)) if s >= 1 << 40 else int(rng.integers(-5, 5))
        vals = rng.integers(0, min(s, 1 << 62), size=n, dtype=np.int64)
        cols.append(np.maximum(vals + lo, lo) if s < 1 << 63 else rng.integers(-(1 << 63), (1 << 63) - 1, size=n, dtype=np.int64))
        if n > 3:  # repeated rows
            cols[-1][n // 2:n // 2 + 3] = cols[-1][0]
    packed = _pack(cols)
    assert len(packed) <= len(cols)
    if all(s <= 250 for s in spans[:k]) and k >= 2:
        assert len(packed) < len(cols)
    seen: dict[tuple[int, ...], int] = {}
    want = [seen.setdefault(t, len(seen)) for t in zip(*(c.tolist() for c in cols), strict=True)]
    assert first_seen(packed)[0].tolist() == want
    with pytest.raises(ValueError, match="outside its column's range"):
        core.pack_rows((cols[0],), np.array([int(cols[0].min()) + 1], np.int64), np.array([1], np.int64),
                       np.empty(n, np.int64))


@needs_core
@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 400), starts=st.integers(1, 40), durs=st.integers(1, 4),
       keys=st.integers(1, 6), extreme=st.booleans())
def test_tie_sorts_give_the_lexsort_order(seed: int, n: int, starts: int, durs: int, keys: int, extreme: bool) -> None:
    """``_core.sort_ties`` after a stable sort by start gives (start, longer first, row), and then
    (start, longer first, key, row): ``np.lexsort`` of the same keys; runs past the insertion-sort length
    (few distinct starts) and durations at the int64 extremes included. Bad row numbers are refused."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, starts, n).astype(np.int64)
    dur = rng.integers(0, durs, n).astype(np.int64)
    if extreme and n:
        dur[rng.integers(0, n, max(1, n // 4))] = np.iinfo(np.int64).max
        dur[rng.integers(0, n, max(1, n // 4))] = np.iinfo(np.int64).min
    key = rng.integers(-keys, keys, n).astype(np.int64)
    rows = np.arange(n, dtype=np.int64)
    longer_first = -dur.astype(object)  # no overflow at int64's least value
    ref = sorted(range(n), key=lambda i: (start[i], longer_first[i], i))
    o = np.argsort(start, kind="stable")
    core.sort_ties(o, start, dur)
    assert o.tolist() == ref
    o2 = o.copy()
    core.sort_ties(o2, start, dur, key)
    assert o2.tolist() == sorted(range(n), key=lambda i: (start[i], longer_first[i], key[i], i))
    if not extreme:
        assert o2.tolist() == np.lexsort((rows, key, -dur, start)).tolist()
    for bad in (n, -1):
        with pytest.raises(ValueError, match="out of range"):
            core.sort_ties(np.array([bad], np.int64), start, dur)
