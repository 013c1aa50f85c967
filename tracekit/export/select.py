"""Which events an export holds: ranks, phase instances / cycles, a time window.

An event is in the export when its rank is selected and its interval
[start, start + max(dur, 1)) overlaps the selected time ranges of its rank:
the union of the selected phase instances (host range and GPU window together)
intersected with ``--window`` (ns relative to the run's first event).
Events are never clipped: their timestamps stay the run's exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.intervals import merge
from tracekit.limits import MAX_ABS_TIME_NS
from tracekit.ranklist import parse_rank_list
from tracekit.schema import GPU_KINDS, RANGE

I64 = npt.NDArray[np.int64]

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TIME = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*(ns|us|µs|ms|s)?\s*$")


@dataclass(frozen=True)
class Selection:
    """What to export. ``None`` means everything."""

    ranks: tuple[int, ...] | None = None
    phase: str | None = None
    cycles: tuple[int, int] | None = None  # inclusive
    window: tuple[int | None, int | None] | None = None  # ns relative to the run's first event

    def describe(self) -> str:
        parts = []
        if self.ranks is not None:
            parts.append("ranks " + ",".join(map(str, self.ranks)))
        if self.phase is not None:
            parts.append(f"phase {self.phase}")
        if self.cycles is not None:
            parts.append(f"cycles {self.cycles[0]}-{self.cycles[1]}")
        if self.window is not None:
            lo, hi = self.window
            parts.append(f"window {'' if lo is None else lo}:{'' if hi is None else hi} ns")
        return ", ".join(parts) if parts else "whole run"


def parse_ranks(text: str) -> tuple[int, ...] | None:
    """The rank-list syntax of every command (``tracekit.ranklist``): None for ``all``."""
    return parse_rank_list(text)


def parse_cycles(text: str) -> tuple[int, int]:
    """``"10-20"`` (inclusive) or ``"12"``. Raises ValueError."""
    lo, sep, hi = text.strip().partition("-")
    a = int(lo)
    b = int(hi) if sep else a
    if b < a:
        raise ValueError(f"empty cycle range {text!r}")
    return a, b


def parse_time(text: str) -> int:
    """``"1500"`` (ns), ``"2.5ms"``, ``"10us"``, ``"1s"`` -> int ns (exact decimal arithmetic)."""
    m = _TIME.match(text)
    if not m:
        raise ValueError(f"not a time: {text!r} (use ns, or a number with ns/us/ms/s)")
    try:
        val = Decimal(m.group(1)) * _UNITS[m.group(2) or "ns"]
    except InvalidOperation:
        raise ValueError(f"not a time: {text!r}") from None
    if val != val.to_integral_value():
        raise ValueError(f"{text!r} is not a whole number of ns")
    if abs(val) > MAX_ABS_TIME_NS:  # the range of a run's times (tracekit.limits): never an int64 overflow later
        raise ValueError(f"{text!r} is out of range (at most 2^62 ns, about 146 years)")
    return int(val)


def parse_window(text: str) -> tuple[int | None, int | None]:
    """``"START:END"`` with either side optional. Raises ValueError."""
    lo, sep, hi = text.partition(":")
    if not sep:
        raise ValueError(f"window {text!r} is not START:END")
    a = parse_time(lo) if lo.strip() else None
    b = parse_time(hi) if hi.strip() else None
    if a is not None and b is not None and b <= a:
        raise ValueError(f"window {text!r} is empty (END <= START)")
    return a, b


def _end(df: pl.DataFrame) -> pl.Expr:
    return pl.col("start_ns") + pl.max_horizontal(pl.col("dur_ns").fill_null(0), pl.lit(1))


def phase_spans(events: pl.DataFrame, phase: str, cycles: tuple[int, int] | None) -> pl.DataFrame:
    """Per selected phase instance: rank, phase_id, lo, hi (host range and GPU window together)."""
    ranges = events.filter(
        (pl.col("kind") == RANGE) & pl.col("phase_id").is_not_null() & (pl.col("phase") == phase)
    )
    if cycles is not None:
        ranges = ranges.filter(pl.col("cycle").is_between(cycles[0], cycles[1]))
    host = ranges.group_by("rank", "phase_id").agg(
        pl.col("start_ns").min().alias("lo"), (pl.col("start_ns") + pl.col("dur_ns")).max().alias("hi")
    )
    gpu = (
        events.filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("phase_id").is_in(host["phase_id"].implode()))
        .group_by("rank", "phase_id")
        .agg(pl.col("start_ns").min().alias("glo"), (pl.col("start_ns") + pl.col("dur_ns")).max().alias("ghi"))
    )
    both = host.join(gpu, on=["rank", "phase_id"], how="left")
    return both.select(
        "rank",
        "phase_id",
        pl.min_horizontal("lo", "glo").alias("lo"),
        pl.max_horizontal("hi", "ghi").alias("hi"),
    ).sort("rank", "lo", "phase_id")


def _overlaps(starts: I64, ends: I64, lo: I64, hi: I64) -> npt.NDArray[np.bool_]:
    """Whether each [start, end) overlaps any of the sorted disjoint [lo, hi)."""
    if lo.size == 0:
        return np.zeros(starts.size, dtype=bool)
    j = np.searchsorted(lo, ends, side="left") - 1
    ok = j >= 0
    jj = np.where(ok, j, 0)
    return ok & (hi[jj] > starts)


def select_events(events: pl.DataFrame, sel: Selection, *, path: str | None = None,
                  run_start: int | None = None) -> pl.DataFrame:
    """The events of ``sel`` (row order kept). Raises AnalysisError when nothing is left. ``run_start``:
    the run's first event where ``events`` are part of the run (default: their first)."""
    if events.height == 0:
        raise AnalysisError("the run holds no events", path=path)
    if run_start is None:
        run_start = int(events["start_ns"].min())  # type: ignore[arg-type]
    df = events
    if sel.ranks is not None:
        have = set(df["rank"].unique().to_list())
        missing = [r for r in sel.ranks if r not in have]
        if missing:
            raise AnalysisError(
                f"rank(s) {','.join(map(str, missing))} not in the run (it has {','.join(map(str, sorted(have)))})",
                path=path,
            )
        df = df.filter(pl.col("rank").is_in(list(sel.ranks)))
    if sel.phase is None and sel.cycles is not None:
        raise AnalysisError("--cycles needs --phase", path=path)
    if sel.phase is None and sel.window is None:
        return df
    ranks = sorted(df["rank"].unique().to_list())
    per_rank: dict[int, tuple[I64, I64]] = {}
    if sel.phase is not None:
        spans = phase_spans(df, sel.phase, sel.cycles)
        if spans.height == 0:
            what = f"phase {sel.phase!r} instances" + (f" in cycles {sel.cycles[0]}-{sel.cycles[1]}" if sel.cycles else "")
            known = sorted(
                df.filter((pl.col("kind") == RANGE) & pl.col("phase_id").is_not_null())["phase"].drop_nulls().unique().to_list()
            )
            cyc = df.filter((pl.col("kind") == RANGE) & (pl.col("phase") == sel.phase) & pl.col("phase_id").is_not_null())[
                "cycle"].drop_nulls().to_numpy()
            span = f"; its cycles: {int(cyc.min())}-{int(cyc.max())}" if cyc.size else ""
            raise AnalysisError(f"no {what} in the run (phases present: {', '.join(known) or 'none'}{span})", path=path)
        for (r,), g in spans.group_by("rank", maintain_order=True):
            per_rank[int(r)] = merge(g["lo"].to_numpy().astype(np.int64), g["hi"].to_numpy().astype(np.int64))  # type: ignore[call-overload]
    else:
        big = np.iinfo(np.int64).max
        per_rank = {r: (np.array([np.iinfo(np.int64).min], np.int64), np.array([big], np.int64)) for r in ranks}
    if sel.window is not None:
        wlo = run_start + (sel.window[0] if sel.window[0] is not None else 0)
        whi = run_start + sel.window[1] if sel.window[1] is not None else np.iinfo(np.int64).max
        for r, (lo, hi) in list(per_rank.items()):
            lo2, hi2 = np.maximum(lo, wlo), np.minimum(hi, whi)
            keep = hi2 > lo2
            per_rank[r] = (lo2[keep], hi2[keep])
    rank_col = df["rank"].to_numpy()
    starts = df["start_ns"].to_numpy().astype(np.int64)
    ends = df.select(_end(df)).to_series().to_numpy().astype(np.int64)
    keep = np.zeros(df.height, dtype=bool)
    for r, (lo, hi) in per_rank.items():
        m = rank_col == r
        keep[m] = _overlaps(starts[m], ends[m], lo, hi)
    out = df.filter(pl.Series(keep))
    if out.height == 0:
        run_end = int(events.select((pl.col("start_ns") + pl.col("dur_ns").fill_null(0)).max()).item())
        raise AnalysisError(
            f"no events in the selection ({sel.describe()}); the run spans 0:{run_end - run_start} ns "
            "relative to its first event",
            path=path,
        )
    return out


__all__ = ["Selection", "parse_cycles", "parse_ranks", "parse_time", "parse_window", "phase_spans", "select_events"]
