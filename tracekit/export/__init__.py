"""Exporters (Perfetto protobuf, Chrome JSON) and trace validation.

``export_run(run, out)`` reads a run, selects ranks / phases / a window
(``select.Selection``), lays it out (``layout.build_layout``) and streams it to a
file in one of the registered formats (``tracekit.exporters.FORMATS``: ``.pftrace`` Perfetto,
``.json[.gz]`` Chrome JSON), atomically. Perfetto is written rank by rank (``ranked``: one packet
stream per rank, concatenated), so memory is one rank's (or one batch of ranks'), not the run's. ``validate.validate_trace`` checks a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import polars as pl

from tracekit.errors import AnalysisError
from tracekit.export.buckets import attribution_buckets
from tracekit.export.counts import ExportCounts
from tracekit.export.select import Selection, select_events
from tracekit.exporters import ExportFormat, WriteContext, format_for
from tracekit.outputs import atomic_write

if TYPE_CHECKING:
    from tracekit.export.ranked import Chunk, Progress
    from tracekit.store import RankedRun

WARN_BYTES: Final = 500_000_000


@dataclass
class ExportResult(ExportCounts):
    path: str
    format: str
    ranks: list[int]
    selection: str
    warnings: list[str] = field(default_factory=list)


def format_of(path: str | os.PathLike[str], fmt: str | None = None) -> str:
    """The registry name of the format (``tracekit.exporters``) from ``fmt`` or the
    file suffix. Raises ValueError."""
    return format_for(path, fmt).name


def _clean(events: pl.DataFrame, warnings: list[str]) -> pl.DataFrame:
    bad = events.select(
        (pl.col("start_ns").is_null() | pl.col("rank").is_null()).sum().alias("no_start"),
        (pl.col("dur_ns") < 0).sum().alias("neg_dur"),
    ).row(0)
    if bad[0]:
        warnings.append(f"{bad[0]} event(s) without a start time or rank left out")
        events = events.filter(pl.col("start_ns").is_not_null() & pl.col("rank").is_not_null())
    if bad[1]:
        warnings.append(f"{bad[1]} event(s) with a negative duration shown with duration 0")
    return events


def _check_ranks(sel: Selection, have: Sequence[int], path: str | None) -> list[int]:
    """The ranks of the export (``sel.ranks``, each checked to be in the run, else all)."""
    if sel.ranks is None:
        return sorted(have)
    missing = [r for r in sel.ranks if r not in set(have)]
    if missing:
        raise AnalysisError(f"rank(s) {','.join(map(str, missing))} not in the run (it has {','.join(map(str, sorted(have)))})",
                            path=path)
    return sorted(set(sel.ranks))


def _size_warning(est: int, n_slices: int) -> str:
    return (f"the export will be about {est / 1e6:.0f} MB ({n_slices} slices); the Perfetto UI struggles above "
            "~500 MB: narrow it with --phase verify --cycles A-B, --ranks 0,1 or --window START:END")


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
    full_ranks: Sequence[int] | None = None,
    progress: Progress | None = None,
) -> ExportResult:
    """Export an event table (one run) to ``out``. Raises AnalysisError on an empty selection.

    Perfetto: rank by rank (``tracekit.export.ranked``), the ranks of ``full_ranks`` (default: all) in
    full, the others with their collectives only. Chrome JSON: one layout of the whole selection."""
    from tracekit.export.layout import layout_options

    form = format_for(out, fmt)
    layout_options({"flows": flows})
    sel = selection or Selection()
    warnings: list[str] = []
    events = _clean(events, warnings)
    if form.name == "perfetto":
        from tracekit.export.ranked import plan_chunks

        if events.height == 0:
            raise AnalysisError("the run holds no events", path=source)
        ranks = _check_ranks(sel, events["rank"].unique().to_list(), source)
        run_start = int(events["start_ns"].min()) if sel.window is not None else None  # type: ignore[arg-type]
        counts = events.group_by("rank").len().sort("rank").filter(pl.col("rank").is_in(ranks))
        chunks = plan_chunks([(int(r), int(c)) for r, c in counts.iter_rows()])
        return _export_ranked(form, out, chunks, manifest, sel, run_start, flows, buckets, outstanding,
                              full_ranks, warnings, frame=events, source=source, progress=progress)
    if full_ranks is not None:
        raise ValueError("--full-ranks is for the Perfetto export (Chrome JSON holds every selected rank in full)")
    ev = events  # a finalized table (tracekit.finalize): phases and collectives are set
    picked = select_events(ev, sel, path=source)
    if sel.ranks is not None:
        ev = ev.filter(pl.col("rank").is_in(list(sel.ranks)))
    bk = attribution_buckets(ev, warnings) if buckets else None
    from tracekit.export.layout import build_layout

    lay = build_layout(picked, manifest, flows=flows, buckets=bk, outstanding=outstanding)
    est = form.estimate_size(lay)
    if est > WARN_BYTES:
        warnings.append(_size_warning(est, lay.n_slices))
    dest = Path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest) as tmp, open(tmp, "wb") as fh:
        written = form.write(lay, fh, WriteContext(path=str(dest), selection=sel.describe(), source=source or ""))
    return ExportResult(
        path=str(dest), format=form.name, bytes_written=written, estimated_bytes=est, n_slices=lay.n_slices,
        n_gpu_slices=int(lay.is_gpu.sum()), n_counters=lay.n_counters, n_flows=int(lay.flow_id.size),
        n_tracks=len(lay.tracks), ranks=lay.ranks, selection=sel.describe(), warnings=lay.warnings + warnings,
    )


def _export_ranked(form: ExportFormat, out: str | os.PathLike[str], chunks: Sequence[Chunk], manifest: Mapping[str, Any],
                   sel: Selection, run_start: int | None, flows: Sequence[str], buckets: bool, outstanding: bool,
                   full_ranks: Sequence[int] | None, warnings: list[str], *, frame: pl.DataFrame | None = None,
                   source: str | None = None, executor: Any = None, progress: Progress | None = None) -> ExportResult:
    from dataclasses import replace

    from tracekit.export.ranked import Plan, write_streams

    plan = Plan(selection=replace(sel, ranks=None), full=frozenset(full_ranks) if full_ranks is not None else None,
                run_start=run_start, phase_top=0, flows=tuple(flows), buckets=buckets, outstanding=outstanding)
    dest = Path(out)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest) as tmp, open(tmp, "wb") as fh:
        got = write_streams(chunks, plan, manifest, fh, dest, frame=frame, executor=executor, progress=progress,
                            path=source)
    n = ExportCounts.total(got.done)
    if n.estimated_bytes > WARN_BYTES:
        warnings.append(_size_warning(n.estimated_bytes, n.n_slices))
    what = sel.describe()
    if full_ranks is not None:
        what += ("; " if what else "") + "in full: ranks " + (",".join(map(str, sorted(full_ranks))) or "none") + \
            ", the others their collectives"
    return ExportResult(
        path=str(dest), format=form.name, bytes_written=n.bytes_written, estimated_bytes=n.estimated_bytes,
        n_slices=n.n_slices, n_gpu_slices=n.n_gpu_slices, n_counters=n.n_counters, n_flows=n.n_flows,
        n_tracks=n.n_tracks, ranks=got.ranks, selection=what, warnings=got.warnings + warnings,
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
    full_ranks: Sequence[int] | None = None,
    executor: Any = None,
    progress: Progress | None = None,
    ranked: RankedRun | None = None,
) -> ExportResult:
    """Export a run file (or shard directory) to a Perfetto or Chrome JSON trace. An ``out`` that is the
    run (or inside its shard directory) is refused before anything is read (``outputs.check_output``).
    Perfetto: batch of ranks by batch of ranks (``store.open_ranked``: a shard, or a one-file run's rows
    of a few ranks, at a time; ``executor``: ``tracekit.executor``'s, default local), never the whole run
    in memory; a run ``open_ranked`` does not open (a URL prefix, an older file) is read whole.
    ``ranked``: the run as ``open_ranked`` gave it, when already opened."""
    from tracekit.export.layout import layout_options
    from tracekit.outputs import check_output
    from tracekit.store import load_run, open_ranked

    check_output(out, [run])
    form = format_for(out, fmt)
    layout_options({"flows": flows})
    rr = ranked if ranked is not None else open_ranked(run) if form.name == "perfetto" else None
    if rr is None:
        r = load_run(run)
        return export_events(r.events, r.manifest, out, fmt=fmt, selection=selection, flows=flows, buckets=buckets,
                             outstanding=outstanding, source=str(run), full_ranks=full_ranks, progress=progress)
    from tracekit.export.ranked import plan_chunks

    sel = selection or Selection()
    if not rr.ranks:
        raise AnalysisError("the run holds no events", path=str(run))
    ranks = _check_ranks(sel, sorted({f.rank for f in rr.ranks}), str(run))
    run_start = None
    if sel.window is not None:
        run_start = min(int(pl.scan_parquet(p).select(pl.col("start_ns").min()).collect().item())
                        for p in dict.fromkeys(f.path for f in rr.ranks))
    want = set(ranks)
    files = [f for f in rr.ranks if f.rank in want]
    counts: dict[int, int] = {}
    for f in files:
        counts[f.rank] = counts.get(f.rank, 0) + f.events
    return _export_ranked(form, out, plan_chunks(sorted(counts.items()), files), rr.manifest, sel, run_start, flows,
                          buckets, outstanding, full_ranks, [], source=str(run), executor=executor, progress=progress)


__all__ = ["ExportResult", "Selection", "attribution_buckets", "export_events", "export_run", "format_of"]
