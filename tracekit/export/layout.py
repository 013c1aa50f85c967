"""Layout of an export: tracks, slices, counters and flows, independent of the file format.

One process per rank (``rank 3 · GPU 3 · host``), sorted by rank; under it, in
this order: the phase tracks (host ranges, GPU windows), per-phase duration
counters, one track per host thread, one track per CUDA stream (kernels,
memcpy, memset), projected GPU annotations per stream, then the run's counter
rows (clocks, power, ...). Slices that would not nest on their track go to
sibling lanes (``lanes.assign_lanes``). Everything is ordered deterministically,
so the same run gives the same layout (and the same bytes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypedDict

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit._native import core
from tracekit.schema import GPU_KINDS, RANGE

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are not evaluated at run time
    pass

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
BoolA = npt.NDArray[np.bool_]

# per-slice integer annotations (null where absent)
INT_ARGS: Final = ("correlation", "external_id", "cycle", "phase_id", "coll_seq", "coll_bytes")
# per-slice annotations interned as a set (repeat across many slices)
SET_ARGS: Final = ("name", "args", "phase", "graph", "coll_op", "group", "window",
                   "batch_size", "num_tokens", "seq_len", "graphed", "accept_len")
FLOW_KINDS: Final = ("launches", "collectives")

ArgValue = str | int | float | bool
ArgSet = tuple[tuple[str, ArgValue], ...]

# track groups, in display order inside a process
G_PHASE_HOST, G_PHASE_GPU, G_PHASE_DUR, G_THREAD, G_STREAM, G_GPU_RANGE, G_COUNTER = range(7)


@dataclass
class Track:
    uuid: int
    parent: int  # 0 for process tracks
    name: str
    kind: str  # "process" | "slice" | "counter"
    rank: int
    order: int  # sibling order under the parent
    pid: int = 0  # process tracks: the (unique) pid used in the export
    labels: tuple[str, ...] = ()
    unit_ns: bool = False  # counter tracks holding durations in ns
    gpu: bool = False  # slice tracks of GPU streams


class _TrackBuilder:
    """Numbers tracks in display order (uuid and sibling order)."""

    def __init__(self) -> None:
        self.tracks: list[Track] = []
        self.track_of: dict[tuple[Any, ...], int] = {}
        self._order: dict[int, int] = {}

    def add(self, t: Track, key: tuple[Any, ...] | None) -> int:
        t.uuid = len(self.tracks) + 1
        if t.parent:
            self._order[t.parent] = self._order.get(t.parent, 0) + 1
            t.order = self._order[t.parent]
        self.tracks.append(t)
        if key is not None:
            self.track_of[key] = t.uuid
        return t.uuid


@dataclass
class Layout:
    tracks: list[Track]
    # slices, sorted by (start, longer first, track, source row)
    start: I64
    dur: I64
    track: I64
    name_id: I64
    cat_id: I64
    argset: I64
    ints: dict[str, tuple[I64, BoolA]]  # name -> (values, present)
    is_gpu: BoolA  # kernel / memcpy / memset rows of the run
    names: list[str]
    cats: list[str]
    argsets: Sequence[ArgSet]  # a list, or export.buckets.ArgSets (bucket args as columns)
    # flows: edges between slice indices, ids unique in the export
    flow_src: I64
    flow_dst: I64
    flow_id: I64
    # counter samples, sorted by (ts, track)
    c_ts: I64
    c_track: I64
    c_value: F64
    c_is_int: BoolA
    ranks: list[int]
    warnings: list[str] = field(default_factory=list)
    # per slice: its row in the events laid out (-1: a phase slice made from them)
    src_row: I64 | None = None

    @property
    def n_slices(self) -> int:
        return int(self.start.size)

    @property
    def n_counters(self) -> int:
        return int(self.c_ts.size)


def _normalizer() -> Any:
    try:
        from tracekit.finalize.names import normalize_kernel_name
    except ImportError:
        return None
    return normalize_kernel_name


def display_names(names: Sequence[str]) -> dict[str, str]:
    """Full kernel name -> display name (``tracekit.finalize.names`` when present, else the full name)."""
    norm = _normalizer()
    out: dict[str, str] = {}
    for n in names:
        d = n
        if norm is not None:
            try:
                d = str(norm(n)) or n
            except Exception:  # a name the normaliser cannot handle keeps its full form
                d = n
        out[n] = d
    return out


RankInfo = dict[int, tuple[str, int, tuple[str, ...]]]


def rank_devices_pids(events: pl.DataFrame | pl.LazyFrame) -> tuple[dict[int, int], dict[int, int]]:
    """Per rank: the GPU device and the pid most of its events carry (the smallest of equals)."""
    # lazy: only the columns used are read (an eager filter would copy every column)
    gpu_dev = (
        events.lazy().select("rank", "kind", "device")
        .filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("device").is_not_null())
        .group_by("rank").agg(pl.col("device").mode().min().alias("d")).collect()
    )
    dev = {int(r): int(d) for r, d in gpu_dev.iter_rows()}
    ev_pid = (
        events.lazy().select("rank", "pid").filter(pl.col("pid").is_not_null())
        .group_by("rank").agg(pl.col("pid").mode().min().alias("p")).collect()
    )
    pids = {int(r): int(p) for r, p in ev_pid.iter_rows()}
    return dev, pids


def _rank_info(manifest: Mapping[str, Any], events: pl.DataFrame, ranks: list[int]) -> RankInfo:
    """rank -> (process name, pid used in the export, labels: GPU model, real pid)."""
    dev, pids = rank_devices_pids(events)
    return rank_info(manifest, ranks, dev, pids)


def rank_info(manifest: Mapping[str, Any], ranks: list[int], dev: Mapping[int, int], pids: Mapping[int, int]) -> RankInfo:
    """``_rank_info`` from each rank's device and pid (``rank_devices_pids``): the pid shown is the
    real one where the ranks' real pids are unique, else 100000 + rank."""
    man_ranks: Mapping[str, Any] = manifest.get("ranks", {}) or {}
    info: RankInfo = {}
    raw_pids: dict[int, int | None] = {}
    models: dict[int, str] = {}
    for r in ranks:
        m = man_ranks.get(str(r), {}) or {}
        gpu: Any = None
        for key in ("device_index", "gpu_index", "device", "local_rank"):
            v = m.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                gpu = v
                break
            if isinstance(v, str) and v.rsplit(":", 1)[-1].isdigit():
                gpu = int(v.rsplit(":", 1)[-1])
                break
        if gpu is None:
            gpu = dev.get(r)
        host = m.get("host") or m.get("hostname")
        parts = [f"rank {r}"]
        if gpu is not None:
            parts.append(f"GPU {gpu}")
        if host:
            parts.append(str(host))
        p = m.get("pid", pids.get(r))
        raw_pids[r] = int(p) if isinstance(p, int) else pids.get(r)
        g = m.get("gpu")
        if isinstance(g, Mapping) and isinstance(g.get("name"), str):
            models[r] = g["name"]
        info[r] = (" · ".join(parts), 0, ())
    real = [raw_pids[r] for r in ranks]
    unique = all(p is not None and p > 0 for p in real) and len(set(real)) == len(real)
    for r in ranks:
        p = raw_pids[r]
        labels = tuple(x for x in (models.get(r), f"pid {p}" if p is not None else None) if x)
        info[r] = (info[r][0], int(p) if unique and p is not None else 100_000 + r, labels)
    return info


