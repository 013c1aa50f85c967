"""Helpers for the export tests: synthetic runs on disk and what the run says an export must hold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import polars as pl
from export_synth import make_events, make_manifest

from tracekit.export.layout import Layout
from tracekit.export.validate import Slice
from tracekit.finalize import finalize_events, stamp
from tracekit.schema import GPU_KINDS
from tracekit.store import write_run

RANK = re.compile(r"\brank (\d+)\b")


def synth_run(tmp: Path, ranks: int = 3, cycles: int = 5, kernels: int = 12, name: str = "run.parquet") -> Path:
    return write_run(finalize_events(make_events(ranks, cycles, kernels)), tmp / name, stamp(make_manifest(ranks)))


def layout_differences(a: Layout, b: Layout) -> list[str]:
    """The fields where two layouts differ (arrays compared with their dtype, arg-set values with their
    Python type); empty when they are the same."""
    bad = []
    for f in a.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, np.ndarray):
            ok = x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=x.dtype.kind == "f"))
        elif f == "ints":
            ok = x.keys() == y.keys() and all(
                x[k][0].dtype == y[k][0].dtype and np.array_equal(x[k][0], y[k][0]) and np.array_equal(x[k][1], y[k][1])
                for k in x)
        elif f == "argsets":
            # repr: NaN equals NaN, -0.0 differs from 0.0, and 1 from 1.0 and True
            ok = [[(k, type(v), repr(v)) for k, v in s] for s in x] == [[(k, type(v), repr(v)) for k, v in s] for s in y]
        else:
            ok = x == y
        if not ok:
            bad.append(f)
    return bad


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
