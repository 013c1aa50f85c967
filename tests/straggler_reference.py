"""An independent reference of the straggler segments (tests only): plain Python loops.

Per (collective key, rank): the segment of the rank's GPU timeline from the end of its previous
matched collective to its arrival, split into busy (interval union of the GPU events clipped to
the segment), launch gaps and other idle. A launch gap is the attribution walk's rule
(docs/attribution.md section 4): in a gap from g0 (end of everything before) to g1 (start
of the next event N), the part before min(g1, launch_end(N) + L), with L only for the first GPU
event of its launch call, nothing when N's launch is unknown. ``old_launch`` is the definition the
forensic view used before (a whole gap, when N's launch call started after the GPU went idle), kept
here only to show the two differ on real data.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import polars as pl

GPU_KINDS = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class Split:
    busy: int
    launch: int
    other_idle: int
    old_launch: int


def reference_segments(events: pl.DataFrame, matched: pl.DataFrame, latency_ns: int) -> dict[tuple[str, int], Split]:
    out: dict[tuple[str, int], Split] = {}
    for rank in sorted(matched.get_column("rank").unique().to_list()):
        mine = events.filter(pl.col("rank") == rank)
        launch_at: dict[int, tuple[int, int]] = {}  # correlation -> (call start, call end): the first row
        for s, d, c in mine.filter(pl.col("kind") == "launch").select("start_ns", "dur_ns", "correlation").iter_rows():
            if c is not None and c not in launch_at:
                launch_at[c] = (s, s + (d or 0))
        gpu = sorted(
            (s, s + (d or 0), c)
            for s, d, c in mine.filter(pl.col("kind").is_in(GPU_KINDS)).select("start_ns", "dur_ns", "correlation").iter_rows()
        )
        first_seen: set[int] = set()
        rows = []  # (start, end, launch start or None, launch end or None, first of its launch)
        for s, e, c in gpu:
            first = c is None or c not in first_seen
            if c is not None:
                first_seen.add(c)
            la = launch_at.get(c) if c is not None else None
            rows.append((s, e, None if la is None else la[0], None if la is None else la[1], first))
        starts = [r[0] for r in rows]
        coll = sorted(matched.filter(pl.col("rank") == rank).select("start_ns", "end_ns", "key").iter_rows())
        for (_, prev_end, _), (arrival, _, key) in itertools.pairwise(coll):
            a, b = prev_end, arrival
            if a > b:
                continue
            hi = bisect.bisect_right(starts, b)
            inside = sorted(
                (max(s, a), min(e, b), ls, le, f) for s, e, ls, le, f in rows[:hi] if e > a
            )
            busy = launch = old = 0
            cur = a
            for s, e, ls, le, f in inside:
                if s > cur:
                    if le is not None:
                        launch += max(0, min(s, le + (latency_ns if f else 0)) - cur)
                    if ls is not None and ls > cur:
                        old += s - cur
                if e > cur:
                    busy += e - max(s, cur)
                cur = max(cur, e)
            out[(key, rank)] = Split(busy, launch, (b - a) - busy - launch, old)
    return out
