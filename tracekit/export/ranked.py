"""Perfetto export rank by rank: one packet stream per rank, concatenated in rank order.

Protobuf streams concatenate, so a trace of many ranks is the rank streams one after another. Each
rank's stream is written by a task that holds only that rank's events (a sharded run's shard, or a
batch of consecutive ranks of a one-file run read with a filtered scan, at most ``CHUNK_EVENTS``
events), and it stands on its own (``perfetto.iter_packets``):

- its packets are on trusted_packet_sequence_id ``slot + 1`` (``slot``: the rank's position in the
  export), whose first packet sets SEQ_INCREMENTAL_STATE_CLEARED: names, categories, annotation names
  and strings are interned per sequence, so every stream keeps its own interning state;
- its track uuids are ``slot * TRACK_STRIDE + k`` (k = 1, 2, ... in the rank's display order), unique in
  the trace without knowing the other ranks' track counts;
- its launch flows (launch -> kernel, inside the rank) have ids ``(slot << 32) + k``; collective flows
  (the same collective on the next rank, ``--flows collectives``) have ids ``COLL_FLOW_BASE + k``,
  numbered by the driver: each stream writes only its end of such an edge (Perfetto's flow ids are
  global to the trace, not per sequence).

Before the streams, one pass over a few columns gathers per rank the small projections that cross
ranks: the pid and GPU each rank's events carry (the process names, and whether real pids are unique),
its phase ids (made unique across ranks as ``store.load_run`` does), and, with collective flows, its
collective rows (group, order, start): the driver orders them across ranks and numbers the edges.

A rank not in ``full`` (``--full-ranks``) is exported with its collective kernels only (the GPU rows
with a collective group and order), on the same tracks and processes as in full, without phase
windows (a window made of its collectives alone would mislead; their ``phase`` annotation stays).

The same code writes an in-memory run (``export_events``) and a run on disk (``export_run``); with a
Dask executor the streams are staged as files beside the output and appended in rank order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.export.layout import RankInfo, rank_devices_pids, rank_info
from tracekit.export.select import Selection, select_events
from tracekit.schema import GPU_KINDS
from tracekit.store import RunPart

I64 = npt.NDArray[np.int64]

TRACK_STRIDE: Final = 1 << 20  # track uuids per rank stream
LAUNCH_SHIFT: Final = 32  # launch flow ids: (slot << 32) + k
COLL_FLOW_BASE: Final = 1 << 62  # collective flow ids: COLL_FLOW_BASE + k
CHUNK_EVENTS: Final = 1 << 20  # a one-file run is read in batches of ranks of at most this many events
FACT_COLUMNS: Final = ("rank", "kind", "start_ns", "dur_ns", "phase", "phase_id", "cycle", "group", "coll_seq",
                       "pid", "device")

Progress = Callable[[int, int, int], None]  # (ranks done, ranks in the export, the rank just written)


def collective_rows() -> pl.Expr:
    """The rows a collective flow joins (``layout``'s collective edges): GPU work with a group and an order."""
    return pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("group").is_not_null() & pl.col("coll_seq").is_not_null()


@dataclass(frozen=True)
class Chunk:
    """Ranks read together: one file's (``part``) or the in-memory run's (``part`` None)."""

    ranks: tuple[int, ...]
    part: RunPart | None = None


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
class RankFacts:
    """Pass 1, per rank: the small projection that crosses ranks."""

    rank: int
    n_picked: int
    error: str | None  # why nothing of the rank is in the selection
    device: int | None
    pid: int | None
    phase_ids: I64  # distinct phase ids of the rank (all its events)
    coll: pl.DataFrame | None  # collective rows picked: row (in the picked events), group, coll_seq, start_ns


@dataclass(frozen=True)
class RankJob:
    """Pass 2, per rank: where its stream goes and what the driver computed for it."""

    rank: int
    slot: int
    info: tuple[str, int, tuple[str, ...]]
    coll_out: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))  # (picked row, flow id)
    coll_in: tuple[I64, I64] = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass
