"""The compiled attribution pass (``tracekit._walk``): one call per rank, ranks in parallel threads.

Same numbers as the numpy path of ``analyzers.attribution`` (``_attribute_chunk``, the walk in
``analyzers.buckets``, the lookups in ``analyzers.timeline``), which stays the reference
(``TRACEKIT_PURE=1``; tests/test_attribution_compiled.py compares every bucket, every
instance). Columns reach the extension through the Arrow C stream interface (zero-copy).
kind and category are read as 1-byte codes: the physical codes of their Enum columns
(``tracekit.schema.KIND_DTYPE``: how ingest and finalize store them) through a 256-entry table,
so no string is read at all; String columns (a frame built by hand) are coded first by
``codes()``, one pass each.

Used when the table's ranks are contiguous and sorted (the canonical order of
``tracekit.schema.sort_events``) and every GPU event / launch row belongs to an instance of
its own rank; anything else returns False and the caller runs the reference path.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit import _native, settings
from tracekit._native import arrow_stream
from tracekit.buckets import BUCKETS, WALK_CODES
from tracekit.cores import usable_cores
from tracekit.errors import TracekitError
from tracekit.finalize.categories import CATEGORIES
from tracekit.schema import GPU_RANGE, KERNEL, LAUNCH, MEMCPY, MEMSET, RANGE

if TYPE_CHECKING:
    from .attribution import _Acc

I64 = npt.NDArray[np.int64]

# kind codes: the order tracekit/_walk.c expects (K_KERNEL = 1 .. K_LAUNCH = 4), then the phase
# range kinds; 0 any other kind
_KINDS: Final = (KERNEL, MEMCPY, MEMSET, LAUNCH, RANGE, GPU_RANGE)
_KIND_VALUES: Final = np.array([1, 2, 3, 4, 5, 6, 0, 0], dtype=np.int8)
RANGE_CODES: Final = 5  # kind code >= this: a range or gpu_range row
# category -> bucket code (every category of the rule vocabulary is the bucket of that name);
# a category outside it is ``other``, a missing one -1 (resolved by name below)
_CATS: Final = tuple(CATEGORIES)
_CAT_VALUES: Final = np.array([BUCKETS.index(c) for c in _CATS] + [BUCKETS.index("other"), -1], dtype=np.int8)
_WALK_COLS: Final = ("start_ns", "dur_ns", "phase_id", "correlation", "stream", "tid", "graph")
# walk_rank's coll_out buffers, in the order of coll_buf's rows (the f of the unpacking below)
_COLL_OUT: Final = ("row", "coll_seq", "start", "dur", "phase_id", "group", "op")


def codes(
    s: pl.Series, names: tuple[str, ...], values: npt.NDArray[np.int8], where: tuple[npt.NDArray[np.int8], int] | None = None
) -> npt.NDArray[np.int8]:
    """int8 per row: values[i] where the string equals names[i], values[-2] else, values[-1] if null
    (and, with ``where=(mask, v)``, where mask != v: those rows are not read)."""
    w = _native.walk
    assert w is not None
    out = np.empty(s.len(), dtype=np.int8)
    if where is None:
        w.codes(arrow_stream(s), names, values, out)
    else:
        w.codes(arrow_stream(s), names, values, out, where[0], where[1])
    return out


_IDENTITY: Final = np.arange(257, dtype=np.int64).astype(np.uint8).view(np.int8)  # a 1-byte code is its own value


def _enum_codes(s: pl.Series, table: dict[str, int], other: int, null: int) -> tuple[pl.Series, npt.NDArray[np.int8]] | None:
    """(physical codes, 257-entry table: code -> table value, ``other`` for a value not in ``table``,
    ``null`` at 256) of an Enum column of at most 256 values; None for any other column."""
    if not isinstance(s.dtype, pl.Enum):
        return None
    phys = s.to_physical()  # zero-copy: the Enum's own codes
    if phys.dtype != pl.UInt8:
        return None
    lut = np.full(257, other, dtype=np.int8)
    for i, v in enumerate(s.dtype.categories.to_list()):
        lut[i] = table.get(v, other)
    lut[256] = null
    return phys, lut


@dataclass(frozen=True)
class Coded:
    """kind and category as 1-byte codes with their tables (``walk_rank``'s input)."""

    kind: pl.Series  # UInt8 (an Enum's physical codes) or Int8 (codes())
    kind_lut: npt.NDArray[np.int8]  # code -> kind code (_KINDS order, from 1; 0 other); [256]: null
    category: pl.Series | None  # None: not coded yet (category_codes does it)
    category_lut: npt.NDArray[np.int8]  # code -> bucket code, -1 unresolved; [256]: null

    def kinds(self) -> npt.NDArray[np.int8]:
        """Kind code per row."""
        if not self.kind.null_count():
            out: npt.NDArray[np.int8] = self.kind_lut[self.kind.to_numpy().view(np.uint8)]
            return out
        out = self.kind_lut[self.kind.fill_null(0).to_numpy().view(np.uint8)]
        out[self.kind.is_null().to_numpy()] = self.kind_lut[256]
        return out

    def range_rows(self) -> npt.NDArray[np.int64]:
        """Rows of range / gpu_range kind (the only rows that can be phase instances)."""
        want = np.flatnonzero(self.kind_lut[:256] >= RANGE_CODES)
        if self.kind.null_count() or want.size > 4:
            return np.flatnonzero(self.kinds() >= RANGE_CODES)
        phys = self.kind.to_numpy().view(np.uint8)
        hit = phys == want[0] if want.size else np.zeros(phys.size, dtype=bool)
        for v in want[1:].tolist():
            hit |= phys == v
        return np.flatnonzero(hit)


_KIND_TABLE: Final = {k: int(v) for k, v in zip(_KINDS, _KIND_VALUES, strict=False)}
_CAT_TABLE: Final = {c: int(v) for c, v in zip(_CATS, _CAT_VALUES, strict=False)}


def kind_codes(events: pl.DataFrame) -> Coded | None:
    """kind (and, when it is an Enum, category) as 1-byte codes; None without the extension."""
    if _native.walk is None:
        return None
    k = _enum_codes(events.get_column("kind"), _KIND_TABLE, 0, 0)
    if k is None:
        kc = codes(events.get_column("kind"), _KINDS, _KIND_VALUES)
        k = pl.Series("kind", kc), _IDENTITY
    c = _enum_codes(events.get_column("category"), _CAT_TABLE, int(_CAT_VALUES[-2]), -1)
    return Coded(k[0], k[1], None if c is None else c[0], _IDENTITY if c is None else c[1])


def category_codes(events: pl.DataFrame, kc: Coded) -> pl.Series:
    """Bucket code per row from the category strings, on kernel rows (others, and kernels without a
    category, -1: the walk then stops with status 2 and the reference path says why)."""
    cb = codes(events.get_column("category"), _CATS, _CAT_VALUES, (kc.kinds(), 1))  # kernels only
    return pl.Series("category", cb)


def _run_codes(local: I64, counts: npt.NDArray[np.int64], strings: list[list[str]]) -> tuple[I64, list[str]]:
    """Codes (1 + index into the returned strings) of rows coded per rank (``counts`` rows each,
    rank j's code k being ``strings[j][k - 1]``)."""
    index: dict[str, int] = {}
    luts = [np.array([0] + [index.setdefault(x, len(index) + 1) for x in ss], dtype=np.int64) for ss in strings]
    longest = max(luts, key=len, default=np.zeros(1, dtype=np.int64))
    if all(np.array_equal(lut, longest[: lut.size]) for lut in luts):  # the usual case: one table for all
        return longest[local], list(index)
    out = np.empty(local.size, dtype=np.int64)
    o = 0
    for lut, c in zip(luts, counts.tolist(), strict=True):
        out[o : o + c] = lut[local[o : o + c]]
        o += c
    return out, list(index)


def workers(ranks: int) -> int:
    """Threads for ``ranks`` rank passes: the usable cores (TRACEKIT_ATTRIBUTE_THREADS overrides)."""
    return max(1, min(ranks, usable_cores(settings.current().attribute_threads)))


def _configure() -> None:
    """Give the compiled walk its bucket codes (``tracekit.buckets.WALK_CODES``) once."""
    global _CONFIGURED
    w = _native.walk
    assert w is not None
    if not _CONFIGURED:
        if not hasattr(w, "configure"):
            raise TracekitError(f"{w.__file__} was built from an older tracekit/_walk.c: rebuild it "
                                "(`python setup.py build_ext --inplace`, or reinstall tracekit)")
        w.configure(**asdict(WALK_CODES))
        _CONFIGURED = True


_CONFIGURED = False


def attribute_ranks(
    events: pl.DataFrame,
    dense: I64,
    launch_latency_ns: int,
    i_rank: I64,
    host_start: I64,
    is_host: npt.NDArray[np.bool_],
    i_tid: I64 | None,
    acc: _Acc,
    kc: Coded | None,
) -> bool:
    """Fill ``acc`` (zeros on entry) with the compiled pass; False (``acc`` then undefined)
    when the table is not in the shape it needs or the extension is not built.
    ``kc``: ``kind_codes(events)``."""
    w = _native.walk
    if w is None or kc is None or events.height == 0:
        return False
    _configure()
    rank_s = events.get_column("rank")
    if rank_s.null_count() or not rank_s.is_sorted():
        return False
    runs = rank_s.rle()
    r_val = runs.struct.field("value").to_numpy().astype(np.int64)
    r_hi = np.cumsum(runs.struct.field("len").to_numpy().astype(np.int64))
    r_lo = r_hi - np.diff(np.append(0, r_hi))
    if i_rank.size and not np.all(i_rank[1:] >= i_rank[:-1]):
        return False

    cat, cat_lut = kc.category, kc.category_lut
    if cat is None:
        cat, cat_lut = category_codes(events, kc), _IDENTITY
    cols = {c: events.get_column(c) for c in _WALK_COLS}
    ih = is_host.astype(np.uint8)
    tid_arr = None if i_tid is None else np.ascontiguousarray(i_tid, dtype=np.int64)
    dense_c = np.ascontiguousarray(dense, dtype=np.int64)
    outs = {"buckets": acc.buckets, "window_start": acc.ws, "window_end": acc.we, "overlapped_comm": acc.ov,
            "events": acc.n_ev, "queue_delay": acc.qd, "graph_launches": acc.graph_l, "eager_launches": acc.eager_l,
            "cross_thread": acc.cross}

    seq_col = events.get_column("coll_seq") if acc.collect else None
    # the collective kernels' (row, coll_seq, start, dur, phase_id, group code, op code: codes of the
    # rank's own group / op strings), written by the rank passes into
    # one array: each rank its slice, sized by its rows with a coll_seq (annotate_collectives sets it
    # on kernels only, so the slices are filled exactly and need no concatenation)
    c_cap = np.zeros(len(r_val), dtype=np.int64)
    if seq_col is not None:
        c_cap = np.array([int(hi - lo) - seq_col.slice(int(lo), int(hi - lo)).null_count() for lo, hi in zip(r_lo, r_hi, strict=True)],
                         dtype=np.int64)
    c_off = np.cumsum(c_cap) - c_cap
    coll_buf = np.empty((7, int(c_cap.sum())), dtype=np.int64)
    grp_col = events.get_column("group") if seq_col is not None else None
    op_col = events.get_column("coll_op") if seq_col is not None else None

    def one(j: int) -> tuple[int, bytes, int, int, list[str], list[str]]:
        lo, hi = int(r_lo[j]), int(r_hi[j])
        k_lo = int(np.searchsorted(i_rank, r_val[j], side="left"))
        k_hi = int(np.searchsorted(i_rank, r_val[j], side="right"))
        part = {c: None if (c == "tid" and i_tid is None) else cols[c] for c in _WALK_COLS}
        part["coll_seq"] = seq_col
        part["kind"] = kc.kind
        part["category"] = cat
        part["group"] = grp_col
        part["coll_op"] = op_col
        caps = {c: None if s is None else arrow_stream(s.slice(lo, hi - lo)) for c, s in part.items()}
        status, unres, n_coll, groups, ops = w.walk_rank(
            columns=caps,
            luts=luts,
            dense=dense_c,
            i_tid=tid_arr,
            host_start=host_start[k_lo:k_hi],
            is_host=ih[k_lo:k_hi],
            k_lo=k_lo,
            latency=launch_latency_ns,
            outs={name: o[k_lo:k_hi] for name, o in outs.items()},
            coll_out=None if seq_col is None else
            {name: coll_buf[f, c_off[j] : c_off[j] + c_cap[j]] for f, name in enumerate(_COLL_OUT)},
        )
        return int(status), unres, int(n_coll), lo, groups, ops

    n_threads = workers(len(r_val))
    luts = kc.kind_lut.tobytes() + cat_lut.tobytes()
    try:
        if n_threads > 1:
            from concurrent.futures import ThreadPoolExecutor  # only when there are several cores

            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                results = list(pool.map(one, range(len(r_val))))
        else:
            results = [one(j) for j in range(len(r_val))]
    finally:
        w.trim()
    if any(st != 0 for st, *_ in results):
        return False
    unres_rows = [np.frombuffer(u, dtype=np.int64) + lo for _, u, _, lo, _, _ in results if u]
    if unres_rows:  # launch rows without a graph flag: a graph launch by its name
        rows = np.concatenate(unres_rows)
        graph = events.get_column("name").gather(rows).str.contains("GraphLaunch").fill_null(False).to_numpy()
        inst = dense_c[events.get_column("phase_id").gather(rows).to_numpy().astype(np.int64)]
        acc.graph_l += np.bincount(inst[graph], minlength=acc.graph_l.size)
        acc.eager_l += np.bincount(inst[~graph], minlength=acc.eager_l.size)

    if acc.collect:  # the collective kernels (row, coll_seq, start, dur, phase_id), for allreduce wait / transfer
        counts = np.array([r[2] for r in results], dtype=np.int64)
        f = coll_buf if np.array_equal(counts, c_cap) else np.concatenate(
            [coll_buf[:, o : o + c] for o, c in zip(c_off.tolist(), counts.tolist(), strict=True)], axis=1)
        # dense codes of group and op over all ranks (match_arrays needs any dense numbering; the
        # reference path ranks the strings): each rank's codes through a table to the run's
        g = _run_codes(f[5], counts, [r[4] for r in results])[0]
        op, ops = _run_codes(f[6], counts, [r[5] for r in results])
        is_ar = op == (ops.index("allreduce") + 1) if "allreduce" in ops else np.zeros(op.size, dtype=bool)
        acc.coll_codes = (g, op, is_ar)
        acc.coll_num.append((f[1], np.repeat(r_val, counts), f[2], f[3], f[4]))
    return True


__all__ = ["RANGE_CODES", "Coded", "attribute_ranks", "category_codes", "codes", "kind_codes", "workers"]
