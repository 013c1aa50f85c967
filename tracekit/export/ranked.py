"""Perfetto export rank by rank: one packet stream per batch of ranks, concatenated in rank order.

Protobuf streams concatenate, so a trace of many ranks is its streams one after another. A stream is
what one task writes: the events of a batch of consecutive ranks of at most ``CHUNK_EVENTS`` events
(one rank when a rank alone has more), read from the run's files (a sharded run's shards, or a
one-file run's rows of those ranks with a filtered scan: ``store.read_ranks``), laid out and encoded; nothing else of the
run is in memory. Batching small ranks keeps the per-stream set-up (one layout) from costing more CPU
than the whole-run export did; a run of one batch is written as one stream, as before. Each stream
stands on its own (``perfetto.iter_packets``):

- its packets are on trusted_packet_sequence_id ``slot + 1`` (``slot``: the position in the export of
  the batch's first rank), whose first packet sets SEQ_INCREMENTAL_STATE_CLEARED: names, categories,
  annotation names and strings are interned per sequence, every stream keeps its own interning state;
- its track uuids are ``slot * TRACK_STRIDE + k`` (k = 1, 2, ... in display order), unique in the
  trace without knowing the other streams' track counts;
- its launch flows (launch -> kernel, inside a rank) have ids ``(slot << 32) + k``; collective flows
  (the same collective on the next rank, ``--flows collectives``) have ids ``COLL_FLOW_BASE + k``,
  numbered by the driver: each stream writes its ends of such edges (Perfetto's flow ids are global to
  the trace, not per sequence).

The batches are the same whether the run is in memory, one file or shards (``plan_chunks``: from the
ranks' event counts), so all three give the same bytes. Before the streams, one pass over a few
columns gathers per batch the small projections that cross ranks: the pid and GPU of each rank's
events (the process names, and whether real pids are unique), the (rank, phase id) pairs (phase ids
made unique across ranks as ``store.load_run`` does), and, with collective flows, the collective rows
(group, order, start): the driver orders them across ranks and numbers the edges.

A rank not in ``full`` (``--full-ranks``) is exported with its collective kernels only (the GPU rows
with a collective group and order), on the same tracks and processes as in full, without phase
windows (a window made of its collectives alone would mislead; their ``phase`` annotation stays).

With a Dask executor (``tracekit.executor``) the streams are staged as files beside the output and
appended in rank order; with ``local`` they are written straight into the output.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.export.counts import ExportCounts
from tracekit.export.layout import RankInfo, rank_devices_pids, rank_info
from tracekit.export.select import Selection, select_events
from tracekit.schema import GPU_KINDS
from tracekit.store import RankFile

I64 = npt.NDArray[np.int64]

TRACK_STRIDE: Final = 1 << 20  # track uuids per rank stream
LAUNCH_SHIFT: Final = 32  # launch flow ids: (slot << 32) + k
COLL_FLOW_BASE: Final = 1 << 62  # collective flow ids: COLL_FLOW_BASE + k
CHUNK_EVENTS: Final = 1 << 19  # a stream holds consecutive ranks of at most this many events (one rank at least)
FACT_COLUMNS: Final = ("rank", "kind", "start_ns", "dur_ns", "phase", "phase_id", "cycle", "group", "coll_seq",
                       "pid", "device")

Progress = Callable[[int, int, int], None]  # (ranks done, ranks in the export, the rank just written)


def collective_rows() -> pl.Expr:
    """The rows a collective flow joins (``layout``'s collective edges): GPU work with a group and an order."""
    return pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("group").is_not_null() & pl.col("coll_seq").is_not_null()


@dataclass(frozen=True)
class Chunk:
    """Consecutive ranks read and written together: from their ``files`` (``store.open_ranked``), or
    from the in-memory run (``files`` empty)."""

    ranks: tuple[int, ...]
    files: tuple[RankFile, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What every task of one export shares (small; travels with each task)."""

    selection: Selection  # ranks already resolved into the chunks
    full: frozenset[int] | None  # ranks in full; None: all
    run_start: int | None  # the run's first event (ns), for --window
    phase_top: int  # > 0: phase ids become rank * top + id (``finalize.version.unique_phase_ids``)
    flows: tuple[str, ...]
    buckets: bool
    outstanding: bool


@dataclass
class ChunkFacts:
    """Pass 1, per chunk: the small projection that crosses ranks."""

    picked: dict[int, int]  # rank -> its events in the export (ranks with none left out)
    error: str | None  # why the selection left nothing of the chunk
    device: dict[int, int]
    pid: dict[int, int]
    phase_ids: pl.DataFrame  # distinct (rank, phase_id) of all the chunk's events
    coll: pl.DataFrame | None  # collective rows picked: rank, row (in the chunk's picked events), group, coll_seq, start_ns


@dataclass(frozen=True)
class ChunkJob:
    """Pass 2, per chunk: its ranks in the export, its slot, what the driver computed for it."""

    chunk: Chunk
    ranks: tuple[int, ...]
    slot: int  # of its first rank
    info: RankInfo
    coll_out: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # (picked row, flow id)
    coll_in: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass
class ChunkDone(ExportCounts):
    """One stream's counts (``ExportCounts``), its ranks and warnings."""
    ranks: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ---- reading ------------------------------------------------------------------------------------

def _read(chunk: Chunk, frame: pl.DataFrame | None, columns: Sequence[str] | None) -> pl.DataFrame:
    """The chunk's events, rows in run order (rank, then each rank's stored order)."""
    if not chunk.files:
        assert frame is not None
        df = frame if columns is None else frame.select(columns)
        return _rows_of(df, chunk.ranks)
    from tracekit.store import read_ranks

    return _rows_of(read_ranks(chunk.files, columns), chunk.ranks)


def _rows_of(df: pl.DataFrame, ranks: Sequence[int]) -> pl.DataFrame:
    """The rows of ``ranks``, grouped by rank in ascending order (a slice where they already are)."""
    r = df["rank"].to_numpy()
    if r.size and (r.size < 2 or bool((r[1:] >= r[:-1]).all())):
        lo, hi = np.searchsorted(r, min(ranks), "left"), np.searchsorted(r, max(ranks), "right")
        out = df.slice(int(lo), int(hi - lo))
        if out.height == 0 or out["rank"].is_in(list(ranks)).all():
            return out
        return out.filter(pl.col("rank").is_in(list(ranks)))
    order = np.argsort(r, kind="stable")
    keep = order[np.isin(r[order], np.asarray(ranks, dtype=r.dtype))]
    return df[keep]


def _pick(df: pl.DataFrame, plan: Plan) -> tuple[pl.DataFrame, str | None]:
    """The chunk's events in the export: the selection (its phase spans from every row of a rank), then
    the collectives only of ranks not in full."""
    sel = plan.selection
    if df.height == 0:
        return df, "no events"
    if sel.phase is not None or sel.window is not None:
        try:
            df = select_events(df, sel, run_start=plan.run_start)
        except AnalysisError as exc:
            return df.clear(), exc.message
    if plan.full is not None:
        full = pl.col("rank").is_in(sorted(plan.full))
        # a rank not in full: its collective kernels alone, without their phase (a phase window made of
        # them would mislead)
        df = df.filter(full | collective_rows()).with_columns(
            pl.when(full).then(pl.col("phase_id")).otherwise(None).alias("phase_id"))
    return df, (None if df.height else "no events")


def _unique_phase_ids(df: pl.DataFrame, top: int) -> pl.DataFrame:
    if top <= 0:
        return df
    return df.with_columns((pl.col("rank").cast(pl.Int64) * top + pl.col("phase_id")).alias("phase_id"))


# ---- pass 1: facts ------------------------------------------------------------------------------

def chunk_facts(chunk: Chunk, plan: Plan, frame: pl.DataFrame | None = None) -> ChunkFacts:
    """Task of pass 1: the chunk's facts (reads ``FACT_COLUMNS`` only)."""
    return _facts(_read(chunk, frame, FACT_COLUMNS), plan)


def _facts(ev: pl.DataFrame, plan: Plan) -> ChunkFacts:
    picked, err = _pick(ev, plan)
    dev, pids = rank_devices_pids(picked)
    n = picked.group_by("rank").len()
    ids = ev.lazy().select("rank", "phase_id").filter(pl.col("phase_id").is_not_null()).unique().collect()
    coll = None
    if "collectives" in plan.flows and picked.height:
        coll = (picked.with_row_index("row").filter(collective_rows())
                .select(pl.col("rank").cast(pl.Int64), pl.col("row").cast(pl.Int64), pl.col("group").cast(pl.String),
                        "coll_seq", "start_ns"))
    return ChunkFacts({int(r): int(c) for r, c in n.iter_rows() if c}, err, dev, pids, ids, coll)


def _phase_top(facts: Sequence[ChunkFacts]) -> int:
    """``unique_phase_ids``' rule over the whole run: > 0 when two ranks share a phase id."""
    ids = pl.concat([f.phase_ids for f in facts], how="vertical_relaxed")
    if ids.height == 0 or ids["phase_id"].n_unique() == ids.height:
        return 0
    return int(ids["phase_id"].max()) + 1  # type: ignore[arg-type]


def _collective_edges(facts: Sequence[ChunkFacts]) -> list[tuple[tuple[I64, I64], tuple[I64, I64]]]:
    """Per chunk: ((out rows, out ids), (in rows, in ids)): consecutive ranks of each collective (group,
    order), by (start, rank, row), as ``layout``'s collective edges; ids ``COLL_FLOW_BASE + k``."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    parts = [f.coll.with_columns(pl.lit(i, pl.Int64).alias("chunk")) for i, f in enumerate(facts)
             if f.coll is not None and f.coll.height]
    if not parts:
        return [(none, none) for _ in facts]
    c = pl.concat(parts, how="vertical_relaxed").sort("group", "coll_seq", "start_ns", "rank", "row")
    g, q = c["group"], c["coll_seq"]
    same = ((g.slice(1) == g.slice(0, c.height - 1)).fill_null(False)
            & (q.slice(1) == q.slice(0, c.height - 1)).fill_null(False)).to_numpy()
    k = np.flatnonzero(same)
    chunk, row = c["chunk"].to_numpy(), c["row"].to_numpy()
    ids = COLL_FLOW_BASE + 1 + np.arange(k.size, dtype=np.int64)
    out: list[tuple[tuple[I64, I64], tuple[I64, I64]]] = []
    for i in range(len(facts)):
        o = chunk[k] == i
        n = chunk[k + 1] == i
        out.append(((row[k][o], ids[o]), (row[k + 1][n], ids[n])))
    return out


# ---- pass 2: the streams ----------------------------------------------------------------------------

def _chunk_layout(ev: pl.DataFrame, job: ChunkJob, plan: Plan, warnings: list[str]) -> Any:
    from tracekit.export.buckets import attribution_buckets
    from tracekit.export.layout import build_layout

    ev = _unique_phase_ids(ev, plan.phase_top)
    picked, _ = _pick(ev, plan)
    if picked.height == 0:
        return None
    bk = None
    if plan.buckets:
        bk = attribution_buckets(ev if plan.full is None else ev.filter(pl.col("rank").is_in(sorted(plan.full))),
                                 warnings)
    del ev
    flows = tuple(f for f in plan.flows if f != "collectives")
    lay = build_layout(picked, {}, flows=flows, buckets=bk, outstanding=plan.outstanding, info=job.info)
    if len(lay.tracks) >= TRACK_STRIDE * len(job.ranks):
        raise AnalysisError(f"ranks {job.ranks[0]}-{job.ranks[-1]} need {len(lay.tracks):,} tracks; a rank's stream "
                            f"holds at most {TRACK_STRIDE - 1:,}")
    base = job.slot * TRACK_STRIDE
    if base:
        for t in lay.tracks:
            t.uuid += base
            if t.parent:
                t.parent += base
        lay.track = lay.track + base
        lay.c_track = lay.c_track + base
    lay.flow_id = lay.flow_id + (job.slot << LAUNCH_SHIFT)
    (orow, oid), (irow, iid) = job.coll_out, job.coll_in
    if orow.size or irow.size:
        assert lay.src_row is not None
        slice_of = np.full(picked.height, -1, dtype=np.int64)
        have = lay.src_row >= 0
        slice_of[lay.src_row[have]] = np.flatnonzero(have)
        none_o, none_i = np.full(orow.size, -1, np.int64), np.full(irow.size, -1, np.int64)
        lay.flow_src = np.concatenate([lay.flow_src, slice_of[orow], none_i])
        lay.flow_dst = np.concatenate([lay.flow_dst, none_o, slice_of[irow]])
        lay.flow_id = np.concatenate([lay.flow_id, oid, iid])
    return lay


def write_chunk(job: ChunkJob, plan: Plan, out: IO[bytes], frame: pl.DataFrame | None = None,
                events: pl.DataFrame | None = None) -> ChunkDone | None:
    """Task of pass 2: the chunk's stream appended to ``out`` (``events``: the chunk's, when already read)."""
    from tracekit.export.perfetto import estimate_size, write_perfetto

    ev = events if events is not None else _read(job.chunk, frame, None)
    warnings: list[str] = []
    lay = _chunk_layout(ev, job, plan, warnings)
    del ev
    if lay is None:
        return None
    written = write_perfetto(lay, out, seq=job.slot + 1)
    return ChunkDone(written, estimate_size(lay), lay.n_slices, int(lay.is_gpu.sum()), lay.n_counters,
                     int((lay.flow_src >= 0).sum()), len(lay.tracks), ranks=list(job.ranks),
                     warnings=lay.warnings + warnings)


def write_chunk_file(job: ChunkJob, plan: Plan, path: str) -> ChunkDone | None:
    """``write_chunk`` into a staged file (an executor's task; atomic: a task run twice finds a whole file)."""
    from tracekit.outputs import atomic_write

    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        return write_chunk(job, plan, fh)


# ---- the driver -----------------------------------------------------------------------------------

@dataclass
class Streams:
    """What the streams wrote (``write_streams``)."""

    done: list[ChunkDone]
    ranks: list[int]
    warnings: list[str]


def plan_chunks(counts: Sequence[tuple[int, int]], files: Sequence[RankFile] = ()) -> list[Chunk]:
    """The batches: consecutive ranks (``counts``: (rank, events), ascending) of at most ``CHUNK_EVENTS``
    events (``TRACEKIT_EXPORT_BATCH_EVENTS`` when set; one rank at least), each with its ranks' ``files``."""
    from tracekit.settings import current

    limit = current().export_batch_events or CHUNK_EVENTS
    chunks: list[Chunk] = []
    cur: list[int] = []
    n = 0

    def close() -> None:
        want = set(cur)
        chunks.append(Chunk(tuple(cur), tuple(f for f in files if f.rank in want)))

    for r, c in counts:
        if cur and n + c > limit:
            close()
            cur, n = [], 0
        cur.append(r)
        n += c
    if cur:
        close()
    return chunks


def write_streams(chunks: Sequence[Chunk], plan: Plan, manifest: Mapping[str, Any], out: IO[bytes], dest: Path, *,
                  frame: pl.DataFrame | None = None, executor: Any = None, progress: Progress | None = None,
                  path: str | None = None) -> Streams:
    """Both passes over ``chunks``; the streams appended to ``out`` in rank order. Raises AnalysisError
    when the selection leaves nothing."""
    local = executor is None or getattr(executor, "name", "local") == "local"
    whole: pl.DataFrame | None = None  # a run of one chunk, local: read once for both passes
    if local and len(chunks) == 1 and chunks[0].files:
        whole = _read(chunks[0], None, None)
        facts = [_facts(whole, plan)]
    elif local:
        facts = [chunk_facts(ch, plan, frame) for ch in chunks]
    else:
        hs = [executor.submit(chunk_facts, ch, plan) for ch in chunks]
        facts = list(executor.gather(hs))
        executor.release(hs)
    ranks = sorted(r for f in facts for r in f.picked)
    if not ranks:
        first = next((f.error for f in facts if f.error and f.error != "no events"), None)
        raise AnalysisError(first or "the selection holds no events", path=path)
    plan = replace(plan, phase_top=_phase_top(facts))
    slot = {r: i for i, r in enumerate(ranks)}
    dev = {r: d for f in facts for r, d in f.device.items()}
    pid = {r: p for f in facts for r, p in f.pid.items()}
    info: RankInfo = rank_info(manifest, ranks, dev, pid)
    edges = _collective_edges(facts) if "collectives" in plan.flows else None
    jobs: list[ChunkJob] = []
    for i, (ch, f) in enumerate(zip(chunks, facts, strict=True)):
        rs = tuple(sorted(f.picked))
        if not rs:
            continue
        ci = {r: info[r] for r in rs}
        if edges is not None:
            jobs.append(ChunkJob(ch, rs, slot[rs[0]], ci, edges[i][0], edges[i][1]))
        else:
            jobs.append(ChunkJob(ch, rs, slot[rs[0]], ci))
    del facts
    total = len(ranks)
    count = 0

    def tick(d: ChunkDone | None) -> None:
        nonlocal count
        for r in d.ranks if d is not None else []:
            count += 1
            if progress is not None:
                progress(count, total, r)

    done: list[ChunkDone] = []
    if local:
        for j in jobs:
            d = write_chunk(j, plan, out, frame, whole)
            whole = None
            tick(d)
            done += [d] if d is not None else []
    else:
        stage = tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent)
        try:
            names = [os.path.join(stage, f"part-{i:06d}.pftrace") for i in range(len(jobs))]
            hs = [executor.submit(write_chunk_file, j, plan, nm) for j, nm in zip(jobs, names, strict=True)]
            for h, nm in zip(hs, names, strict=True):
                d = executor.gather([h])[0]
                executor.release([h])
                with open(nm, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
                os.unlink(nm)
                tick(d)
                done += [d] if d is not None else []
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    warnings: list[str] = []
    for d in done:
        warnings += [w for w in d.warnings if w not in warnings]
    return Streams(done, [r for d in done for r in d.ranks], warnings)


__all__ = ["CHUNK_EVENTS", "COLL_FLOW_BASE", "TRACK_STRIDE", "Chunk", "ChunkDone", "ChunkFacts", "ChunkJob", "Plan",
           "Streams", "chunk_facts", "collective_rows", "plan_chunks", "write_chunk", "write_chunk_file", "write_streams"]