class RankDone:
    rank: int
    bytes_written: int
    estimated_bytes: int
    n_slices: int
    n_gpu_slices: int
    n_counters: int
    n_flows: int
    n_tracks: int
    warnings: list[str] = field(default_factory=list)


# ---- reading ------------------------------------------------------------------------------------

def _read(chunk: Chunk, frame: pl.DataFrame | None, columns: Sequence[str] | None) -> pl.DataFrame:
    if chunk.part is None:
        assert frame is not None
        return frame if columns is None else frame.select(columns)
    from tracekit.store import read_part

    return read_part(chunk.part, chunk.ranks, list(columns) if columns is not None else None)


def _by_rank(df: pl.DataFrame, ranks: Sequence[int]) -> Iterator[tuple[int, pl.DataFrame]]:
    """Each rank's rows (row order kept), one gather per rank."""
    if len(ranks) == 1 and df.height and df["rank"].n_unique() == 1:
        yield ranks[0], df
        return
    r = df["rank"].to_numpy()
    order = np.argsort(r, kind="stable")
    rs = r[order]
    for rank in ranks:
        lo, hi = np.searchsorted(rs, rank, "left"), np.searchsorted(rs, rank, "right")
        yield rank, df[order[lo:hi]]


def _unique_phase_ids(df: pl.DataFrame, rank: int, top: int) -> pl.DataFrame:
    if top <= 0:
        return df
    return df.with_columns((pl.lit(rank, pl.Int64) * top + pl.col("phase_id")).alias("phase_id"))


def _pick(df: pl.DataFrame, rank: int, plan: Plan) -> tuple[pl.DataFrame, str | None]:
    """The rank's events in the export (its collectives only where it is not in full)."""
    if plan.full is not None and rank not in plan.full:
        # its collective kernels alone, without their phase: a phase window made of them would mislead
        df = df.filter(collective_rows()).with_columns(pl.lit(None, df.schema["phase_id"]).alias("phase_id"))
    sel = plan.selection
    if sel.phase is None and sel.window is None:
        return df, (None if df.height else "no events")
    try:
        return select_events(df, sel, run_start=plan.run_start), None
    except AnalysisError as exc:
        return df.clear(), exc.message


# ---- pass 1: facts ------------------------------------------------------------------------------

def chunk_facts(chunk: Chunk, plan: Plan, frame: pl.DataFrame | None = None) -> list[RankFacts]:
    """Task of pass 1: the facts of each rank of ``chunk`` (reads ``FACT_COLUMNS`` only)."""
    df = _read(chunk, frame, FACT_COLUMNS)
    out: list[RankFacts] = []
    for rank, ev in _by_rank(df, chunk.ranks):
        picked, err = _pick(ev, rank, plan)
        dev, pids = rank_devices_pids(picked)
        ids = ev["phase_id"].drop_nulls().unique().to_numpy().astype(np.int64)
        coll = None
        if "collectives" in plan.flows and picked.height:
            coll = (picked.with_row_index("row").filter(collective_rows())
                    .select(pl.col("row").cast(pl.Int64), pl.col("group").cast(pl.String), "coll_seq", "start_ns"))
        out.append(RankFacts(rank, picked.height, err, dev.get(rank), pids.get(rank), ids, coll))
    return out


def _phase_top(facts: Sequence[RankFacts]) -> int:
    """``unique_phase_ids``' rule over the whole run: > 0 when two ranks share a phase id."""
    ids = [f.phase_ids for f in facts if f.phase_ids.size]
    if len(ids) < 2:
        return 0
    allv = np.concatenate(ids)
    if np.unique(allv).size == allv.size:
        return 0
    return int(allv.max()) + 1


