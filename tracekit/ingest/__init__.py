"""Ingest foreign traces (Kineto / torch.profiler JSON, SGLang profiles) into the event table.

    run = ingest_traces(["profiles/"])          # files, globs or directories
    write_run(run.events, "run.parquet", run.manifest)

Input files are read, decoded and turned into columns in threads, one per core (peak
memory is about one file per core), ranks are resolved (``tracekit.ingest.ranks``), and
the combined table goes through :func:`tracekit.finalize.pipeline.finalize_events`
(categories, collectives, phase membership).
"""

from __future__ import annotations

import gc
import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from tracekit import schema
from tracekit.cores import usable_cores
from tracekit.errors import BadTraceError, EmptyTraceError, NotATraceError, RankError, TracekitError
from tracekit.ingest import fastscan
from tracekit.ingest.discover import Source, discover, read_trace_bytes
from tracekit.ingest.kineto import parse_kineto
from tracekit.ingest.kineto_events import ParsedTrace
from tracekit.ingest.ranks import MERGED_LABEL, RankHint, Unit, assign_ranks, hint_from_name
from tracekit.ingest.screen import Dropped, screen_events
from tracekit.limits import rank_problem, world_size_problem
from tracekit.manifest import RankManifest, host_from_trace_name, rank_section_dict
from tracekit.store import Run, new_manifest

Progress = Callable[[int, int, str], None]  # (bytes done, bytes total, current file)
OnError = Literal["fail", "skip"]


@dataclass
class _Part:
    unit: Unit
    events: pl.DataFrame
    meta: dict[str, Any]
    src: Source
    cpu_only: bool
    dropped: dict[str, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)  # host pids (the file name's host is trusted for these)
    devices: list[int] = field(default_factory=list)  # GPU devices, sorted
    screened: list[Dropped] = field(default_factory=list)  # events out of range, left out (tracekit.ingest.screen)


_EMPTY = pl.DataFrame()


def _cores() -> int:
    """Cores this process may run on (TRACEKIT_INGEST_THREADS overrides)."""
    from tracekit import settings

    return usable_cores(settings.current().ingest_threads)


def _split_merged(parsed: ParsedTrace, path: str) -> list[tuple[RankHint, str, pl.DataFrame]] | None:
    """Split an SGLang merge_profiles trace (pids like ``[TP01] 123``) back into ranks."""
    pid_raw = parsed.events.get_column("pid_raw")  # non-integer pids only, null elsewhere
    if pid_raw.null_count() == pid_raw.len():  # every pid an integer: not a merged trace
        return None
    if not pid_raw.drop_nulls().str.contains(MERGED_LABEL.pattern).any():
        return None
    labels = pid_raw.str.extract(MERGED_LABEL.pattern, 1)
    if labels.null_count():
        bad = pid_raw.filter(labels.is_null()).drop_nulls().head(1).to_list()
        raise BadTraceError(f"merged trace mixes labelled and unlabelled pids (e.g. {bad!r})", path=path)
    ev = parsed.events.with_columns(
        labels.alias("_label"),
        pid_raw.str.extract(MERGED_LABEL.pattern, 2).cast(pl.Int64, strict=False).alias("_pid"),
    )
    on_gpu = pl.col("kind").is_in([*schema.GPU_KINDS, schema.GPU_RANGE]) | (pl.col("device") >= 0)
    ev = ev.with_columns(
        pl.when(on_gpu).then(None).otherwise(pl.col("_pid")).alias("pid"),
        pl.when(on_gpu).then(pl.coalesce(pl.col("device"), pl.col("_pid"))).otherwise(pl.col("device")).alias("device"),
    ).drop("_pid")
    out = []
    for (label,), part in ev.group_by(["_label"], maintain_order=True):
        out.append((hint_from_name(str(label)), f"{path} [{label}]", part.drop("_label")))
    return out


def _meta_for_rank(meta: dict[str, Any]) -> dict[str, Any]:
    keep = ("distributedInfo", "deviceProperties", "cuda_driver_version", "cuda_runtime_version",
            "cupti_version", "hip_runtime_version", "hip_driver_version", "roctracer_version",
            "baseTimeNanoseconds", "schemaVersion", "trace_id", "traceName", "non_utf8_replaced")
    out = {k: meta[k] for k in keep if k in meta}
    dist = meta.get("distributedInfo")
    if isinstance(dist, dict) and dist.get("nccl_version") is not None:
        out["nccl_version"] = dist["nccl_version"]
    return out


