"""Per-rank timeline lookups for attribution (numpy, no polars).

- ``launch_ends``: end of the launch call of each GPU event, via (rank, correlation);
- ``first_of_launch``: whether a GPU event is the first one its launch call issued
  (graph replays issue many from one ``cudaGraphLaunch``);
- ``queue_delay``: how long the GPU was still busy with earlier work after a
  phase's host range opened.

Correlation ids are looked up through a direct-address table when they are dense
(Kineto numbers them per process), else through a sort.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .buckets import UNKNOWN_LAUNCH

I64 = npt.NDArray[np.int64]


def _rank_slices(rank: I64) -> list[tuple[int, slice | npt.NDArray[np.intp]]]:
    """(rank, rows) per rank: a slice when ``rank`` is sorted (no copies), else indices."""
    if rank.size == 0:
        return []
    if np.all(rank[1:] >= rank[:-1]):
        brk = np.flatnonzero(rank[1:] != rank[:-1]) + 1
        lo = np.concatenate([[0], brk])
        hi = np.concatenate([brk, [rank.size]])
        return [(int(rank[a]), slice(a, b)) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    return [(int(r), np.flatnonzero(rank == r)) for r in np.unique(rank).tolist()]


def _where(rows: slice | npt.NDArray[np.intp], mask: npt.NDArray[np.bool_]) -> slice | npt.NDArray[np.intp]:
    """The rows of ``rows`` where ``mask`` holds (the slice itself when it holds everywhere)."""
    if isinstance(rows, slice):
        m = mask[rows]
        if m.all():
            return rows
        return np.flatnonzero(m) + (rows.start or 0)
    return rows[mask[rows]]


def _size(rows: slice | npt.NDArray[np.intp]) -> int:
    return int(rows.stop - rows.start) if isinstance(rows, slice) else int(rows.size)


def _dense_ok(lo: int, hi: int, count: int) -> bool:
    """A direct-address table over [lo, hi] is affordable for ``count`` keys."""
    return hi - lo + 1 <= 8 * count + (1 << 16)


def first_of_launch(rank: I64, corr: I64, has: npt.NDArray[np.bool_], start: I64) -> npt.NDArray[np.bool_]:
    """True for the earliest GPU event of each (rank, correlation); events without one are first."""
    first = np.ones(rank.size, dtype=bool)
    for _r, sel in _rank_slices(rank):
        sel = _where(sel, has)
        if _size(sel) < 2:
            continue
        c = corr[sel]
        s = start[sel]
        rows: slice | npt.NDArray[np.intp] = sel
        if not np.all(s[1:] >= s[:-1]):
            o = np.argsort(s, kind="stable")
            rows = (np.arange(sel.start, sel.stop) if isinstance(sel, slice) else sel)[o]
            c = c[o]
        lo, hi = int(c.min()), int(c.max())
        pos = np.arange(c.size)
        if _dense_ok(lo, hi, c.size):
            table = np.empty(hi - lo + 1, dtype=np.int64)
            table[(c - lo)[::-1]] = pos[::-1]  # last write wins: the earliest occurrence
            first[rows] = table[c - lo] == pos
        else:
            _, idx = np.unique(c, return_index=True)
            f = np.zeros(c.size, dtype=bool)
            f[idx] = True
            first[rows] = f
    return first


def launch_ends(
    l_rank: I64, l_corr: I64, l_end: I64, gpu_rank: I64, gpu_corr: I64, gpu_has: npt.NDArray[np.bool_]
) -> I64:
    """End of the launch call of each GPU event via (rank, correlation); UNKNOWN_LAUNCH if none."""
    out = np.full(gpu_rank.size, UNKNOWN_LAUNCH, dtype=np.int64)
    gslices = dict(_rank_slices(gpu_rank))
    for r, lrows in _rank_slices(l_rank):
        grows = gslices.get(r)
        if grows is None:
            continue
        grows = _where(grows, gpu_has)
        if _size(grows) == 0:
            continue
        lc, le, gc = l_corr[lrows], l_end[lrows], gpu_corr[grows]
        lo, hi = int(min(lc.min(), gc.min())), int(max(lc.max(), gc.max()))
        if _dense_ok(lo, hi, lc.size + gc.size):
            table = np.full(hi - lo + 1, UNKNOWN_LAUNCH, dtype=np.int64)
            table[(lc - lo)[::-1]] = le[::-1]  # the first launch row of a correlation wins
            out[grows] = table[gc - lo]
        else:
            uc, first = np.unique(lc, return_index=True)
            ends = le[first]
            pos = np.minimum(np.searchsorted(uc, gc), uc.size - 1)
            out[grows] = np.where(uc[pos] == gc, ends[pos], UNKNOWN_LAUNCH)
    return out


def queue_delay(
    g_rank: I64, g_start: I64, g_end: I64, i_rank: I64, i_ws: I64, i_host: I64, valid: npt.NDArray[np.bool_]
) -> I64:
    """Per instance: how long after its host range opened the GPU was still busy with earlier work."""
    qd = np.zeros(i_rank.size, dtype=np.int64)
    slices = dict(_rank_slices(g_rank))
    for r in np.unique(i_rank[valid]).tolist():
        rows = slices.get(r)
        if rows is None:
            continue
        s, e = g_start[rows], g_end[rows]
        if not np.all(s[1:] >= s[:-1]):
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        e = np.maximum.accumulate(e)
        idx = np.flatnonzero((i_rank == r) & valid)
        pos = np.searchsorted(s, i_ws[idx], side="left") - 1
        prior = np.where(pos >= 0, e[np.maximum(pos, 0)], np.iinfo(np.int64).min)
        busy_until = np.minimum(prior, i_ws[idx])
        qd[idx] = np.where(pos >= 0, np.maximum(busy_until - i_host[idx], 0), 0)
    return qd


__all__ = ["first_of_launch", "launch_ends", "queue_delay"]
