"""Lanes: split the slices of one track so that slices on each lane nest strictly.

Perfetto (and the Chrome JSON importer) require slices on one track to be
either disjoint or nested. Overlapping kernels on one stream (programmatic
dependent launch) and partially overlapping host ranges break that; such slices
go to sibling lanes, assigned greedily (first lane where the slice nests).

Touching slices (end == next start) do not overlap. A zero-length slice at a
slice's end does not nest in it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tracekit._native import core

I64 = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]


def nesting_order(starts: I64, ends: I64) -> I64:
    """Order in which slices open: start ascending, longer first, then input order."""
    return np.lexsort((np.arange(starts.size), -(ends - starts), starts))


def _laminar_failures(s: I64, e: I64) -> BoolA:
    """For slices already in nesting order: True where a slice is not properly nested.

    Builds the open/close token sequence (closes before opens at equal times,
    later-opened closes first, zero-length slices close right after they open);
    in a ±1 walk the up-steps to a depth and the down-steps from it alternate,
    so the sequence is laminar iff every such (up, down) pair is one slice.
    """
    n = s.size
    idx = np.arange(n, dtype=np.int64)
    zero = e == s
    # token keys: time, class (0 close of a non-zero slice, 1 open / zero-length close), sub-order
    t = np.concatenate([s, e])
    cls = np.concatenate([np.ones(n, np.int64), np.where(zero, 1, 0)])
    sub = np.concatenate([2 * idx, np.where(zero, 2 * idx + 1, -idx)])
    is_open = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    owner = np.concatenate([idx, idx])
    order = np.lexsort((sub, cls, t))
    step = np.where(is_open[order], 1, -1)
    depth_after = np.cumsum(step)
    level = np.where(step > 0, depth_after, depth_after + 1)  # the depth the step reaches / leaves
    by_level = np.lexsort((np.arange(order.size), level))
    own = owner[order][by_level]
    opens = is_open[order][by_level]
    a, b = own[0::2], own[1::2]
    bad_pair = (a != b) | ~opens[0::2] | opens[1::2]
    bad = np.zeros(n, dtype=bool)
    bad[a[bad_pair]] = True
    bad[b[bad_pair]] = True
    return bad


def _greedy(s: I64, e: I64) -> I64:
    lanes = np.zeros(s.size, dtype=np.int64)
    stacks: list[list[int]] = []
    for i in range(s.size):
        si, ei = int(s[i]), int(e[i])
        placed = -1
        for lane, st in enumerate(stacks):
            while st and st[-1] <= si:
                st.pop()
            if not st or ei <= st[-1]:
                st.append(ei)
                placed = lane
                break
        if placed < 0:
            stacks.append([ei])
            placed = len(stacks) - 1
        lanes[i] = placed
    return lanes


def assign_lanes(starts: I64, ends: I64, *, in_order: bool = False) -> I64:
    """Lane (0 = the track itself) for each slice, in input order.

    Vectorised: clusters of mutually overlapping slices are found with a running
    maximum; properly nested clusters stay on lane 0; only the clusters that
    are not go through the greedy assignment. ``in_order``: the slices are
    already in ``nesting_order`` (skips that sort).
    """
    n = starts.size
    lanes = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lanes
    if in_order:
        order = np.arange(n, dtype=np.int64)
        s, e = starts, ends
    else:
        order = nesting_order(starts, ends)
        s, e = starts[order], ends[order]
    reset = np.empty(n, dtype=bool)
    reset[0] = True
    reset[1:] = s[1:] >= np.maximum.accumulate(e)[:-1]
    if reset.all():
        return lanes
    bad = _laminar_failures(s, e)
    if not bad.any():
        return lanes
    cluster = np.cumsum(reset) - 1
    bad_clusters = np.unique(cluster[bad])
    in_bad = np.isin(cluster, bad_clusters)
    sorted_lanes = np.zeros(n, dtype=np.int64)
    pos = np.flatnonzero(in_bad)
    # clusters are contiguous in nesting order: run the greedy pass per cluster
    bounds = np.flatnonzero(np.diff(cluster[pos])) + 1
    for chunk in np.split(pos, bounds):
        sorted_lanes[chunk] = _greedy(s[chunk], e[chunk])
    lanes[order] = sorted_lanes
    return lanes


def assign_lanes_grouped(s_sorted: I64, e_sorted: I64, bounds: I64) -> tuple[I64, I64]:
    """Lanes of many tracks at once: slices in nesting order inside each group, groups being
    ``[bounds[g], bounds[g + 1])``. Returns (lane of each slice, highest lane of each group).

    Compiled: one greedy pass over every group (``tracekit._core``; on a properly nested
    group the greedy pass puts everything on lane 0, so it equals ``assign_lanes``). Reference:
    ``assign_lanes`` per group."""
    ng = max(0, int(bounds.size) - 1)
    lanes = np.zeros(s_sorted.size, dtype=np.int64)
    lane_max = np.zeros(ng, dtype=np.int64)
    if core is not None:
        core.assign_lanes_grouped(np.ascontiguousarray(s_sorted, dtype=np.int64),
                                  np.ascontiguousarray(e_sorted, dtype=np.int64),
                                  np.ascontiguousarray(bounds, dtype=np.int64), lanes, lane_max)
        return lanes, lane_max
    for g, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        if hi > lo:
            chunk = assign_lanes(s_sorted[lo:hi], e_sorted[lo:hi], in_order=True)
            lanes[lo:hi] = chunk
            lane_max[g] = int(chunk.max())
    return lanes, lane_max


__all__ = ["assign_lanes", "assign_lanes_grouped", "nesting_order"]