_Loaded = tuple[bytes | memoryview, Source, fastscan.Scanned | None]


def _load(path: str) -> _Loaded:
    """Read, gunzip and scan one file: the part of a file's work that holds no GIL (run in
    threads); the columns are built in the calling thread (``_read_parts``). The JSON bytes are
    kept only for a file the scanner declined (the msgspec path reads them)."""
    data, src = read_trace_bytes(Path(path))
    scanned = fastscan.scan_raw(data)
    return (data if scanned is None else b""), src, scanned


def _read_parts(path: str, loaded: _Loaded | None = None) -> list[_Part]:
    data, src, scanned = loaded if loaded is not None else _load(path)
    del loaded
    parsed = parse_kineto(data, path, scanned)
    del data, scanned
    if parsed.events.height == 0:
        begin_end = _begin_end_events(path) if parsed.n_events else 0
        if begin_end:
            raise BadTraceError(f"the trace's {begin_end} timed events are all B/E (begin/end) pairs: tracekit reads "
                                "complete events (ph X) and instants, as torch.profiler writes them", path=path)
        raise EmptyTraceError("metadata only: the trace holds no events", path=path)
    dist = parsed.meta.get("distributedInfo")
    dist_rank = dist.get("rank") if isinstance(dist, dict) else None
    world = dist.get("world_size") if isinstance(dist, dict) else None
    for why in (rank_problem(dist_rank) if isinstance(dist_rank, int) else None,
                world_size_problem(world) if isinstance(world, int) else None):
        if why is not None:
            raise RankError(f"distributedInfo: {why}", path=path)
    meta = _meta_for_rank(parsed.meta)
    split = _split_merged(parsed, path)
    parts: list[_Part] = []
    if split is None:
        ev = parsed.events
        unit = Unit(
            source=path,
            hint=hint_from_name(os.path.basename(path)),
            dist_rank=dist_rank if isinstance(dist_rank, int) else None,
            world_size=world if isinstance(world, int) else None,
        )
        ev, screened = screen_events(ev, path)
        _all_left_out(ev, screened, path)
        parts.append(_Part(unit, ev.drop("pid_raw"), meta, src, *_facts(ev, parsed.dropped), screened=screened))
    else:
        # distributedInfo of a merged file is the first rank's only: do not trust it for the parts
        meta = {k: v for k, v in meta.items() if k not in ("distributedInfo", "deviceProperties", "trace_id")}
        meta["merged_from"] = path
        for hint, source, ev in split:
            unit = Unit(source=source, hint=hint)
            ev, screened = screen_events(ev, source)
            _all_left_out(ev, screened, source)
            parts.append(_Part(unit, ev.drop("pid_raw"), dict(meta), src, *_facts(ev, parsed.dropped), screened=screened))
    return parts


_BEGIN_END = re.compile(rb'"ph"\s*:\s*"[BE]"')


def _begin_end_events(path: str) -> int:
    """B/E events in a trace that yielded no event (read again: only such files come here)."""
    data, _ = read_trace_bytes(Path(path))
    return len(_BEGIN_END.findall(bytes(data)))


def _all_left_out(ev: pl.DataFrame, screened: list[Dropped], path: str) -> None:
    """BadTraceError when screening left no event of a trace (a run of nothing is no result)."""
    if ev.height == 0 and screened:
        why = "; ".join(f"{d.count} {d.reason}" for d in screened)
        raise BadTraceError(f"every event is out of range ({why}; first: {screened[0].first})", path=path)


def _sort_part(ev: pl.DataFrame) -> pl.DataFrame:
    """``schema.sort_events`` of one rank's part: when no two events share (start, dur) (and
    neither is ever null) the integer keys alone give that order (kind and name only break
    such ties), at a fraction of the cost of sorting on strings; otherwise the full sort."""
    if ev.height < 2 or ev.get_column("rank").n_unique() > 1:
        return schema.sort_events(ev)
    idx = ev.select(pl.arg_sort_by(["start_ns", pl.col("dur_ns").neg()], maintain_order=True)).to_series()
    start, dur = pl.col("start_ns").gather(idx), pl.col("dur_ns").gather(idx)
    tie = ev.select(
        ((start == start.shift(1)) & (dur == dur.shift(1))).any()
        | pl.col("start_ns").is_null().any()
        | pl.col("dur_ns").is_null().any()
    ).item()
    if tie:
        return schema.sort_events(ev)
    return ev[idx]


