"""GPU events that join no launch: what ``info`` and ``ingest`` say instead of moving time silently.

A kernel, copy or memset joins its launch by (rank, correlation) (``tracekit.finalize.membership``).
Two kinds of rows break that join without an error: GPU events whose correlation id matches no
launch row of their rank (their time belongs to no phase through a launch), and correlation ids
that more than one launch row of a rank carries (the GPU events join the first, so time can move
between phases). :func:`join_problems` counts both per run, with the first example.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from tracekit import schema


@dataclass(frozen=True)
class JoinProblem:
    """One kind of broken launch join, over the run."""

    what: str  # "unjoined" | "duplicate"
    count: int  # GPU events without a launch / launch rows sharing a correlation id
    gpu_ns: int  # GPU time of those events (unjoined) or of the GPU events on the shared ids (duplicate)
    first: str  # the first example: rank, name, correlation


def join_problems(events: pl.DataFrame) -> list[JoinProblem]:
    """Unjoined GPU events and duplicated launch correlation ids (empty list: every join is clean,
    or the run has no launch rows at all, as a CPU-only or timing run)."""
    need = {"rank", "kind", "name", "correlation", "dur_ns"}
    if not need <= set(events.columns):
        return []
    gpu = events.filter(pl.col("kind").is_in(list(schema.GPU_KINDS)) & pl.col("correlation").is_not_null())
    launches = events.filter((pl.col("kind") == schema.LAUNCH) & pl.col("correlation").is_not_null())
    if gpu.height == 0 or launches.height == 0:
        return []
    out: list[JoinProblem] = []
    ranks_with_launches = launches.get_column("rank").unique().implode()
    keys = launches.select("rank", "correlation").unique()
    lone = gpu.filter(pl.col("rank").is_in(ranks_with_launches)).join(keys, on=["rank", "correlation"], how="anti")
    if lone.height:
        r = lone.row(0, named=True)
        out.append(JoinProblem("unjoined", lone.height, int(lone.get_column("dur_ns").sum()),
                               f"rank {r['rank']}, {r['name']!r}, correlation {r['correlation']}"))
    dup = launches.group_by("rank", "correlation").agg(pl.len().alias("n"), pl.col("name").first()).filter(pl.col("n") > 1)
    if dup.height:
        hit = gpu.join(dup.select("rank", "correlation"), on=["rank", "correlation"], how="semi")
        r = dup.sort("rank", "correlation").row(0, named=True)
        out.append(JoinProblem("duplicate", int(dup.get_column("n").sum()), int(hit.get_column("dur_ns").sum()),
                               f"rank {r['rank']}, {r['name']!r}, correlation {r['correlation']} ({r['n']} launches)"))
    return out


def combine_join_problems(per_rank: list[list[JoinProblem]]) -> list[JoinProblem]:
    """``join_problems`` of a run from those of its ranks (in rank order; each rank's own list): counts
    and GPU time summed, the first example from the lowest rank, as on the whole table."""
    out: list[JoinProblem] = []
    for what in ("unjoined", "duplicate"):
        got = [p for ps in per_rank for p in ps if p.what == what]
        if got:
            out.append(JoinProblem(what, sum(p.count for p in got), sum(p.gpu_ns for p in got), got[0].first))
    return out


@dataclass(frozen=True)
class Unphased:
    """GPU events of a run that belong to no phase instance (``phase_id`` null)."""

    count: int
    gpu_ns: int  # their summed duration
    total_ns: int  # summed duration of every GPU event


def unphased_gpu(events: pl.DataFrame) -> Unphased:
    """GPU time that joined no phase: what ``attribute``'s tables leave out (a run with no phase
    ranges at all is attributed whole, so there it is 0)."""
    return unphased_of([unphased_parts(events)])


def unphased_parts(events: pl.DataFrame) -> tuple[int, int, int, int]:
    """(GPU events, those without a phase id, their summed duration, every GPU event's) of a table: what
    ``unphased_of`` adds up over the parts of a run (its ranks, read one at a time)."""
    gpu = events.filter(pl.col("kind").is_in(list(schema.GPU_KINDS)))
    total = int(gpu.get_column("dur_ns").sum()) if gpu.height else 0
    if gpu.height == 0 or "phase_id" not in gpu.columns:
        return gpu.height, gpu.height, 0, total
    lone = gpu.filter(pl.col("phase_id").is_null())
    return gpu.height, lone.height, int(lone.get_column("dur_ns").sum()) if lone.height else 0, total


def unphased_of(parts: Iterable[tuple[int, int, int, int]]) -> Unphased:
    """``unphased_gpu`` of a run from its parts' ``unphased_parts``: 0 when no GPU event has a phase id."""
    n = lone = lone_ns = total = 0
    for a, b, c, d in parts:
        n, lone, lone_ns, total = n + a, lone + b, lone_ns + c, total + d
    if n == 0 or lone == n:
        return Unphased(0, 0, total)
    return Unphased(lone, lone_ns, total)


__all__ = ["JoinProblem", "Unphased", "combine_join_problems", "join_problems", "unphased_gpu", "unphased_of",
           "unphased_parts"]