def _collective_edges(facts: Sequence[RankFacts], slot: Mapping[int, int]) -> dict[int, tuple[list[I64], list[I64]]]:
    """rank -> ((out rows, out ids), (in rows, in ids)): consecutive ranks of each collective (group,
    order), by (start, rank, row), as ``layout``'s collective edges; ids ``COLL_FLOW_BASE + k``."""
    parts = [f.coll.with_columns(pl.lit(f.rank, pl.Int64).alias("rank")) for f in facts
             if f.coll is not None and f.coll.height]
    if not parts:
        return {}
    c = pl.concat(parts, how="vertical_relaxed").sort("group", "coll_seq", "start_ns", "rank", "row")
    g = c["group"]
    same = ((g.slice(1) == g.slice(0, c.height - 1)).fill_null(False)
            & (c["coll_seq"].slice(1) == c["coll_seq"].slice(0, c.height - 1)).fill_null(False)).to_numpy()
    k = np.flatnonzero(same)
    rank, row = c["rank"].to_numpy(), c["row"].to_numpy()
    ids = COLL_FLOW_BASE + 1 + np.arange(k.size, dtype=np.int64)
    out: dict[int, tuple[list[I64], list[I64]]] = {}
    for r in np.unique(np.concatenate([rank[k], rank[k + 1]])).tolist():
        o = rank[k] == r
        i = rank[k + 1] == r
        out[int(r)] = ([row[k][o], ids[o]], [row[k + 1][i], ids[i]])
    return out


# ---- pass 2: the rank streams --------------------------------------------------------------------

def _rank_layout(ev: pl.DataFrame, job: RankJob, plan: Plan, warnings: list[str]) -> Any:
    from tracekit.export.buckets import attribution_buckets
    from tracekit.export.layout import build_layout

    ev = _unique_phase_ids(ev, job.rank, plan.phase_top)
    picked, _ = _pick(ev, job.rank, plan)
    if picked.height == 0:
        return None
    in_full = plan.full is None or job.rank in plan.full
    bk = attribution_buckets(ev, warnings) if plan.buckets and in_full else None
    del ev
    flows = tuple(f for f in plan.flows if f != "collectives")
    lay = build_layout(picked, {}, flows=flows, buckets=bk, outstanding=plan.outstanding,
                       info={job.rank: job.info})
    if len(lay.tracks) >= TRACK_STRIDE:
        raise AnalysisError(f"rank {job.rank} needs {len(lay.tracks):,} tracks; a rank's stream holds at most "
                            f"{TRACK_STRIDE - 1:,}")
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


def write_chunk(chunk: Chunk, plan: Plan, jobs: Sequence[RankJob], out: IO[bytes],
                frame: pl.DataFrame | None = None, progress: Callable[[int], None] | None = None) -> list[RankDone]:
    """Task of pass 2: the stream of each rank of ``chunk`` with a job, appended to ``out`` in job order."""
    from tracekit.export.perfetto import estimate_size, write_perfetto

    by_rank = {j.rank: j for j in jobs}
    df = _read(chunk, frame, None)
    frames = dict(_by_rank(df, [j.rank for j in jobs])) if len(jobs) > 1 else None
    done: list[RankDone] = []
    for job in jobs:
        ev = frames.pop(job.rank) if frames is not None else next(_by_rank(df, [job.rank]))[1]
        warnings: list[str] = []
        lay = _rank_layout(ev, by_rank[job.rank], plan, warnings)
        del ev
        if lay is None:
            continue
        written = write_perfetto(lay, out, seq=job.slot + 1)
        done.append(RankDone(
            job.rank, written, estimate_size(lay), lay.n_slices, int(lay.is_gpu.sum()), lay.n_counters,
            int((lay.flow_src >= 0).sum()), len(lay.tracks), lay.warnings + warnings))
        del lay
        if progress is not None:
            progress(job.rank)
    return done


def write_chunk_file(chunk: Chunk, plan: Plan, jobs: Sequence[RankJob], path: str) -> list[RankDone]:
    """``write_chunk`` into a staged file (an executor's task; atomic: a task run twice finds a whole file)."""
    from tracekit.outputs import atomic_write

    with atomic_write(path) as tmp, open(tmp, "wb") as fh:
        return write_chunk(chunk, plan, jobs, fh)


# ---- the driver -----------------------------------------------------------------------------------

@dataclass
class Streams:
    """What the rank streams wrote (``write_streams``)."""

    done: list[RankDone]
    ranks: list[int]
    warnings: list[str]


