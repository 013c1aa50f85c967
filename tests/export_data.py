"""Helpers for the export tests: synthetic runs on disk and what the run says an export must hold."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
from export_synth import make_events, make_manifest

from tracekit.export.validate import Slice
from tracekit.finalize import finalize_events, stamp
from tracekit.schema import GPU_KINDS
from tracekit.store import write_run

RANK = re.compile(r"\brank (\d+)\b")


def synth_run(tmp: Path, ranks: int = 3, cycles: int = 5, kernels: int = 12, name: str = "run.parquet") -> Path:
    return write_run(finalize_events(make_events(ranks, cycles, kernels)), tmp / name, stamp(make_manifest(ranks)))


def gpu_rows(events: pl.DataFrame) -> list[tuple[int, str, int, int]]:
    """(rank, full name, start_ns, dur_ns) of the run's kernels / memcpys / memsets, sorted."""
    g = events.filter(pl.col("kind").is_in(list(GPU_KINDS)))
    return sorted(zip(g["rank"].to_list(), g["name"].to_list(), g["start_ns"].to_list(), g["dur_ns"].to_list(), strict=True))


def exported_gpu(slices: list[Slice]) -> list[tuple[int, str, int, int]]:
    """The same tuples from the slices on stream tracks of an export (full name from the args)."""
    out = []
    for s in slices:
        if not s.track.startswith("stream") and " stream " not in s.track:
            continue
        if s.track.endswith("annotations"):
            continue
        m = RANK.search(s.process)
        assert m, s.process
        out.append((int(m.group(1)), str(s.args.get("name", s.name)), s.ts, s.dur))
    return sorted(out)
