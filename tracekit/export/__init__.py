"""Exporters (Perfetto protobuf, Chrome JSON) and trace validation.

``export_run(run, out)`` reads a run, selects ranks / phases / a window
(``select.Selection``), lays it out (``layout.build_layout``) and streams it to a
file in one of the registered formats (``tracekit.exporters.FORMATS``: ``.pftrace`` Perfetto,
``.json[.gz]`` Chrome JSON), atomically. ``validate.validate_trace`` checks a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit.export.buckets import attribution_buckets
from tracekit.export.select import Selection, select_events
from tracekit.exporters import WriteContext, format_for
from tracekit.outputs import atomic_write

WARN_BYTES: Final = 500_000_000


@dataclass
class ExportResult:
    path: str
    format: str
    bytes_written: int
    estimated_bytes: int
    n_slices: int
    n_gpu_slices: int
    n_counters: int
    n_flows: int
    n_tracks: int
    ranks: list[int]
    selection: str
    warnings: list[str] = field(default_factory=list)


def format_of(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The registry name of the format (``tracekit.exporters``) from ``fmt`` or the
    file suffix. Raises ValueError."""
    return format_for(path, fmt).name


def export_events(
    events: pl.DataFrame,
    manifest: Mapping[str, Any],
    out: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    selection: Selection | None = None,
    flows: Sequence[str] = ("launches",),
    buckets: bool = True,
    outstanding: bool = False,
    source: str | None = None,
) -> ExportResult:
    """Export an event table (one run) to ``out``. Raises AnalysisError on an empty selection."""
    from tracekit.export.layout import build_layout

    form = format_for(out, fmt)
    sel = selection or Selection()
    warnings: list[str] = []
    bad = events.select(
        (pl.col("start_ns").is_null() | pl.col("rank").is_null()).sum().alias("no_start"),
        (pl.col("dur_ns") < 0).sum().alias("neg_dur"),
    ).row(0)
    if bad[0]:
        warnings.append(f"{bad[0]} event(s) without a start time or rank left out")
        events = events.filter(pl.col("start_ns").is_not_null() & pl.col("rank").is_not_null())
    if bad[1]:
        warnings.append(f"{bad[1]} event(s) with a negative duration shown with duration 0")
    ev = events  # a finalized table (tracekit.finalize): phases and collectives are set
    picked = select_events(ev, sel, path=source)
    if sel.ranks is not None:
        ev = ev.filter(pl.col("rank").is_in(list(sel.ranks)))
    bk = attribution_buckets(ev, warnings) if buckets else None
    lay = build_layout(picked, manifest, flows=flows, buckets=bk, outstanding=outstanding)
    est = form.estimate_size(lay)
    if est > WARN_BYTES:
        warnings.append(
            f"the export will be about {est / 1e6:.0f} MB ({lay.n_slices} slices); the Perfetto UI struggles above "
            "~500 MB: narrow it with --phase verify --cycles A-B, --ranks 0,1 or --window START:END"
        )
    dest = Path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest) as tmp, open(tmp, "wb") as fh:
        written = form.write(lay, fh, WriteContext(path=str(dest), selection=sel.describe(), source=source or ""))
    return ExportResult(
        path=str(dest), format=form.name, bytes_written=written, estimated_bytes=est, n_slices=lay.n_slices,
        n_gpu_slices=int(lay.is_gpu.sum()), n_counters=lay.n_counters, n_flows=int(lay.flow_id.size),
        n_tracks=len(lay.tracks), ranks=lay.ranks, selection=sel.describe(), warnings=lay.warnings + warnings,
    )


def export_run(
    run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    fmt: str | None = None,
    selection: Selection | None = None,
    flows: Sequence[str] = ("launches",),
    buckets: bool = True,
    outstanding: bool = False,
) -> ExportResult:
    """Export a run file (or shard directory) to a Perfetto or Chrome JSON trace. An ``out`` that is the run
    (or inside its shard directory) is refused before anything is read (``outputs.check_output``)."""
    from tracekit.outputs import check_output
    from tracekit.store import load_run

    check_output(out, [run])
    r = load_run(run)
    return export_events(r.events, r.manifest, out, fmt=fmt, selection=selection, flows=flows, buckets=buckets,
                         outstanding=outstanding, source=str(run))


__all__ = ["ExportResult", "Selection", "attribution_buckets", "export_events", "export_run", "format_of"]
