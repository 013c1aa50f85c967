"""Attribution buckets as columns (``tracekit.export.buckets``) against the dict-per-instance forms they
replace: the same mapping as the old ``iter_rows`` conversion, the same arg sets as ``layout.add_buckets``,
the same encoded bytes as the reference arg-set encoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit._native import core
from tracekit.analyzers.attribution import BUCKET_COLUMNS, attribute_instances
from tracekit.export import perfetto
from tracekit.export.buckets import ArgSets, BucketTable, add_bucket_args, attribution_buckets
from tracekit.export.layout import INT_ARGS, add_buckets, build_layout
from tracekit.store import load_run

ROOT = Path(__file__).resolve().parent.parent
needs_core = pytest.mark.skipif(core is None, reason="tracekit._core is not built (pip install -e . builds it)")


def _old_dict(rank: list[Any], phase_id: list[Any], names: list[str], rows: list[list[Any]]) -> dict[tuple[int, int], dict[str, int]]:
    """The conversion export used before the table: one dict per instance row, nonzero buckets, last row wins."""
    out: dict[tuple[int, int], dict[str, int]] = {}
    for r, p, vals in zip(rank, phase_id, rows, strict=True):
        if r is None or p is None:
            continue
        b = {k: int(v) for k, v in zip(names, vals, strict=True) if v}
        if b:
            out[(int(r), int(p))] = b
    return out


@pytest.mark.parametrize("path", ["h200x2-mainjob/eager.parquet", "h200x2-builtin/eager.parquet"])
def test_table_is_the_old_mapping_on_samples(path: str) -> None:
    ev = load_run(ROOT / "samples" / path).events
    inst = attribute_instances(ev)
    cols = [c for c in BUCKET_COLUMNS if c in inst.columns]
    want = _old_dict(inst["rank"].to_list(), inst["phase_id"].to_list(), [c[:-3] for c in cols],
                     [list(r) for r in inst.select(cols).iter_rows()])
    got = attribution_buckets(ev, [])
    assert isinstance(got, BucketTable)
    assert len(want) > 10
    assert dict(got) == want and list(got) == list(want) and len(got) == len(want) and bool(got)


def test_table_repeated_and_empty_rows() -> None:
    names = ["a", "b", "c"]
    vals = np.array([[1, 0, 2], [0, 0, 0], [5, 5, 5], [0, 7, 0], [0, 0, 0]], dtype=np.int64)
    rank = np.array([0, 0, 1, 0, 1], dtype=np.int64)
    pid = np.array([3, 4, 9, 3, 9], dtype=np.int64)
    t = BucketTable(rank, pid, names, vals)
    assert dict(t) == _old_dict(rank.tolist(), pid.tolist(), names, vals.tolist()) == {(0, 3): {"b": 7}, (1, 9): {"a": 5, "b": 5, "c": 5}}
    empty = BucketTable(rank, pid, names, np.zeros((5, 3), np.int64))
    assert not empty and dict(empty) == {}


@settings(max_examples=80, deadline=None)
@given(data=st.data(), n_base=st.integers(1, 6), n_rows=st.integers(0, 30), n_tab=st.integers(0, 25), n_cols=st.integers(1, 5))
def test_add_bucket_args_matches_reference(data: st.DataObject, n_base: int, n_rows: int, n_tab: int, n_cols: int) -> None:
    base: list[tuple[tuple[str, Any], ...]] = [(("phase", f"p{i}"), ("cycle", i)) if i else () for i in range(n_base)]
    small = st.integers(0, 3)
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, 60), min_size=n_rows, max_size=n_rows))), dtype=np.int64)
    rank = np.array(data.draw(st.lists(small, min_size=rows.size, max_size=rows.size)), dtype=np.int64)
    pid = np.array(data.draw(st.lists(small, min_size=rows.size, max_size=rows.size)), dtype=np.int64)
    arr = np.array(data.draw(st.lists(st.integers(0, n_base - 1), min_size=61, max_size=61)), dtype=np.int64)
    vals = np.array(data.draw(st.lists(st.lists(st.sampled_from([0, 0, 1, -5, 2**62]), min_size=n_cols, max_size=n_cols),
                                       min_size=n_tab, max_size=n_tab)), dtype=np.int64).reshape(n_tab, n_cols)
    t_rank = np.array(data.draw(st.lists(small, min_size=n_tab, max_size=n_tab)), dtype=np.int64)
    t_pid = np.array(data.draw(st.lists(small, min_size=n_tab, max_size=n_tab)), dtype=np.int64)
    table = BucketTable(t_rank, t_pid, [f"k{j}" for j in range(n_cols)][::-1], vals)
    ref_sets, ref_arr = list(base), arr.copy()
    add_buckets(rows, rank, pid, ref_arr, ref_sets, dict(table))
    got_arr = arr.copy()
    sets = add_bucket_args(rows, rank, pid, got_arr, list(base), table)
    assert got_arr.tolist() == ref_arr.tolist()
    assert list(sets) == ref_sets and len(sets) == len(ref_sets)
    assert [sets[i] for i in range(len(sets))] == ref_sets
    assert sets.nonempty().tolist() == [len(a) > 0 for a in ref_sets]
    keys = list(dict.fromkeys(k for a in ref_sets for k, _ in a))
    assert sets.keys_in_order() == keys


@needs_core
def test_bucket_sets_encode_like_the_reference() -> None:
    """The compiled encoder writes the bucket sets from the columns: same bytes and strings as the
    reference encoder on the same sets as tuples; and the whole .pftrace is the same."""
    r = load_run(ROOT / "samples" / "h200x2-mainjob" / "eager.parquet")
    lay = build_layout(r.events, r.manifest, buckets=attribution_buckets(r.events, []))
    assert isinstance(lay.argsets, ArgSets) and lay.argsets.ext_row.size > 10
    names = perfetto.annotation_names(lay)
    assert names == list(dict.fromkeys([*INT_ARGS, *(k for a in lay.argsets for k, _ in a)]))
    ann_iid = {k: i + 1 for i, k in enumerate(names)}
    s_fast, s_ref = perfetto._Strings(), perfetto._Strings()
    tab, deps = perfetto._encode_argsets(lay, ann_iid, s_fast)
    lay_list = type(lay)(**{**lay.__dict__, "argsets": list(lay.argsets)})
    ref_tab, ref_deps = perfetto._encode_argsets_reference(lay_list, ann_iid, s_ref)
    blobs = [tab.flat[o:o + n].tobytes() for o, n in zip(tab.offsets.tolist(), tab.sizes.tolist(), strict=True)]
    ref_blobs = [ref_tab.flat[o:o + n].tobytes() for o, n in zip(ref_tab.offsets.tolist(), ref_tab.sizes.tolist(), strict=True)]
    assert blobs == ref_blobs
    dl = [deps[2][o:o + c].tolist() for c, o in zip(deps[0].tolist(), deps[1].tolist(), strict=True)]
    ref_dl = [ref_deps[2][o:o + c].tolist() for c, o in zip(ref_deps[0].tolist(), ref_deps[1].tolist(), strict=True)]
    assert dl == ref_dl and s_fast.iid == s_ref.iid

    class Sink:
        def __init__(self) -> None:
            self.parts: list[bytes] = []

        def write(self, b: bytes) -> int:
            self.parts.append(bytes(b))
            return len(b)

    a, b = Sink(), Sink()
    perfetto.write_perfetto(lay, a)  # type: ignore[arg-type]
    perfetto.write_perfetto(lay_list, b)  # type: ignore[arg-type]
    assert b"".join(a.parts) == b"".join(b.parts)
