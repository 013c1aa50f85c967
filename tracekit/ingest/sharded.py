"""Ingest through an executor (``tracekit ingest --executor``): files parsed and ranks finalized as tasks.

Every task is a module-level function (``tracekit.executor``) that reads its input from and writes its
output to disk (a staging directory beside the output, uncompressed Arrow IPC, memory-mapped when read
back), so a task holds one file's or one rank's events, nothing is kept in a worker between tasks,
and a task whose worker died can simply run again:

1. ``scan_file(path, stage, i)``: read, gunzip, parse one file; each part (a rank it holds) staged as
   ``file-000i-j.arrow``. Returns the parts without their events (rank hints, metadata, pids,
   devices): what travels to the driver, which assigns ranks (``tracekit.ingest.ranks``) and builds
   the run's manifest from them exactly as the in-process ingest does.
2. ``finalize_ranks(...)``: a group of ranks (in rank order, until their staged parts reach
   ``GROUP_BYTES``: finalize's fixed cost per call spread over a few small ranks; a large rank is a
   group of its own) from their staged parts in canonical order, finalized (``finalize_events``: it
   works rank by rank; the group's phase ids 0..K-1), conformed and sorted, staged as
   ``group-g.arrow``. Returns its ranks' collective rows (``coll_match.alignment_rows``: what the driver
   fits the clock offsets from, ``align.align_events``), rows, time resolution, join problems and phase
   instance count.
3. ``write_rank(...)``: the rank's rows of its group's stage ``placed`` in the run (its clock offset added
   to its times, the phase instances of the ranks before its group to its phase ids: the ids the whole
   ingest gives), written atomically as the rank's shard (temp file + rename: a worker killed
   mid-write leaves a temp file, never a half shard).

The shards form a sharded run (a directory of ``rank-00003.parquet``, each with the manifest of its
rank; ``tracekit.store`` reads the directory as one run). ``ingest_sharded`` writes them into
``out_dir``; ``ingest_file`` instead streams the placed groups from the stage into one run file (the
driver never holds the run). Either holds the same table as the whole in-process ingest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from tracekit import schema
from tracekit.errors import BadTraceError, EmptyTraceError, NotATraceError
from tracekit.ingest import (
    _EMPTY,
    OnError,
    Progress,
    _gc_paused,
    _manifest,
    _Part,
    _read_parts,
    _sort_part,
    rank_parts,
    skip_or_raise,
)
from tracekit.ingest.discover import discover

SHARD_NAME = "rank-{rank:05d}.parquet"  # store.SHARD_GLOB reads them
_Frame = TypeVar("_Frame", pl.DataFrame, pl.LazyFrame)
_ERRORS: dict[str, type[BadTraceError]] = {c.__name__: c for c in (BadTraceError, EmptyTraceError, NotATraceError)}


def _stage_part(stage: str, i: int, j: int) -> str:
    return os.path.join(stage, f"file-{i:06d}-{j}.arrow")


def _stage(df: pl.DataFrame, path: str) -> None:
    """Write a staged table atomically (a task run twice finds a whole file or none)."""
    from tracekit.outputs import atomic_write

    with atomic_write(path) as tmp:
        df.write_ipc(tmp, compression="uncompressed")


def scan_file(path: str, stage: str, i: int) -> list[_Part] | tuple[str, str]:
    """Task 1 (see the module docstring): the file's parts without events (each staged), or (error
    class, message) for a file that is not a readable trace."""
    try:
        with _gc_paused():
            parts = _read_parts(path)
            for j, p in enumerate(parts):
                _stage(p.events, _stage_part(stage, i, j))
            return [dataclasses.replace(p, events=_EMPTY) for p in parts]
    except BadTraceError as exc:
        return exc.__class__.__name__, exc.message


GROUP_BYTES = 8 << 20  # a finalize task takes ranks until their staged parts reach this (one rank at least)


def _stage_group(stage: str, g: int) -> str:
    return os.path.join(stage, f"group-{g:05d}.arrow")


def finalize_ranks(g: int, stage: str, ranks: Sequence[tuple[int, Sequence[tuple[int, int]]]],
                   rules: Sequence[Any] | None) -> dict[str, Any]:
    """Task 2: the ranks of group ``g`` (``(rank, picks)`` in rank order; a rank's parts are file ``i``'s
    part ``j`` for each ``(i, j)`` of its picks, in that order), finalized together (finalize works rank by
    rank; a group spreads its fixed cost per call over a few small ranks), staged as ``group-g.arrow``.
    Returns per rank its rows, time resolution and clock rows; for the group its join problems and phase
    instances (its ``phase_id`` are 0..K-1 over its ranks in rank order: ``placed`` numbers them in the run)."""
    from tracekit.analyzers.coll_match import alignment_rows
    from tracekit.analyzers.joins import join_problems
    from tracekit.finalize.pipeline import finalize_events
    from tracekit.resolution import time_resolution
    from tracekit.store import is_canonical_order

    path = _stage_group(stage, g)
    with _gc_paused():
        if os.path.exists(path):  # run again (its worker died after staging it)
            events = pl.read_ipc(path)
        else:
            frames = [_sort_part(schema.conform(pl.read_ipc(_stage_part(stage, i, j))
                                                .with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank"))))
                      for rank, picks in ranks for i, j in picks]
            events = pl.concat(frames, how="vertical", rechunk=False) if len(frames) > 1 else frames[0]
            del frames
            events = schema.conform(finalize_events(events, rules=rules))
            if not is_canonical_order(events):  # as write_run would sort it: staged ready to stream
                events = schema.sort_events(events)
            _stage(events, path)
        for _, picks in ranks:
            for i, j in picks:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(_stage_part(stage, i, j))
        coarse = time_resolution(events)  # on the recorded clock, as ingest_traces
        res = {c.rank: c.resolution_ns for c in coarse}
        counts = dict(events.group_by("rank").len().iter_rows())
        clocks, at = [], 0
        for rank, _ in ranks:  # the table is in rank order: each rank a slice
            one = events.slice(at, counts.get(rank, 0))
            at += one.height
            rows = alignment_rows(one)
            first = one.head(1)  # the rank is named even when it has no collective (its clock row: offset 0)
            clocks.append(rows if alignment_rows(first).height else pl.concat([first.select(rows.columns), rows]))
        clock = schema.owned(pl.concat(clocks, how="vertical"))  # not the group's buffers kept alive by the result
        top = events.get_column("phase_id").max()
        return {"group": g, "rows": {r: counts.get(r, 0) for r, _ in ranks},
                "time_resolution_ns": {r: res[r] for r, _ in ranks if r in res}, "coarse": coarse,
                "joins": join_problems(events), "phases": 0 if top is None else int(top) + 1,  # type: ignore[arg-type]
                "clock_rows": clock}


def placed(events: _Frame, add_ns: dict[int, int], first_phase: int) -> _Frame:
    """Finalized ranks placed in the run: ``add_ns[rank]`` added to their times (the clock alignment) and
    ``first_phase`` to their phase ids (the instances of the ranks before them: the ids the whole ingest's
    finalize gives, numbered over the run in rank order)."""
    adds = [(r, a) for r, a in add_ns.items() if a]
    shift = []
    if adds:  # when/then, not replace_strict: polars' streaming sink runs it (replace_strict made it collect the run)
        by_rank: Any = pl.when(pl.col("rank") == adds[0][0]).then(adds[0][1])
        for r, a in adds[1:]:
            by_rank = by_rank.when(pl.col("rank") == r).then(a)
        shift.append(pl.col("start_ns") + by_rank.otherwise(0))
    shift += [pl.col("phase_id") + first_phase] if first_phase else []
    return events.with_columns(shift) if shift else events


def write_rank(rank: int, stage: str, g: int, add_ns: int, first_phase: int, out_path: str,
               manifest: dict[str, Any]) -> int:
    """Task 3: rank ``rank``'s table from its group's stage ``g``, ``placed`` in the run (``add_ns``, its
    group's ``first_phase``), written atomically as its shard ``out_path`` with ``manifest``; returns the
    bytes written."""
    from tracekit.finalize.pipeline import stamp
    from tracekit.store import write_run
    from tracekit.urls import is_url, put_file

    url = out_path if is_url(out_path) else None
    local = os.path.join(stage, os.path.basename(out_path)) if url else out_path  # an object: written, then PUT
    with _gc_paused():
        events = pl.scan_ipc(_stage_group(stage, g)).filter(pl.col("rank") == rank).collect()
        write_run(placed(events, {rank: add_ns}, first_phase), local, stamp(manifest), sort=False)
    size = os.path.getsize(local)
    if url is not None:
        put_file(local, url)
        os.unlink(local)
    return size


@dataclass(frozen=True)
class ShardedIngest:
    """What ``ingest_sharded`` or ``ingest_file`` wrote: the shard directory, URL prefix or run file, and the
    run's manifest and checks (never its events)."""

    out_dir: Path | str
    manifest: dict[str, Any]
    rows: int
    shards: int
    coarse: list[Any] = dataclasses.field(default_factory=list)  # resolution.CoarseRank per rank with 1 us times
    joins: list[Any] = dataclasses.field(default_factory=list)  # analyzers.joins.JoinProblem, the ranks' combined


def _shard_manifest(run_man: dict[str, Any], rank: int) -> dict[str, Any]:
    """The manifest a rank's shard carries: the run's, with its own rank section, sources and entries of
    the clock's rank-keyed maps only (``store.merge_manifests`` unites them back on read)."""
    from tracekit.store import CLOCK_BY_RANK

    files = set(run_man["ranks"][str(rank)].get("sources", []))
    srcs = [s for s in run_man.get("sources", []) if rank in s.get("ranks", []) or s.get("path") in files]
    out = {**run_man, "ranks": {str(rank): run_man["ranks"][str(rank)]}, "sources": srcs}
    if isinstance(clock := run_man.get("clock"), dict):  # its own entries of the rank-keyed maps
        out["clock"] = {k: {r: x for r, x in v.items() if r == str(rank)} if k in CLOCK_BY_RANK and isinstance(v, dict)
                        else v for k, v in clock.items()}
    return out


@dataclass
class _Staged:
    """Every rank finalized and staged (``rank-r.arrow`` in ``stage``), the clock fitted: what the writers need."""

    manifest: dict[str, Any]  # the run's, aligned (not stamped)
    groups: list[list[int]]  # the ranks of each finalize group, in rank order
    add_ns: dict[int, int]  # the clock offsets to add per rank
    first_phase: list[int]  # per group: the phase instances of the ranks before it (``placed``)
    results: list[dict[str, Any]]  # finalize_ranks', without their clock rows


def _scan_and_finalize(paths: list[str | os.PathLike[str]], stage: str, executor: Any, *, allow_missing_ranks: bool,
                       on_error: OnError, progress: Progress | None, rules: Sequence[Any] | None,
                       say: Callable[[str], None] | None, align: str | None) -> _Staged:
    """Tasks 1 and 2 for every file and rank, the ranks assigned, the manifest built and the clock fitted here."""
    skipped: list[dict[str, str]] = []
    files = discover(paths, skipped if on_error == "skip" else None)
    named = {str(Path(p)) for p in paths}
    sizes = {str(f): f.stat().st_size for f in files}
    total, done = sum(sizes.values()), 0
    from tracekit.executor import run_each

    scans = run_each(executor, scan_file, ((str(f), stage, i) for i, f in enumerate(files)))
    infos: list[tuple[int, _Part]] = []  # (file index, part without events)
    for i, (f, got) in enumerate(zip(files, scans, strict=True)):
        name = str(f)
        if progress is not None:
            progress(done, total, name)
        if isinstance(got, tuple):
            skip_or_raise(_ERRORS.get(got[0], BadTraceError)(got[1], path=name), name, named, on_error, skipped)
        else:
            infos.extend((i, p) for p in got)
        done += sizes[name]
        if progress is not None:
            progress(done, total, name)
    world, missing = rank_parts([p for _, p in infos], allow_missing_ranks, skipped)
    run_man = _manifest([p for _, p in infos], world, missing, skipped)
    # which parts (file index, index in its file) make each rank, in file order as ingest_traces keeps them
    by_rank: dict[int, list[tuple[int, int]]] = {}
    seen: dict[int, int] = {}
    for i, p in infos:
        j = seen.get(i, 0)
        seen[i] = j + 1
        by_rank.setdefault(p.unit.rank, []).append((i, j))
    del infos
    groups: list[list[tuple[int, list[tuple[int, int]]]]] = []
    size = GROUP_BYTES
    for r, picks in sorted(by_rank.items()):  # ranks in order, a group until its staged parts reach GROUP_BYTES
        if size >= GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append((r, picks))
        size += sum(os.path.getsize(_stage_part(stage, i, j)) for i, j in picks)
    results, done_ranks = [], 0
    for n, got in enumerate(run_each(executor, finalize_ranks, ((g, stage, ranks, rules) for g, ranks in enumerate(groups)))):
        results.append(got)
        done_ranks += len(groups[n])
        if say is not None:
            say(f"ingest: {done_ranks}/{len(by_rank)} rank(s) finalized")
    # the clock: fitted here from every rank's collective rows (``align`` as ingest_traces' caller does)
    from tracekit.analyzers.align import align_events

    proj = pl.concat([r.pop("clock_rows") for r in results], how="vertical")
    ranks_man = run_man["ranks"]
    _, run_man = align_events(proj, run_man, align)
    run_man["ranks"] = ranks_man
    for res in results:
        for r, ns in res["time_resolution_ns"].items():
            ranks_man[str(r)]["time_resolution_ns"] = ns
    add = {int(k): int(v) for k, v in (run_man["clock"].get("offsets_ns") or {}).items()}
    first, n = [], 0
    for res in results:  # in rank order
        first.append(n)
        n += res["phases"]
    return _Staged(run_man, [[r for r, _ in g] for g in groups], add, first, results)


def _result(out: Path | str, staged: _Staged) -> ShardedIngest:
    from tracekit.analyzers.joins import combine_join_problems
    from tracekit.finalize.pipeline import stamp

    return ShardedIngest(out_dir=out, manifest=stamp(staged.manifest),
                         rows=sum(n for r in staged.results for n in r["rows"].values()),
                         shards=sum(len(g) for g in staged.groups), coarse=[c for r in staged.results for c in r["coarse"]],
                         joins=combine_join_problems([r["joins"] for r in staged.results]))


def ingest_sharded(paths: Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str], executor: Any, *,
                   allow_missing_ranks: bool = False, on_error: OnError = "fail", progress: Progress | None = None,
                   rules: Sequence[Any] | None = None, say: Callable[[str], None] | None = None,
                   align: str | None = None) -> ShardedIngest:
    """Ingest ``paths`` into the shard directory ``out_dir`` (created if missing) through ``executor``
    (see the module docstring). Same rank rules, errors and manifest as ``ingest_traces`` followed by
    ``align_events(..., align)`` (None: auto), the offsets fitted from the ranks' collective rows."""
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    from tracekit.urls import is_url, join

    url = os.fspath(out_dir) if is_url(out_dir) else None
    out = Path(out_dir)
    if url is None:
        out.mkdir(parents=True, exist_ok=True)
    # beside the shards (a shared directory the workers see); for a URL, this host's temp directory
    stage = tempfile.mkdtemp(prefix=".ingest-stage-", dir=None if url else out)
    try:
        staged = _scan_and_finalize(list(paths), stage, executor, allow_missing_ranks=allow_missing_ranks,
                                    on_error=on_error, progress=progress, rules=rules, say=say, align=align)
        from tracekit.executor import run_each

        calls = ((r, stage, g, staged.add_ns.get(r, 0), staged.first_phase[g],
                  join(url, SHARD_NAME.format(rank=r)) if url else str(out / SHARD_NAME.format(rank=r)),
                  _shard_manifest(staged.manifest, r)) for g, ranks in enumerate(staged.groups) for r in ranks)
        n_ranks = sum(len(g) for g in staged.groups)
        for n, _ in enumerate(run_each(executor, write_rank, calls), 1):  # each manifest built as its task is sent
            if say is not None:
                say(f"ingest: {n}/{n_ranks} rank shard(s) written")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    for tmp in ([] if url else out.glob(".rank-*.tmp")):  # a worker that died mid-write left its temp file
        tmp.unlink(missing_ok=True)
    return _result(url or out, staged)