def _phase_slices(ev: pl.DataFrame) -> pl.DataFrame:
    """Phase slices: host ranges (window=host) and GPU windows (window=gpu) with their facts."""
    facts = ["cycle", "batch_size", "num_tokens", "seq_len", "graphed", "accept_len"]
    # lazy: only the columns used are read (an eager filter would copy every column of the range rows);
    # phase ids are keyed with the rank: runs merged from shards may number instances per rank
    host = (
        ev.lazy().select("rank", "kind", "phase", "phase_id", "start_ns", "dur_ns", *facts)
        .filter((pl.col("kind") == RANGE) & pl.col("phase_id").is_not_null() & pl.col("phase").is_not_null())
        .unique(["rank", "phase_id"], keep="first", maintain_order=True).collect()
    )
    fact_tab = host.select("rank", "phase_id", *facts)
    gpu = (
        ev.lazy().select("rank", "kind", "phase", "phase_id", "start_ns", "dur_ns")
        .filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("phase_id").is_not_null())
        .group_by("rank", "phase_id")
        .agg(
            pl.col("phase").first(),
            pl.col("start_ns").min().alias("start_ns"),
            ((pl.col("start_ns") + pl.col("dur_ns")).max() - pl.col("start_ns").min()).alias("dur_ns"),
        )
        .collect()
        .join(fact_tab, on=["rank", "phase_id"], how="left")
        .sort("rank", "start_ns", "phase_id")
    )
    cols = ["rank", "phase", "phase_id", "start_ns", "dur_ns", *facts]
    h = host.select(cols).with_columns(pl.lit("host").alias("window"), pl.lit(G_PHASE_HOST).alias("_g"))
    g = gpu.select(cols).with_columns(pl.lit("gpu").alias("window"), pl.lit(G_PHASE_GPU).alias("_g"))
    return pl.concat([h, g], how="vertical_relaxed").with_columns(
        pl.col("phase").alias("name"), pl.lit("phase").alias("category"), pl.lit("phase").alias("kind")
    )