def plan_chunks(parts: Sequence[RunPart], ranks: Sequence[int]) -> list[Chunk]:
    """The reading units: a file's ranks in batches of at most ``CHUNK_EVENTS`` events (one rank at least)."""
    want = set(ranks)
    chunks: list[Chunk] = []
    for p in parts:
        cur: list[int] = []
        n = 0
        for r, c in zip(p.ranks, p.counts, strict=True):
            if r not in want:
                continue
            if cur and n + c > CHUNK_EVENTS:
                chunks.append(Chunk(tuple(cur), p))
                cur, n = [], 0
            cur.append(r)
            n += c
        if cur:
            chunks.append(Chunk(tuple(cur), p))
    return chunks


def write_streams(chunks: Sequence[Chunk], plan: Plan, manifest: Mapping[str, Any], out: IO[bytes], dest: Path, *,
                  frame: pl.DataFrame | None = None, executor: Any = None, progress: Progress | None = None,
                  path: str | None = None) -> Streams:
    """Both passes over ``chunks``; the streams appended to ``out`` in rank order. Raises AnalysisError
    when the selection leaves nothing."""
    local = executor is None or getattr(executor, "name", "local") == "local"
    if local:
        facts = [f for ch in chunks for f in chunk_facts(ch, plan, frame)]
    else:
        hs = [executor.submit(chunk_facts, ch, plan) for ch in chunks]
        facts = [f for got in executor.gather(hs) for f in got]
        executor.release(hs)
    kept = sorted((f for f in facts if f.n_picked), key=lambda f: f.rank)
    if not kept:
        first = next((f.error for f in sorted(facts, key=lambda f: f.rank) if f.error), "no events")
        raise AnalysisError(first if first != "no events" else "the selection holds no events", path=path)
    plan = replace(plan, phase_top=_phase_top(facts))
    ranks = [f.rank for f in kept]
    slot = {r: i for i, r in enumerate(ranks)}
    info: RankInfo = rank_info(manifest, ranks, {f.rank: f.device for f in kept if f.device is not None},
                               {f.rank: f.pid for f in kept if f.pid is not None})
    edges = _collective_edges(kept, slot) if "collectives" in plan.flows else {}
    del facts

    def job(r: int) -> RankJob:
        e = edges.get(r)
        if e is None:
            return RankJob(r, slot[r], info[r])
        return RankJob(r, slot[r], info[r], (e[0][0], e[0][1]), (e[1][0], e[1][1]))

    total = len(ranks)
    count = [0]

    def tick(r: int) -> None:
        count[0] += 1
        if progress is not None:
            progress(count[0], total, r)

    chunk_jobs = [(ch, [job(r) for r in sorted(ch.ranks) if r in slot]) for ch in chunks]
    chunk_jobs = [(ch, js) for ch, js in chunk_jobs if js]
    chunk_jobs.sort(key=lambda cj: cj[1][0].slot)
    done: list[RankDone] = []
    if local:
        for ch, js in chunk_jobs:
            done += write_chunk(ch, plan, js, out, frame, tick)
    else:
        stage = tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent)
        try:
            hs = [executor.submit(write_chunk_file, ch, plan, js, os.path.join(stage, f"part-{i:06d}.pftrace"))
                  for i, (ch, js) in enumerate(chunk_jobs)]
            for i, h in enumerate(hs):
                got: list[RankDone] = executor.gather([h])[0]
                executor.release([h])
                part = os.path.join(stage, f"part-{i:06d}.pftrace")
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
                os.unlink(part)
                done += got
                for d in got:
                    tick(d.rank)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    warnings: list[str] = []
    for d in done:
        warnings += [w for w in d.warnings if w not in warnings]
    return Streams(done, [d.rank for d in done], warnings)


__all__ = ["CHUNK_EVENTS", "COLL_FLOW_BASE", "TRACK_STRIDE", "Chunk", "Plan", "RankDone", "RankFacts", "RankJob",
           "Streams", "chunk_facts", "collective_rows", "plan_chunks", "write_chunk", "write_chunk_file", "write_streams"]
