"""Interval arithmetic on int64 ns arrays (busy time is a union, never a sum)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def merge(starts: I64, ends: I64) -> tuple[I64, I64]:
    """Merge [start, end) intervals into disjoint sorted intervals (touching ones join)."""
    if starts.size == 0:
        return starts.astype(np.int64), ends.astype(np.int64)
    order = np.argsort(starts, kind="stable")
    s = starts[order].astype(np.int64)
    e = ends[order].astype(np.int64)
    run_max = np.maximum.accumulate(e)
    # a new block starts where the start is beyond everything seen so far
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def union_ns(starts: I64, ends: I64) -> int:
    """Total length of the union of [start, end) intervals, in ns."""
    s, e = merge(starts, ends)
    return int((e - s).sum())


def clip(starts: I64, ends: I64, lo: int, hi: int) -> tuple[I64, I64]:
    """Clip intervals to [lo, hi); empty results are dropped."""
    s = np.maximum(starts, lo)
    e = np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]