def ingest_file(paths: Iterable[str | os.PathLike[str]], out_file: str | os.PathLike[str], executor: Any, *,
                allow_missing_ranks: bool = False, on_error: OnError = "fail", progress: Progress | None = None,
                rules: Sequence[Any] | None = None, say: Callable[[str], None] | None = None,
                align: str | None = None) -> ShardedIngest:
    """Ingest ``paths`` into ONE run file ``out_file`` with memory bounded by the work in flight: tasks 1 and 2
    through ``executor`` (staged beside ``out_file``), then this process streams the staged ranks, each
    ``placed`` in the run (clock offset, phase ids), into the file (``shard_merge.sink_run``).
    The same table and manifest as ``ingest_traces`` + ``align_events`` + ``write_run``."""
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    from tracekit.finalize.pipeline import stamp
    from tracekit.shard_merge import sink_run

    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=f".{out.name[:64]}.stage-", dir=out.parent)  # the workers see it
    try:
        staged = _scan_and_finalize(list(paths), stage, executor, allow_missing_ranks=allow_missing_ranks,
                                    on_error=on_error, progress=progress, rules=rules, say=say, align=align)
        frames = [placed(pl.scan_ipc(_stage_group(stage, g)), {r: staged.add_ns.get(r, 0) for r in ranks},
                         staged.first_phase[g]) for g, ranks in enumerate(staged.groups)]
        if say is not None:
            say(f"ingest: writing {sum(len(g) for g in staged.groups)} rank(s) into {out}")
        sink_run(pl.concat(frames, how="vertical"), out, stamp(staged.manifest))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return _result(out, staged)


__all__ = ["SHARD_NAME", "ShardedIngest", "finalize_ranks", "ingest_file", "ingest_sharded", "placed", "scan_file",
           "write_rank"]
