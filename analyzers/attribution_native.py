"""The compiled attribution pass (``tracekit._walk``): one call per rank, ranks in parallel threads.

Same numbers as the numpy path of ``analyzers.attribution`` (``_attribute_chunk``, the walk in
``analyzers.buckets``, the lookups in ``analyzers.timeline``), which stays the reference
(``TRACEKIT_PURE=1``; tests/test_attribution_compiled.py compares every bucket, every
instance). Columns reach the extension through the Arrow C stream interface (zero-copy);
kind and category become int8 codes in one pass each, so no string is hashed per row.

Used when the table's ranks are contiguous and sorted (the canonical order of
``tracekit.schema.sort_events``) and every GPU event / launch row belongs to an instance of
its own rank; anything else returns False and the caller runs the reference path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit import _native
from tracekit.cores import usable_cores
from tracekit.finalize.categories import CATEGORIES
from tracekit.schema import GPU_RANGE, KERNEL, LAUNCH, MEMCPY, MEMSET, RANGE

from .buckets import BUCKETS, IDLE, N_EVENT_CODES, N_WORK, NB
from .buckets import LAUNCH as B_LAUNCH

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


def _stream(s: pl.Series) -> Any:
    """The Arrow C stream capsule of one column, as one chunk."""
    return (s.rechunk() if s.n_chunks() > 1 else s).__arrow_c_stream__()


def codes(
    s: pl.Series, names: tuple[str, ...], values: npt.NDArray[np.int8], where: tuple[npt.NDArray[np.int8], int] | None = None
) -> npt.NDArray[np.int8]:
    """int8 per row: values[i] where the string equals names[i], values[-2] else, values[-1] if null
    (and, with ``where=(mask, v)``, where mask != v: those rows are not read)."""
    w = _native.walk
    assert w is not None
    out = np.empty(s.len(), dtype=np.int8)
    if where is None:
        w.codes(_stream(s), names, values, out)
    else:
        w.codes(_stream(s), names, values, out, where[0], where[1])
    return out


def kind_codes(events: pl.DataFrame) -> npt.NDArray[np.int8] | None:
    """Kind code per row (``_KINDS`` order, from 1; 0 for other kinds); None without the extension."""
    if _native.walk is None:
        return None
    return codes(events.get_column("kind"), _KINDS, _KIND_VALUES)


def workers(ranks: int) -> int:
    """Threads for ``ranks`` rank passes: the usable cores (TRACEKIT_ATTRIBUTE_THREADS overrides)."""
    return max(1, min(ranks, usable_cores("TRACEKIT_ATTRIBUTE_THREADS")))


def _check_codes() -> None:
    w = _native.walk
    assert w is not None
    got = (w.NB, w.N_WORK, w.MEMORY, w.N_EVENT_CODES, w.LAUNCH, w.IDLE)
    want = (NB, N_WORK, BUCKETS.index("memory"), N_EVENT_CODES, B_LAUNCH, IDLE)
    if got != want:
        raise RuntimeError(f"tracekit._walk was built for bucket codes {got}, tracekit.buckets has {want}: rebuild it")


def attribute_ranks(
    events: pl.DataFrame,
    dense: I64,
    launch_latency_ns: int,
    i_rank: I64,
    host_start: I64,
    is_host: npt.NDArray[np.bool_],
    i_tid: I64 | None,
    acc: _Acc,
    kc: npt.NDArray[np.int8] | None,
) -> bool:
    """Fill ``acc`` (zeros on entry) with the compiled pass; False (``acc`` then undefined)
    when the table is not in the shape it needs or the extension is not built.
    ``kc``: ``kind_codes(events)``."""
    w = _native.walk
    if w is None or kc is None or events.height == 0:
        return False
    _check_codes()
    rank_s = events.get_column("rank")
    if rank_s.null_count() or not rank_s.is_sorted():
        return False
    runs = rank_s.rle()
    r_val = runs.struct.field("value").to_numpy().astype(np.int64)
    r_hi = np.cumsum(runs.struct.field("len").to_numpy().astype(np.int64))
    r_lo = r_hi - np.diff(np.append(0, r_hi))
    if i_rank.size and not np.all(i_rank[1:] >= i_rank[:-1]):
        return False

    cb = codes(events.get_column("category"), _CATS, _CAT_VALUES, (kc, 1))  # kernels only
    missing = np.flatnonzero((cb < 0) & (kc == 1))
    if missing.size:  # kernels without a category: the category rule table on their names
        from .attribution import bucket_codes

        cb[missing] = bucket_codes(events.select("kind", "name", "category").gather(missing))

    cols = {c: events.get_column(c) for c in _WALK_COLS}
    ih = is_host.astype(np.uint8)
    tid_arr = None if i_tid is None else np.ascontiguousarray(i_tid, dtype=np.int64)
    dense_c = np.ascontiguousarray(dense, dtype=np.int64)
    outs = (acc.buckets, acc.ws, acc.we, acc.ov, acc.n_ev, acc.qd, acc.graph_l, acc.eager_l, acc.cross)

    seq_col = events.get_column("coll_seq") if acc.collect else None

    def one(j: int) -> tuple[int, bytes, bytes, int]:
        lo, hi = int(r_lo[j]), int(r_hi[j])
        k_lo = int(np.searchsorted(i_rank, r_val[j], side="left"))
        k_hi = int(np.searchsorted(i_rank, r_val[j], side="right"))
        part = {c: None if (c == "tid" and i_tid is None) else cols[c] for c in _WALK_COLS}
        part["coll_seq"] = seq_col
        caps = tuple(None if s is None else _stream(s.slice(lo, hi - lo)) for s in part.values())
        status, unres, coll = w.walk_rank(
            caps,
            kc[lo:hi],
            cb[lo:hi],
            dense_c,
            tid_arr,
            host_start[k_lo:k_hi],
            ih[k_lo:k_hi],
            k_lo,
            launch_latency_ns,
            tuple(o[k_lo:k_hi] for o in outs),
        )
        return int(status), unres, coll, lo

    n_threads = workers(len(r_val))
    try:
        if n_threads > 1:
            from concurrent.futures import ThreadPoolExecutor  # only when there are several cores

            with ThreadPoolExecutor(max_workers=n_threads) as pool:
                results = list(pool.map(one, range(len(r_val))))
        else:
            results = [one(j) for j in range(len(r_val))]
    finally:
        w.trim()
    if any(st != 0 for st, _, _, _ in results):
        return False
    unres_rows = [np.frombuffer(u, dtype=np.int64) + lo for _, u, _, lo in results if u]
    if unres_rows:  # launch rows without a graph flag: a graph launch by its name
        rows = np.concatenate(unres_rows)
        graph = events.get_column("name").gather(rows).str.contains("GraphLaunch").fill_null(False).to_numpy()
        inst = dense_c[events.get_column("phase_id").gather(rows).to_numpy().astype(np.int64)]
        acc.graph_l += np.bincount(inst[graph], minlength=acc.graph_l.size)
        acc.eager_l += np.bincount(inst[~graph], minlength=acc.eager_l.size)

    if acc.collect:  # the collective kernels (row, coll_seq, start, dur, phase_id), for allreduce wait / transfer
        parts = [np.frombuffer(c, dtype=np.int64).reshape(5, -1) for _, _, c, _ in results]
        counts = [p.shape[1] for p in parts]
        f = [np.concatenate([p[i] for p in parts]) for i in range(5)]
        rows = f[0] + np.repeat(r_lo, counts)
        g = np.empty(rows.size, dtype=np.int64)
        op = np.empty(rows.size, dtype=np.int64)
        # dense codes of group and op (match_arrays needs any dense numbering; the reference
        # path ranks the strings): null group as "", null op as "?"
        w.intern(_stream(events.get_column("group")), rows, "", g)
        ops = w.intern(_stream(events.get_column("coll_op")), rows, "?", op)
        is_ar = op == (ops.index("allreduce") + 1) if "allreduce" in ops else np.zeros(rows.size, dtype=bool)
        acc.coll_codes = (g, op, is_ar)
        acc.coll_num.append((f[1], np.repeat(r_val, counts), f[2], f[3], f[4]))
    return True


__all__ = ["RANGE_CODES", "attribute_ranks", "codes", "kind_codes", "workers"]