def _facts(ev: pl.DataFrame, dropped: dict[str, int]) -> tuple[bool, dict[str, int], set[int], list[int]]:
    """(CPU-only, dropped, host pids, GPU devices) of one part, the three from one query."""
    gpu, pids, devs = ev.select(
        pl.col("kind").is_in(list(schema.GPU_KINDS)).any(),
        pl.col("pid").drop_nulls().unique().implode(),
        pl.col("device").filter(pl.col("device") >= 0).unique().implode(),
    ).row(0)
    return not gpu, dropped, {int(x) for x in pids}, sorted(int(x) for x in devs)


def ingest_traces(
    paths: Iterable[str | os.PathLike[str]],
    *,
    allow_missing_ranks: bool = False,
    on_error: OnError = "fail",
    progress: Progress | None = None,
    rules: Sequence[Any] | None = None,
) -> Run:
    """Ingest Kineto JSON traces (files, globs, directories) into one Run (not yet written).

    ``on_error="fail"`` stops at the first unreadable file (TracekitError naming it);
    ``"skip"`` ingests the good files and lists the skipped ones in
    ``run.manifest["ingest"]["skipped"]`` (the CLI reports them once at the end).
    Metadata-only files (no events), and JSON files met while walking a directory that are
    not traces at all, are always skipped and listed there; CPU-only traces are ingested and
    marked ``cpu_only`` in the manifest.
    ``rules`` are category rules placed before the built-in table (see tracekit.finalize.categories).
    The cyclic garbage collector is paused meanwhile (restored after): ingest builds no cycles,
    and its collections over the allocations of decoding cost ~10% of the time.
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    with _gc_paused():
        return _ingest(list(paths), allow_missing_ranks, on_error, progress, rules)


@contextmanager
def _gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _ingest(
    paths: list[str | os.PathLike[str]],
    allow_missing_ranks: bool,
    on_error: OnError,
    progress: Progress | None,
    rules: Sequence[Any] | None,
) -> Run:
    skipped: list[dict[str, str]] = []
    files = discover(paths, skipped if on_error == "skip" else None)
    named = {str(Path(p)) for p in paths}
    sizes = {str(f): f.stat().st_size for f in files}
    total = sum(sizes.values())
    done = 0
    parts: list[_Part] = []
    # files are read, gunzipped and scanned in threads, one per core (no GIL held there), at
    # most one per thread ahead of this one (memory: a few files' JSON); their columns are built
    # here, one file after another (polars queries of two threads on a single-threaded polars
    # pool cost more CPU than they save); results are taken in file order, so errors and
    # progress come as in a sequential pass
    workers = max(1, min(len(files), _cores()))
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    pending: deque[Future[_Loaded]] = deque()
    ahead = iter(files)

    def submit_next() -> None:
        nxt = next(ahead, None)
        if pool is not None and nxt is not None:
            pending.append(pool.submit(_load, str(nxt)))

    for _ in range(workers):
        submit_next()
    for f in files:
        name = str(f)
        if progress is not None:
            progress(done, total, name)
        try:
            if pool is not None:
                fut = pending.popleft()
                submit_next()
                parts.extend(_read_parts(name, fut.result()))
                del fut
            else:
                parts.extend(_read_parts(name))
        except BadTraceError as exc:
            try:
                skip_or_raise(exc, name, named, on_error, skipped)
            except BadTraceError:
                if pool is not None:
                    pool.shutdown(wait=True, cancel_futures=True)
                raise
        done += sizes[name]
        if progress is not None:
            progress(done, total, name)
    if pool is not None:
        pool.shutdown(wait=True)
    world, missing = rank_parts(parts, allow_missing_ranks, skipped)
    manifest = _manifest(parts, world, missing, skipped)
    frames = []
    # each part in canonical order, parts by rank: the table is then usually sorted already and
    # write_run skips its full-table sort; each part's frame is handed over (one copy alive)
    for p in sorted(parts, key=lambda q: q.unit.rank):
        frames.append(_sort_part(schema.conform(p.events.with_columns(pl.lit(p.unit.rank, dtype=pl.Int32).alias("rank")))))
        p.events = _EMPTY
    events = pl.concat(frames, how="vertical", rechunk=False)
    del frames
    from tracekit.finalize.pipeline import finalize_events, stamp

    events = finalize_events(events, rules=rules)
    from tracekit.resolution import time_resolution

    for c in time_resolution(events):
        manifest["ranks"][str(c.rank)]["time_resolution_ns"] = c.resolution_ns
    return Run(events=events, manifest=stamp(manifest), path=None)


def skip_or_raise(exc: BadTraceError, name: str, named: set[str], on_error: OnError,
                  skipped: list[dict[str, str]]) -> None:
    """A file that is not a readable trace: listed in ``skipped``, or ``exc`` raised when ``on_error``
    is ``fail`` (metadata-only files, and JSON met while walking a directory that is no trace at all
    (a manifest, bench output), are always skipped)."""
    metadata_only = isinstance(exc, EmptyTraceError)
    foreign = name not in named and isinstance(exc, NotATraceError)
    if on_error == "fail" and not (metadata_only or foreign):
        raise exc
    skipped.append({"path": name, "reason": exc.message})


def rank_parts(parts: Sequence[_Part], allow_missing_ranks: bool, skipped: list[dict[str, str]]) -> tuple[int, dict[str, str]]:
    """Assign every part's rank (``ranks.assign_ranks``): (world size, missing ranks); TracekitError when
    nothing could be ingested, a RankError that names a skipped file first when one explains it."""
    if not parts:
        why = "; ".join(f"{s['path']}: {s['reason']}" for s in skipped[:3])
        raise TracekitError(f"no input could be ingested ({why})")
    try:
        return assign_ranks([p.unit for p in parts], allow_missing_ranks=allow_missing_ranks)
    except RankError as exc:
        if not skipped:
            raise
        # the skipped file first: it is why the rank is missing
        first = skipped[0]
        more = f" (and {len(skipped) - 1} more skipped file(s))" if len(skipped) > 1 else ""
        raise RankError(f"skipped: {first['reason']}{more}; so {exc.message}", path=first["path"]) from None


def _manifest(parts: list[_Part], world: int, missing: dict[str, str], skipped: list[dict[str, str]]) -> dict[str, Any]:
    ranks: dict[str, dict[str, Any]] = {}
    sources: list[dict[str, Any]] = []
    seen_src: set[str] = set()
    for p in parts:
        r = str(p.unit.rank)
        if r not in ranks:
            ranks[r] = rank_section_dict(RankManifest(rank=p.unit.rank, cpu_only=True), sources=[],
                                         rank_source=p.unit.rank_source)
        entry = ranks[r]
        host = host_from_trace_name(os.path.basename(p.src.path), p.pids)
        if host is not None and "host" not in entry:
            entry["host"], entry["host_source"] = host, "file name"
        entry["sources"].append(p.unit.source)
        entry["cpu_only"] = entry["cpu_only"] and p.cpu_only
        for k, v in p.meta.items():
            entry.setdefault(k, v)
        if p.unit.hint.stage:
            entry.setdefault("stages", []).append(p.unit.hint.stage)
        if p.dropped:
            d = entry.setdefault("dropped_events", {})
            for k, v in p.dropped.items():
                d[k] = d.get(k, 0) + v
        if p.devices:
            entry["devices"] = sorted(set(entry.get("devices", [])) | set(p.devices))
        if p.src.path not in seen_src:
            seen_src.add(p.src.path)
            sources.append({"path": p.src.path, "size": p.src.size, "sha256": p.src.sha256, "ranks": []})
        for s in sources:
            if s["path"] == p.src.path and p.unit.rank not in s["ranks"]:
                s["ranks"].append(p.unit.rank)
    screened = [{"rank": p.unit.rank, **d.as_dict()} for p in sorted(parts, key=lambda q: q.unit.rank) for d in p.screened]
    notes = [f"rank {r}: CPU-only trace (no GPU kernels, copies or memsets)" for r, e in sorted(ranks.items(), key=lambda kv: int(kv[0])) if e["cpu_only"]]
    man = new_manifest(
        source="ingest",
        world_size=world,
        ranks=ranks,
        sources=sources,
        clock={"align": "none", "note": "Kineto baseTimeNanoseconds timeline; ranks on one host share a clock",
               "offsets_ns": {r: 0 for r in ranks}},
        ingest={"skipped": skipped, "notes": notes, **({"dropped": screened} if screened else {})},
    )
    if missing:
        man["missing_ranks"] = missing
    return man


__all__ = ["OnError", "Progress", "ingest_traces"]