def _group_name(g: int, a: int | None, b: int | None, multi: bool) -> str:
    if g == G_PHASE_HOST:
        return "phases (host)"
    if g == G_PHASE_GPU:
        return "phases (GPU window)"
    sb = "?" if b is None else str(b)
    if g == G_THREAD:
        return f"thread {sb}" + (f" · pid {a}" if multi else "")
    if g == G_STREAM:
        return (f"GPU {a} " if multi else "") + f"stream {sb}"
    if g == G_GPU_RANGE:
        return (f"GPU {a} " if multi else "") + f"stream {sb} annotations"
    raise ValueError(g)


UNNAMED_COUNTER: Final = "(unnamed counter)"


def make_tracks(ranks: list[int], info: Mapping[int, tuple[str, int, tuple[str, ...]]], groups: list[tuple[Any, ...]],
                multi_set: set[tuple[int, int]], lane_n: Mapping[tuple[Any, ...], int], ctr_names: pl.DataFrame,
                ph_names: pl.DataFrame, outstanding: bool) -> _TrackBuilder:
    """The tracks in display order: per rank its process, then phase, counter, thread, stream and
    annotation tracks (``groups``: the distinct (rank, group, pid/device, tid/stream) sorted, nulls first;
    ``lane_n``: the highest lane of each)."""
    tb = _TrackBuilder()
    for r in ranks:
        pname, pid, labels = info[r]
        proc = tb.add(Track(uuid=0, parent=0, name=pname, kind="process", rank=r, order=r, pid=pid, labels=labels), None)
        rg = [t for t in groups if t[0] == r]
        for which in (G_PHASE_HOST, G_PHASE_GPU, "dur", "out", G_THREAD, G_STREAM, G_GPU_RANGE, "ctr"):
            if which == "out":
                if outstanding and any(t[1] == G_STREAM for t in rg):
                    tb.add(Track(0, proc, "outstanding GPU work", "counter", r, 0), (r, "out"))
                continue
            if which == "dur":
                for p in ph_names.filter(pl.col("rank") == r)["phase"].to_list():
                    tb.add(Track(0, proc, f"{p} duration", "counter", r, 0, unit_ns=True), (r, "dur", f"{p} duration"))
                continue
            if which == "ctr":
                for nm in ctr_names.filter(pl.col("rank") == r)["name"].to_list():
                    # a counter row without a name still gets a track, named as such (not dropped)
                    tb.add(Track(0, proc, UNNAMED_COUNTER if nm is None else nm, "counter", r, 0), (r, "ctr", nm))
                continue
            for _, g, a, b in rg:
                if g != which:
                    continue
                nm = _group_name(g, a, b, (r, g) in multi_set)
                for lane in range(lane_n[(r, g, a, b)] + 1):
                    tb.add(Track(0, proc, nm if lane == 0 else f"{nm} (overlap {lane})", "slice", r, 0,
                                 gpu=g == G_STREAM), (r, g, a, b, lane))
    return tb


