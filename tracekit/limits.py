"""The ranges tracekit accepts for every integer that sizes or places something (docs/ingest.md, "Limits").

One table for ingest (a Kineto trace's ``distributedInfo``, ``ts``, ``dur``, ``args.device``,
``args.stream``), for every reader of a run's manifest (``world_size``, rank keys) and for a run's
events. A value outside its range is never used to size a table or a loop: a rank or world size
outside it is one error line; an event outside it is dropped and reported (count and first
example) by ``tracekit.ingest.screen``.
"""

from __future__ import annotations

from typing import Final

MAX_WORLD_SIZE: Final = 1 << 16  # ranks of one run: 0 .. MAX_WORLD_SIZE - 1 (a table per rank is built)
MIN_DEVICE: Final = -1  # -1: host events (schema: device is int16)
MAX_DEVICE: Final = (1 << 15) - 1
MAX_STREAM: Final = (1 << 63) - 1  # CUDA stream ids are opaque (int64 in the schema); not negative
MAX_ABS_TIME_NS: Final = 1 << 62  # |start_ns| (about 146 years): start + dur never overflows int64
MAX_DUR_NS: Final = 1 << 62  # an event's duration in ns (0 .. this)
MAX_NAME_BYTES: Final = 1 << 20  # an event's name in bytes (the samples' longest: 1,270 bytes)


def world_size_problem(value: object) -> str | None:
    """Why ``value`` is no world size tracekit accepts, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"world_size {value!r} is not an integer"
    if not 1 <= value <= MAX_WORLD_SIZE:
        return f"world_size {value} is out of range (1 .. {MAX_WORLD_SIZE})"
    return None


def rank_problem(value: object) -> str | None:
    """Why ``value`` is no rank tracekit accepts, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"rank {value!r} is not an integer"
    if not 0 <= value < MAX_WORLD_SIZE:
        return f"rank {value} is out of range (0 .. {MAX_WORLD_SIZE - 1})"
    return None


__all__ = [
    "MAX_ABS_TIME_NS",
    "MAX_DEVICE",
    "MAX_DUR_NS",
    "MAX_NAME_BYTES",
    "MAX_STREAM",
    "MAX_WORLD_SIZE",
    "MIN_DEVICE",
    "rank_problem",
    "world_size_problem",
]
