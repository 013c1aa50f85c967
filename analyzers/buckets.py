"""The exclusive bucket walk over phase instances' GPU windows (docs/attribution.md).

Pure numpy over one array per column; every nanosecond of an instance's GPU
window (first member GPU event start .. last member GPU event end, all streams
of the rank's device) lands in exactly one bucket, in integer ns:

- where one or more *work* events run (compute categories and memory), the
  instant is split equally among the distinct work buckets present: the
  nanosecond starting at t, shared by k buckets, goes to the (t mod k)-th of
  them in BUCKETS order, so shares are integers, add up exactly, carry no bias
  and do not depend on where the sweep cuts segments;
  communication running at the same time is *overlapped* (reported beside);
- where no work runs but communication does, the instant goes to ``allreduce``
  / ``comm`` (exposed communication), split the same way when both run;
- where nothing runs (a gap from g0 to g1, g1 = start of the next member event
  N), the gap splits into ``launch_overhead`` = the part before
  min(g1, launch_end(N) + launch_latency_ns) (the GPU waited for the host to
  issue N, plus the launch latency after the call returned) and ``idle`` = the
  rest (N was already issued: it waited for a dependency, a sync, a copy).
  The latency allowance applies only to the first GPU event of a launch call:
  kernels replayed from a CUDA graph share the ``cudaGraphLaunch`` call, so
  gaps inside a replay are idle, not launch overhead (unless the host was
  still inside the cudaGraphLaunch call: that part is launch overhead); events
  whose launch is unknown (traces without runtime rows) leave their gaps idle;
- programmatic dependent launch (PDL): when an event starts before an earlier
  event on the same stream of the same instance has ended, the later one is
  waiting for the earlier one, so the overlap is the earlier event's: the later
  event counts from the earlier one's end (``stream`` argument; -1 = unknown
  stream, never clipped). The window and the exact integer sum are unchanged.

Implementation: events sorted by (instance, start); a running maximum of ends
finds gaps and clusters of overlapping events. Events alone in their cluster
(the common case) contribute their duration to their own bucket directly,
clusters of two events (one kernel overlapping the next, as with programmatic
dependent launch) in closed form, and only larger clusters are swept point by
point. Gaps are classified on whole arrays. The PDL rule only touches events in
clusters (an event overlapping an earlier one of its stream is in its cluster), so
it is applied to those rows alone, before the pair / sweep step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from tracekit.buckets import BUCKETS, COMPUTE_BUCKETS, WALK_CODES

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]

# bucket codes = positions in tracekit.buckets.BUCKETS (derived there: work buckets first, then
# communication, then the gap buckets)
COMPUTE: Final = COMPUTE_BUCKETS
NB: Final = WALK_CODES.nb
ALLREDUCE: Final = BUCKETS.index("allreduce")
COMM: Final = BUCKETS.index("comm")
LAUNCH: Final = WALK_CODES.launch
IDLE: Final = WALK_CODES.idle
N_WORK: Final = WALK_CODES.n_work  # codes 0..N_WORK-1: compute + memory
N_EVENT_CODES: Final = WALK_CODES.n_event_codes  # codes an event can carry
UNKNOWN_LAUNCH: Final = np.iinfo(np.int64).min
DEFAULT_LAUNCH_LATENCY_NS: Final = 20_000


@dataclass(frozen=True)
class Walk:
    """Per instance (row k = instance k): buckets (K x NB, ns), window, overlapped comm, counts."""

    buckets: I64
    window_start: I64
    window_end: I64
    overlapped_comm: I64
    n_events: I64

    @property
    def window_ns(self) -> I64:
        return np.where(self.n_events > 0, self.window_end - self.window_start, 0).astype(np.int64)


def _bincount(idx: I64, w: I64, size: int) -> I64:
    """Exact integer bincount (float64 sums of integers below 2**53 are exact)."""
    if idx.size == 0:
        return np.zeros(size, dtype=np.int64)
    return np.rint(np.bincount(idx, weights=w, minlength=size)).astype(np.int64)


def walk(
    inst: I64,
    start: I64,
    end: I64,
    code: I8,
    launch_end: I64,
    n_instances: int,
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
    first_of_launch: npt.NDArray[np.bool_] | None = None,
    stream: I64 | None = None,
) -> Walk:
    """Exclusive buckets per instance.

    inst: dense instance index 0..n_instances-1 per GPU event; code: bucket code
    0..9 per event (BUCKETS order); launch_end: end of the event's launch call
    (UNKNOWN_LAUNCH when not known); first_of_launch: False for events whose
    launch call already issued an earlier event (graph replays); None: all True;
    stream: stream id per event for the PDL rule (-1: unknown, not clipped); None: no rule.
    """
    K = n_instances
    n = inst.size
    if n == 0:
        z = np.zeros(K, dtype=np.int64)
        return Walk(np.zeros((K, NB), dtype=np.int64), z, z.copy(), z.copy(), z.copy())
    inst = inst.astype(np.int64, copy=False)
    if not np.all(inst[1:] >= inst[:-1]):
        # stable sort by instance (radix sort on 16-bit keys): start order is kept inside
        # each instance when the input was in start order; checked below
        small = inst.astype(np.uint16) if K <= 1 << 16 else inst
        order = np.argsort(small, kind="stable")
        inst, start, end, code, launch_end = inst[order], start[order], end[order], code[order], launch_end[order]
        if first_of_launch is not None:
            first_of_launch = first_of_launch[order]
        if stream is not None:
            stream = stream[order]
    first = np.empty(n, dtype=bool)
    first[0] = True
    np.not_equal(inst[1:], inst[:-1], out=first[1:])
    first_idx = np.flatnonzero(first)
    counts = np.diff(np.append(first_idx, n))
    # lay the instances end to end on one axis (instance k shifted so it starts where k-1's
    # span ends): one running maximum of ends then resets at instance boundaries
    end = np.maximum(end, start)
    ws_per = np.minimum.reduceat(start, first_idx)
    we_per = np.maximum.reduceat(end, first_idx)
    spans = we_per - ws_per + 1
    base = np.zeros(first_idx.size, dtype=np.int64)
    np.cumsum(spans[:-1], out=base[1:])
    shift = np.repeat(base - ws_per, counts)
    k_s = start + shift
    if not np.all(k_s[1:] >= k_s[:-1]):  # not sorted by start inside an instance
        order = np.lexsort((start, inst))
        inst, start, end, code, launch_end, shift = (
            inst[order], start[order], end[order], code[order], launch_end[order], shift[order]
        )
        if first_of_launch is not None:
            first_of_launch = first_of_launch[order]
        if stream is not None:
            stream = stream[order]
        k_s = start + shift
    k_e = end + shift
    runmax = np.maximum.accumulate(k_e)
    gap = np.empty(n, dtype=np.int64)
    np.subtract(k_s[1:], runmax[:-1], out=gap[1:])
    gap[first_idx] = 0  # > 0 below: nothing ran between the previous end and this start
    new_block = gap >= 0
    # an event alone in its cluster starts a block and the next event starts another
    clean = new_block.copy()
    clean[:-1] &= new_block[1:]

    dur = end - start
    key = inst * NB
    key += code
    buckets = _bincount(key, dur, K * NB)
    nc_rows = np.flatnonzero(~clean)
    if nc_rows.size:
        buckets -= _bincount(key[nc_rows], dur[nc_rows], K * NB)

    # gaps: launch overhead vs idle (computed on whole arrays: most events follow a gap);
    # in place: lpart = clip(min(start, launch_end + allowance) - (start - glen), 0, glen)
    glen = np.maximum(gap, 0)
    if first_of_launch is None:
        lpart = launch_end + np.int64(launch_latency_ns)
    else:
        lpart = first_of_launch * np.int64(launch_latency_ns)  # not np.where: no branches
        lpart += launch_end
    np.minimum(lpart, start, out=lpart)
    lpart -= start
    lpart += glen
    np.maximum(lpart, 0, out=lpart)
    np.minimum(lpart, glen, out=lpart)
    unknown = np.flatnonzero(launch_end == UNKNOWN_LAUNCH)
    if unknown.size:
        lpart[unknown] = 0
    # per-instance sums: events are grouped by instance, so exact integer segment sums
    ids = inst[first_idx]
    launch_ns = np.add.reduceat(lpart, first_idx)
    buckets[ids * NB + LAUNCH] += launch_ns
    buckets[ids * NB + IDLE] += np.add.reduceat(glen, first_idx) - launch_ns

    overlapped = np.zeros(K, dtype=np.int64)
    if nc_rows.size:
        block = np.cumsum(new_block[nc_rows]) - 1
        if stream is not None:  # PDL: a later event on the stream counts from the earlier one's end
            start = start.copy()
            start[nc_rows] = pdl_starts(block, stream[nc_rows].astype(np.int64, copy=False), start[nc_rows], end[nc_rows])
            end = np.maximum(end, start)
        size = np.bincount(block)[block]
        pair = nc_rows[size == 2]
        if pair.size:  # most clusters are two overlapping kernels: closed form
            add, ov = _pairs(inst[pair[0::2]], start[pair], end[pair], code[pair].astype(np.int64), K)
            buckets += add
            overlapped += ov
        big = size > 2
        if big.any():
            rows = nc_rows[big]
            add, ov = _sweep_clusters(inst[rows], np.cumsum(new_block[rows]) - 1, start[rows], end[rows], code[rows], K)
            buckets += add
            overlapped += ov

    out_ws = np.zeros(K, dtype=np.int64)
    out_we = np.zeros(K, dtype=np.int64)
    n_ev = np.zeros(K, dtype=np.int64)
    out_ws[ids] = ws_per
    out_we[ids] = we_per
    n_ev[ids] = counts
    return Walk(buckets.reshape(K, NB), out_ws, out_we, overlapped, n_ev)


def pdl_starts(group: I64, stream: I64, start: I64, end: I64) -> I64:
    """Start of each event once the PDL rule applies: the latest end of the earlier events
    (in ``start`` order) of its (group, stream), when that is later than its own start.

    Rows are in start order inside each group; ``stream`` < 0 (unknown) is never clipped.
    """
    n = start.size
    order = np.lexsort((stream, group))  # stable: start order kept inside (group, stream)
    g, st, s, e = group[order], stream[order], start[order], end[order]
    e = np.maximum(e, s)
    head = np.ones(n, dtype=bool)
    head[1:] = (g[1:] != g[:-1]) | (st[1:] != st[:-1])
    lo = np.flatnonzero(head)
    cnt = np.diff(np.append(lo, n))
    # lay the (group, stream) runs end to end so one running maximum resets at each run
    s_min = np.minimum.reduceat(s, lo)
    width = np.maximum.reduceat(e, lo) - s_min + 1
    base = np.zeros(lo.size, dtype=np.int64)
    np.cumsum(width[:-1], out=base[1:])
    shift = np.repeat(base - s_min, cnt)
    run = np.maximum.accumulate(e + shift) - shift
    prev = np.empty(n, dtype=np.int64)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = run[:-1]
    prev[head | (st < 0)] = np.iinfo(np.int64).min
    out = np.empty(n, dtype=np.int64)
    out[order] = np.maximum(s, prev)
    return out


def _share(a: I64, b: I64, pos: int | I64, k: int) -> I64:
    """How many ns t in [a, b) have t mod k == pos."""
    return (b - 1 - pos) // k - (a - 1 - pos) // k


def _pairs(inst: I64, start: I64, end: I64, code: I64, K: int) -> tuple[I64, I64]:
    """Clusters of exactly two overlapping events (rows 2i, 2i+1; the first starts first)."""
    sa, sb, ea, eb = start[0::2], start[1::2], end[0::2], end[1::2]
    ca, cb = code[0::2], code[1::2]
    lo_end = np.minimum(ea, eb)
    out = np.zeros(K * NB, dtype=np.int64)
    # A alone before B starts; the later-ending one alone after the other ends
    out += _bincount(inst * NB + ca, sb - sa, K * NB)
    c_tail = np.where(ea >= eb, ca, cb)
    out += _bincount(inst * NB + c_tail, np.maximum(ea, eb) - lo_end, K * NB)
    # both running over [sb, lo_end)
    ov_len = lo_end - sb
    wa, wb = ca < N_WORK, cb < N_WORK
    c_lo, c_hi = np.minimum(ca, cb), np.maximum(ca, cb)
    same = ca == cb
    split = ~same & (wa == wb)  # two work or two comm buckets: t mod 2
    only = ~same & (wa != wb)  # work over comm: the work bucket, comm overlapped
    c_work = np.where(wa, ca, cb)
    first = np.where(split, _share(sb, lo_end, 0, 2), 0)
    out += _bincount(inst * NB + np.where(same, ca, np.where(only, c_work, c_lo)), np.where(split, first, ov_len), K * NB)
    out += _bincount(inst * NB + c_hi, np.where(split, ov_len - first, 0), K * NB)
    ov = _bincount(inst, np.where(only, ov_len, 0), K)
    return out, ov


def _sweep_clusters(
    inst: I64, block: I64, start: I64, end: I64, code: I8, K: int
) -> tuple[I64, I64]:
    """Point sweep over clusters of overlapping events: flat (K*NB) bucket ns and overlapped comm."""
    m = inst.size
    # points: ends sort before starts at equal times (touching events do not overlap)
    t = np.concatenate([start, end])
    is_start = np.concatenate([np.ones(m, dtype=np.int64), np.zeros(m, dtype=np.int64)])
    blk = np.concatenate([block, block])
    cod = np.concatenate([code, code]).astype(np.int64)
    ins = np.concatenate([inst, inst])
    # one int64 key per point: (block, time relative to the block's first start, end < start)
    b_first = np.ones(m, dtype=bool)
    b_first[1:] = block[1:] != block[:-1]
    b_lo = np.flatnonzero(b_first)
    b_start = np.minimum.reduceat(start, b_lo)
    rel = t - b_start[blk]  # block ids are 0..n-1, each one contiguous run
    width = 2 * (int(rel.max()) + 1)
    if b_lo.size * width < 2**62:
        order = np.argsort(blk * width + rel * 2 + is_start, kind="stable")
    else:
        order = np.lexsort((is_start, t, blk))
    t, is_start, blk, cod, ins = t[order], is_start[order], blk[order], cod[order], ins[order]
    delta = np.where(is_start == 1, 1, -1)
    seg_len = np.zeros(2 * m, dtype=np.int64)
    same = blk[1:] == blk[:-1]
    seg_len[:-1] = np.where(same, t[1:] - t[:-1], 0)
    present = np.zeros((N_EVENT_CODES, 2 * m), dtype=bool)
    for c in range(N_EVENT_CODES):
        sel = cod == c
        if sel.any():
            present[c] = np.cumsum(np.where(sel, delta, 0)) > 0
    keep = seg_len > 0
    L = seg_len[keep]
    a = t[keep]
    b = a + L
    P = present[:, keep]
    ins_k = ins[keep]
    work_k = P[:N_WORK].sum(axis=0)
    comm_k = P[N_WORK:].sum(axis=0)
    use_work = work_k > 0
    k = np.where(use_work, work_k, comm_k)
    k_safe = np.maximum(k, 1)
    out = np.zeros(K * NB, dtype=np.int64)
    pos_work = np.zeros(L.size, dtype=np.int64)
    pos_comm = np.zeros(L.size, dtype=np.int64)
    for c in range(N_EVENT_CODES):
        is_w = c < N_WORK
        eligible = P[c] & (use_work if is_w else ~use_work)
        pos = pos_work if is_w else pos_comm
        # ns t in [a, b) with t mod k == pos
        share = np.where(eligible, (b - 1 - pos) // k_safe - (a - 1 - pos) // k_safe, 0)
        if is_w:
            pos_work = pos_work + P[c]
        else:
            pos_comm = pos_comm + P[c]
        out += _bincount(ins_k * NB + c, share, K * NB)
    ov = _bincount(ins_k, np.where(use_work & (comm_k > 0), L, 0), K)
    return out, ov


__all__ = [
    "ALLREDUCE",
    "BUCKETS",
    "COMM",
    "COMPUTE",
    "DEFAULT_LAUNCH_LATENCY_NS",
    "IDLE",
    "LAUNCH",
    "NB",
    "UNKNOWN_LAUNCH",
    "Walk",
    "pdl_starts",
    "walk",
]