def add_buckets(rows: I64, rank: npt.NDArray[np.integer], phase_id: I64, argset_arr: I64, argsets: list[ArgSet],
                buckets: Mapping[tuple[int, int], Mapping[str, int]]) -> None:
    """Extend the arg sets of the GPU-window phase slices ``rows`` with their attribution buckets
    (``bucket.<name>``: ns), one new arg set per phase instance (``argsets``/``argset_arr`` updated)."""
    label: dict[tuple[str, ...], tuple[str, ...]] = {}
    for i, r, p, a in zip(rows.tolist(), rank.tolist(), phase_id.tolist(), argset_arr[rows].tolist(), strict=True):
        b = buckets.get((int(r), int(p)))
        if b:
            ks = tuple(b)
            labs = label.get(ks) or label.setdefault(ks, tuple(f"bucket.{k}" for k in ks))
            extra = tuple(zip(labs, map(int, b.values()), strict=True))
            argsets.append(argsets[a] + extra)
            argset_arr[i] = len(argsets) - 1


def dur_tracks(dur_rank: Sequence[Any], dur_phase: Sequence[Any], track_of: Mapping[tuple[Any, ...], int]) -> I64:
    """The duration counter track of each (rank, phase) pair."""
    return np.array([track_of[(int(r), "dur", f"{p} duration")] for r, p in zip(dur_rank, dur_phase, strict=True)],
                    dtype=np.int64)


def counter_samples(dur_ts: I64, dur_track: I64, dur_ns: npt.NDArray[np.integer],
                    ctr: pl.DataFrame, track_of: Mapping[tuple[Any, ...], int],
                    out: tuple[I64, I64, I64, I64, I64, BoolA] | None) -> tuple[I64, I64, F64, BoolA]:
    """Counter samples sorted by (ts, track), stable, non-finite values left out: each GPU-window phase
    slice's duration at its start (``dur_*``, in slice order; tracks from ``dur_tracks``), the run's counter
    rows (``ctr``), and with ``out`` = (launch edge sources, destinations, and per slice rank, start, dur,
    is_gpu) the outstanding GPU work."""
    ts = [np.asarray(dur_ts, dtype=np.int64), ctr["start_ns"].to_numpy().astype(np.int64, copy=False)]
    track = [np.asarray(dur_track, dtype=np.int64),
             np.array([track_of[(int(r), "ctr", n)] for r, n in zip(ctr["rank"].to_list(), ctr["name"].to_list(), strict=True)],
                      dtype=np.int64)]
    value = [np.asarray(dur_ns, dtype=np.float64), ctr["value"].fill_null(float("nan")).to_numpy().astype(np.float64, copy=False)]
    is_int = [np.ones(ts[0].size, dtype=bool), np.zeros(ts[1].size, dtype=bool)]
    if out is not None:
        le_src, le_dst, rank_arr, start, dur, is_gpu = out
        issued = start.copy()
        issued[le_dst] = np.minimum(start[le_src], start[le_dst])
        g = np.flatnonzero(is_gpu)
        orank, ots, ocount = outstanding_samples(rank_arr[g], start[g], start[g] + dur[g], issued[g])
        ts.append(ots.astype(np.int64))
        track.append(np.array([track_of[(int(r), "out")] for r in orank.tolist()], dtype=np.int64))
        value.append(ocount.astype(np.float64))
        is_int.append(np.ones(ots.size, dtype=bool))
    t, k, v, i = (np.concatenate(x) for x in (ts, track, value, is_int))
    keep = np.flatnonzero(np.isfinite(v))
    o = keep[np.lexsort((k[keep], t[keep]))]
    return t[o], k[o], v[o], i[o]


