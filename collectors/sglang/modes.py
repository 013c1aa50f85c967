"""Profile modes of the live SGLang capture: what each asks of the server, how its rank data becomes a run.

| mode | in every scheduler process | the run holds |
|---|---|---|
| ``full`` | SGLang's ``/start_profile``, CPU + CUDA activities; tracekit's phases as ``record_function`` | CPU ops, launches, kernels, phase ranges |
| ``lite`` | ``/start_profile`` with CUDA activity only (``activities: ["GPU"]``, no stacks); tracekit's hooks record the phase ranges on the host clock (window.py) | launches, kernels, phase ranges joined to launches by thread and time |
| ``timing`` | no profiler; the hooks record each phase range and, on a GPU, a CUDA event before and after it | phase rows per cycle: host time, GPU time between the events, facts |

``lite``: the ranks' traces (SGLang's files) are ingested as in ``full``; each rank's recorded
ranges are cut to the cycles that overlap its profiled span, the launches' Kineto thread
keys are mapped to native thread ids (``collectors/ranges.lite_thread_map``: a CUDA-only
profiler cannot map them itself), and the table is finalized again, so phase membership joins
launches to the ranges by (rank, pid, thread) and time, exactly as for the built-in lite mode.
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from tracekit import schema
from tracekit.collectors.session import PROFILE_MODES

__all__ = ["CANNOT_GIVE", "MODE_NOTES", "PROFILE_MODES", "RECORDS", "START_PROFILE", "merge_lite", "timing_events", "trim_to_span"]

# the /start_profile body of each profiler mode, besides output_dir and num_steps; every key is a
# field of ProfileReqInput (0.5.2 - 0.5.12) / ProfileReq (0.5.23), every activity a key of their
# activity_map (tests/test_sglang_contract.py checks both in the real wheels)
START_PROFILE: Final[dict[str, dict[str, Any]]] = {
    "full": {"activities": ["CPU", "GPU"]},
    "lite": {"activities": ["GPU"], "with_stack": False, "record_shapes": False},
}

# what each mode records, and what it cannot give (printed by the capture, kept in the manifest)
RECORDS: Final[dict[str, str]] = {
    "full": "SGLang's /start_profile with CPU + CUDA activities (and SGLang's default Python stacks): CPU ops, "
            "launches, kernels, tracekit's record_function phase ranges",
    "lite": "SGLang's /start_profile with CUDA activity only, no stacks: launches and kernels; phase ranges recorded "
            "by tracekit's hooks on the host clock, joined to the launches by thread and time",
    "timing": "no profiler: tracekit's hooks time each phase of every cycle (host clock; on a GPU, CUDA events on "
              "the stream current at the hook) with batch size, tokens, sequence length, accept length, graphed",
}
CANNOT_GIVE: Final[dict[str, str]] = {
    "full": "nothing it records is missing, but every eager launch pays the most (phase times without that "
            "dilation: --profile timing)",
    "lite": "CPU ops (no op-scope category fallback, no host-op attribution) and SGLang's own step[...] spans",
    "timing": "kernels: no kernel buckets, launch overhead or allreduce wait (attribute prints phase times per "
              "instance)",
}
MODE_NOTES: Final[dict[str, str]] = {m: f"{RECORDS[m]}; cannot give: {CANNOT_GIVE[m]}" for m in RECORDS}


def trim_to_span(ranges: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """The recorded ranges of one rank that overlap its profiled span ``[lo, hi]`` (ns: the first to the last
    event of its trace), with the facts markers of the cycles kept (a v2 accept length arrives after its
    cycle, possibly after ``hi``). Overlap, not containment: a phase that opens inside SGLang's window
    but before its first launch (Python work first) is in the window. SGLang starts and stops its profiler
    between scheduler iterations, so a phase cut by the window's edge is not expected."""
    from tracekit.finalize.phases import parse_label

    if ranges.is_empty():
        return ranges
    labels = [parse_label(n) for n in ranges.get_column("name").to_list()]
    starts = ranges.get_column("start_ns").to_list()
    ends = (ranges.get_column("start_ns") + ranges.get_column("dur_ns")).to_list()
    inside = [s <= hi and e >= lo for s, e in zip(starts, ends, strict=True)]
    kept_cycles = {lab.facts.get("cycle") for lab, ok in zip(labels, inside, strict=True)
                   if ok and lab is not None and not lab.is_facts}
    keep = [
        ok if lab is None or not lab.is_facts else lab.facts.get("cycle") in kept_cycles
        for lab, ok in zip(labels, inside, strict=True)
    ]
    return ranges.filter(pl.Series(keep, dtype=pl.Boolean))


def merge_lite(events: pl.DataFrame, deliveries: list[Any]) -> tuple[pl.DataFrame, dict[int, dict[str, Any]]]:
    """The ingested CUDA-only traces (``events``, all ranks) with each rank's recorded ranges
    (``window.RankRanges``) joined in; finalized. Returns (events, per-rank notes for the manifest)."""
    from tracekit.collectors.ranges import lite_thread_map, remap_threads
    from tracekit.finalize.pipeline import finalize_events

    parts: list[pl.DataFrame] = []
    notes: dict[int, dict[str, Any]] = {}
    for d in deliveries:
        ev = events.filter(pl.col("rank") == d.rank)
        rr = schema.conform(d.events.with_columns(pl.lit(d.rank, dtype=pl.Int32).alias("rank")))
        if ev.is_empty():
            lo, hi = 0, -1
        else:
            lo = int(ev.get_column("start_ns").min())  # type: ignore[arg-type]
            hi = int((ev.get_column("start_ns") + ev.get_column("dur_ns").fill_null(0)).max())  # type: ignore[arg-type]
        kept = trim_to_span(rr, lo, hi)
        known = {int(k): int(v) for k, v in (d.info.get("thread_keys") or {}).items()}
        tmap, how = lite_thread_map(ev, kept, known)
        parts.append(remap_threads(ev, tmap))
        parts.append(kept)
        notes[d.rank] = {"recorded_ranges": rr.height, "kept_ranges": kept.height, "thread_map": how}
    rest = events.filter(~pl.col("rank").is_in([d.rank for d in deliveries]))
    if not rest.is_empty():
        parts.append(rest)
    return finalize_events(pl.concat(parts, how="vertical_relaxed")), notes


def timing_events(deliveries: list[Any]) -> pl.DataFrame:
    """A timing-mode run's table: every rank's recorded ranges (phase rows and facts markers), finalized."""
    from tracekit.finalize.pipeline import finalize_events

    parts = [schema.conform(d.events.with_columns(pl.lit(d.rank, dtype=pl.Int32).alias("rank"))) for d in deliveries]
    return finalize_events(pl.concat(parts, how="vertical_relaxed") if parts else schema.empty_events())
