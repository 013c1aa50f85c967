"""What ingest drops, and says it dropped: events whose integers are outside ``tracekit.limits``.

One trace's parsed events go through :func:`screen_events` before they get a rank: an event
with no usable duration (negative, past ``MAX_DUR_NS``, or not a finite number: ``1e400``), no
usable start (past ``MAX_ABS_TIME_NS``, or a ``ts + baseTimeNanoseconds`` that overflows int64),
a device outside the int16 column or a negative stream is left out, and each reason becomes one
:class:`Dropped` (count and first example) that the manifest keeps (``ingest.dropped``) and that
``ingest`` and ``info`` print, one line each (``tracekit.render.run_state.dropped_lines``).
Nothing out of range reaches a column or sizes anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import polars as pl

from tracekit.limits import (
    MAX_ABS_TIME_NS,
    MAX_DEVICE,
    MAX_DUR_NS,
    MAX_NAME_BYTES,
    MAX_STREAM,
    MIN_DEVICE,
)

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)


@dataclass(frozen=True)
class Dropped:
    """Events of one input left out for one reason."""

    source: str  # the input file (or merged part)
    reason: str
    count: int
    first: str  # the first such event: kind, name, start

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def shifted_start(start: pl.Expr, base_ns: int | None) -> pl.Expr:
    """``start + base_ns`` where it fits int64, null where it would overflow (screened out after,
    never wrapped to a negative time)."""
    if not base_ns:
        return start
    fits = start <= INT64_MAX - base_ns if base_ns > 0 else start >= INT64_MIN - base_ns
    return pl.when(fits).then(start + base_ns).otherwise(None)


def _rules() -> list[tuple[str, pl.Expr]]:
    start, dur = pl.col("start_ns"), pl.col("dur_ns")
    return [
        ("no usable time stamp (missing, or ts + baseTimeNanoseconds overflows int64 ns)", start.is_null()),
        (f"start out of range (|start| > 2^62 ns = {MAX_ABS_TIME_NS})", start.abs() > MAX_ABS_TIME_NS),
        ("no usable duration (not a finite number of µs in the int64 ns range)", dur.is_null()),
        ("negative duration", dur < 0),
        (f"duration out of range (> 2^62 ns = {MAX_DUR_NS})", dur > MAX_DUR_NS),
        (f"device out of range ({MIN_DEVICE} .. {MAX_DEVICE})",
         (pl.col("device") < MIN_DEVICE) | (pl.col("device") > MAX_DEVICE)),
        (f"stream out of range (0 .. {MAX_STREAM})", pl.col("stream") < 0),
        (f"name longer than {MAX_NAME_BYTES >> 20} MiB", pl.col("name").str.len_bytes() > MAX_NAME_BYTES),
    ]


def screen_events(ev: pl.DataFrame, source: str) -> tuple[pl.DataFrame, list[Dropped]]:
    """``ev`` without the events outside the limits, and one Dropped per reason (first reason wins)."""
    rules = [(why, cond.fill_null(False)) for why, cond in _rules() if all(c in ev.columns for c in cond.meta.root_names())]
    if not rules:
        return ev, []
    flags = ev.select([cond.alias(f"_{i}") for i, (_, cond) in enumerate(rules)])
    counts = flags.sum().row(0)
    if not any(counts):
        return ev, []
    out: list[Dropped] = []
    taken = pl.Series("", [False] * ev.height, dtype=pl.Boolean)
    for i, (why, _) in enumerate(rules):
        if not counts[i]:
            continue
        mask = flags.get_column(f"_{i}") & ~taken
        n = int(mask.sum())
        if n:
            row = ev.filter(mask).row(0, named=True)
            name = row.get("name")
            shown = repr(name[:80] + "...") if isinstance(name, str) and len(name) > 80 else repr(name)
            first = f"{row.get('kind')} {shown} at ts {row.get('start_ns')} ns, dur {row.get('dur_ns')} ns"
            out.append(Dropped(source=source, reason=why, count=n, first=first))
        taken = taken | mask
    return ev.filter(~taken), out


__all__ = ["Dropped", "screen_events", "shifted_start"]