def build_layout(
    events: pl.DataFrame,
    manifest: Mapping[str, Any],
    *,
    flows: Sequence[str] = ("launches",),
    buckets: Mapping[tuple[int, int], Mapping[str, int]] | None = None,
    outstanding: bool = False,
    info: RankInfo | None = None,
) -> Layout:
    """Lay out selected events (one run's rows, schema columns) as tracks, slices, counters, flows.

    ``buckets``: optional attribution per phase instance ((rank, phase_id) -> bucket -> ns),
    shown as args of the GPU-window phase slices. ``outstanding``: add a counter per rank of
    the GPU work issued and not finished (``outstanding_samples``). ``info``: the ranks' process
    names and pids (``rank_info``), when computed beforehand over more ranks than these events hold.
    """
    layout_options({"flows": flows})
    if core is not None:
        from tracekit.export.fastlayout import build_layout_fast

        return build_layout_fast(events, manifest, flows=flows, buckets=buckets, outstanding=outstanding, info=info)
    from tracekit.export.layout_reference import build_layout_reference

    return build_layout_reference(events, manifest, flows=flows, buckets=buckets, outstanding=outstanding, info=info)


class LayoutOptions(TypedDict, total=False):
    """The keyword options of ``build_layout`` (see there)."""

    flows: Sequence[str]
    buckets: Mapping[tuple[int, int], Mapping[str, int]] | None
    outstanding: bool
    info: RankInfo | None  # the process names and pids (``rank_info``) when known beforehand


def layout_options(opts: LayoutOptions) -> tuple[Sequence[str], Mapping[tuple[int, int], Mapping[str, int]] | None, bool]:
    """(flows, buckets, outstanding) with their defaults; raises ValueError on an unknown flow kind."""
    flows = opts.get("flows", ("launches",))
    for f in flows:
        if f not in FLOW_KINDS:
            raise ValueError(f"unknown flow kind {f!r} (use {', '.join(FLOW_KINDS)})")
    return flows, opts.get("buckets"), opts.get("outstanding", False)


def outstanding_samples(rank: I64, start: I64, end: I64, issued: I64) -> tuple[I64, I64, I64]:
    """Outstanding GPU work per rank: +1 when work is issued (its launch call starts, or the
    work itself starts when no launch was recorded), -1 when it ends. Returns (rank, ts, count),
    one sample per rank and timestamp where the count changes (ends before issues at one time)."""
    if rank.size == 0:
        return rank, start, start
    r = np.concatenate([rank, rank])
    t = np.concatenate([issued, end])
    d = np.concatenate([np.ones(start.size, np.int64), -np.ones(start.size, np.int64)])
    o = np.lexsort((d, t, r))
    r, t, d = r[o], t[o], d[o]
    run = np.cumsum(d)
    first = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    run -= np.repeat(np.r_[0, run[first[1:] - 1]], np.diff(np.r_[first, r.size]))
    last = np.r_[(r[1:] != r[:-1]) | (t[1:] != t[:-1]), True]
    return r[last], t[last], run[last]


__all__ = [
    "FLOW_KINDS",
    "INT_ARGS",
    "SET_ARGS",
    "Layout",
    "LayoutOptions",
    "RankInfo",
    "Track",
    "add_buckets",
    "build_layout",
    "counter_samples",
    "display_names",
    "dur_tracks",
    "layout_options",
    "make_tracks",
    "rank_devices_pids",
    "rank_info",
]
