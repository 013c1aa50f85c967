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
from tracekit.export.lanes import assign_lanes_grouped
from tracekit.schema import COUNTER, GPU_KINDS, GPU_RANGE, LAUNCH, RANGE

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are not evaluated at run time
    from typing import Unpack

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


def _base_slices(ev: pl.LazyFrame) -> pl.LazyFrame:
    """Run rows shown as slices, with their group (thread / stream / GPU annotation track)."""
    rows = ev.filter(pl.col("kind") != COUNTER)
    is_gpu = pl.col("kind").is_in(list(GPU_KINDS))
    return rows.with_columns(
        pl.when(is_gpu).then(pl.lit(G_STREAM))
        .when(pl.col("kind") == GPU_RANGE).then(pl.lit(G_GPU_RANGE))
        .otherwise(pl.lit(G_THREAD)).alias("_g"),
        # kind and category are Enums of two vocabularies (schema.KIND_DTYPE): mixed as strings
        pl.when(is_gpu).then(pl.col("category").cast(pl.String).fill_null(pl.col("kind").cast(pl.String)))
        .otherwise(pl.col("kind").cast(pl.String)).alias("category"),
        pl.lit(None, dtype=pl.String()).alias("window"),
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


def build_layout_reference(events: pl.DataFrame, manifest: Mapping[str, Any], **opts: Unpack[LayoutOptions]) -> Layout:
    """``build_layout`` with polars frames and numpy (the reference of ``fastlayout.build_layout_fast``;
    the compiled path gives the same Layout). Lays out selected events as tracks, slices, counters, flows.

    ``buckets``: optional attribution per phase instance ((rank, phase_id) -> bucket -> ns),
    shown as args of the GPU-window phase slices. ``outstanding``: add a counter per rank of
    the GPU work issued and not finished (``outstanding_samples``).
    """
    flows, buckets, outstanding = layout_options(opts)
    ev = events.with_row_index("_row")
    ranks = sorted(int(r) for r in ev["rank"].unique().drop_nulls().to_list())
    info = opts.get("info") or _rank_info(manifest, ev, ranks)
    base = _base_slices(ev.lazy())
    phases = _phase_slices(ev)
    cols = ["rank", "_g", "kind", "name", "category", "start_ns", "dur_ns", "pid", "tid", "device", "stream",
            "args", "graph", "coll_op", "group", "window", "phase",
            "batch_size", "num_tokens", "seq_len", "graphed", "accept_len", *INT_ARGS]
    base_sel = base.with_columns(
        pl.when(pl.col("_g") == G_THREAD).then(pl.col("pid")).otherwise(pl.col("device").cast(pl.Int64)).alias("_a"),
        pl.when(pl.col("_g") == G_THREAD).then(pl.col("tid")).otherwise(pl.col("stream")).alias("_b"),
    ).select([*cols, "_a", "_b", "_row"])
    ph_sel = phases.with_columns(
        [pl.lit(None).alias(c) for c in cols if c not in phases.columns]
        + [pl.lit(None, pl.Int64()).alias("_a"), pl.lit(None, pl.Int64()).alias("_b"), pl.lit(None, pl.UInt32()).alias("_row")]
    ).select([*cols, "_a", "_b", "_row"])
    sl = pl.concat([ph_sel.lazy(), base_sel], how="vertical_relaxed").with_columns(
        pl.col("dur_ns").fill_null(0).clip(lower_bound=0)
    ).collect()
    # group key and display names
    multi = (
        sl.lazy().select("rank", "_g", "_a").filter(pl.col("_g").is_in([G_THREAD, G_STREAM, G_GPU_RANGE]))
        .group_by("rank", "_g").agg(pl.col("_a").n_unique().alias("n")).collect()
    )
    multi_set = {(int(r), int(g)) for r, g, n in multi.iter_rows() if n > 1}
    # lanes per group (group key = dense rank of rank, group, pid/device, tid/stream); no frame sorts
    dense = sl.select(pl.struct("rank", "_g", "_a", "_b").rank("dense").alias("k"))["k"].to_numpy()
    _, key_first, key_inv = np.unique(dense, return_index=True, return_inverse=True)
    keys = key_inv.reshape(-1).astype(np.int64)  # 0..K-1
    gtab = sl.select("rank", "_g", "_a", "_b")[key_first]  # row j: the group of key j
    group_of_key = list(gtab.iter_rows())
    groups = gtab.sort(["rank", "_g", "_a", "_b"], nulls_last=False)
    starts = sl["start_ns"].to_numpy().astype(np.int64)
    durs = sl["dur_ns"].to_numpy().astype(np.int64)
    seq = np.arange(sl.height, dtype=np.int64)
    by_group = np.lexsort((seq, -durs, starts, keys))
    s_sorted, e_sorted = starts[by_group], starts[by_group] + durs[by_group]
    bounds = np.r_[0, np.flatnonzero(np.diff(keys[by_group])) + 1, by_group.size].astype(np.int64)
    # by_group is (start, longer first, input order) inside each group: the nesting order
    sorted_lanes, lane_max = assign_lanes_grouped(s_sorted, e_sorted, bounds)
    lanes = np.zeros(sl.height, dtype=np.int64)
    lanes[by_group] = sorted_lanes
    lane_n: dict[tuple[Any, ...], int] = {}
    if by_group.size:
        for gi, key in enumerate(keys[by_group[bounds[:-1]]].tolist()):
            lane_n[group_of_key[key]] = int(lane_max[gi])
    # tracks
    ctr = ev.filter(pl.col("kind") == COUNTER)
    ctr_names = ctr.select("rank", "name").unique().sort("rank", "name")
    ph_names = phases.filter(pl.col("_g") == G_PHASE_GPU).select("rank", "phase").unique().sort("rank", "phase")
    tb = make_tracks(ranks, info, list(groups.iter_rows()), multi_set, lane_n, ctr_names, ph_names, outstanding)
    tracks, track_of = tb.tracks, tb.track_of
    # the lanes of a group are consecutive tracks: track = the group's lane-0 track + lane
    lane0 = np.array([track_of[(*grp, 0)] for grp in group_of_key], dtype=np.int64)
    track_col = lane0[keys] + lanes
    # final slice order: start, longer first, track, then input order (only the columns used below)
    final = np.lexsort((seq, track_col, -durs, starts))
    src_row = sl["_row"].cast(pl.Int64).fill_null(-1).to_numpy()[final]
    sl = sl.drop("pid", "tid", "device", "stream", "_g", "_a", "_b", "_row").with_columns(
        pl.Series("_track", track_col))[final]
    # display names
    gpu_mask = sl["kind"].is_in(list(GPU_KINDS))
    sl = sl.with_columns(pl.col("name").fill_null(""))
    disp_map = display_names(sl["name"].filter(gpu_mask).unique().sort().to_list())
    sl = sl.with_columns(
        pl.when(gpu_mask).then(pl.col("name").replace(disp_map)).otherwise(pl.col("name")).alias("_disp")
    )
    names = sl["_disp"].unique(maintain_order=True).to_list()
    cats = sl["category"].fill_null("other").unique(maintain_order=True).to_list()
    name_id = sl["_disp"].replace_strict({n: i for i, n in enumerate(names)}, return_dtype=pl.Int64).to_numpy()
    cat_id = sl["category"].fill_null("other").replace_strict({c: i for i, c in enumerate(cats)}, return_dtype=pl.Int64).to_numpy()
    # arg sets: full name only where it differs from the display name, on GPU rows
    argf = sl.select(
        pl.when(gpu_mask & (pl.col("name") != pl.col("_disp"))).then(pl.col("name")).otherwise(None).alias("name"),
        *[pl.col(c) for c in SET_ARGS if c != "name"],
    )
    aid, uniq = _first_seen_ids(argf)
    argsets: list[ArgSet] = []
    for row in uniq.iter_rows(named=True):
        items: list[tuple[str, ArgValue]] = [(k, v) for k, v in row.items() if v is not None]
        argsets.append(tuple(items))
    ints = {}
    for c in INT_ARGS:
        s = sl[c]
        ints[c] = (s.fill_null(0).to_numpy().astype(np.int64), s.is_not_null().to_numpy())
    # attribution buckets on GPU-window phase slices: extend their arg sets (one per phase instance)
    argset_arr = aid.astype(np.int64)
    if buckets:
        pid_vals, pid_ok = ints["phase_id"]
        rows = np.flatnonzero((sl["window"] == "gpu").fill_null(False).to_numpy() & pid_ok)
        add_buckets(rows, sl["rank"].to_numpy()[rows], pid_vals[rows], argset_arr, argsets, buckets)
    argset_arr = np.where(np.array([len(a) > 0 for a in argsets], dtype=bool)[argset_arr], argset_arr, -1)
    track_arr = sl["_track"].to_numpy().astype(np.int64)
    start = sl["start_ns"].to_numpy().astype(np.int64)
    dur = sl["dur_ns"].to_numpy().astype(np.int64)
    is_gpu = gpu_mask.to_numpy()
    fsrc, fdst = _flows(sl, flows)
    fid = np.arange(1, fsrc.size + 1, dtype=np.int64)
    # counters: phase durations (at the GPU window start) and counter rows
    dur_rows = sl.filter(pl.col("window") == "gpu")
    out_args = None
    if outstanding:
        le_src, le_dst = launch_edges(sl)
        out_args = (le_src, le_dst, sl["rank"].to_numpy().astype(np.int64), start, dur, is_gpu)
    c_ts, c_track, c_value, c_is_int = counter_samples(
        dur_rows["start_ns"].to_numpy().astype(np.int64),
        dur_tracks(dur_rows["rank"].to_list(), dur_rows["phase"].to_list(), track_of),
        dur_rows["dur_ns"].to_numpy(), ctr, track_of, out_args)
    return Layout(
        tracks=tracks, start=start, dur=dur, track=track_arr, name_id=name_id.astype(np.int64),
        cat_id=cat_id.astype(np.int64), argset=argset_arr, ints=ints, is_gpu=is_gpu, names=names, cats=cats,
        argsets=argsets, flow_src=fsrc, flow_dst=fdst, flow_id=fid,
        c_ts=c_ts, c_track=c_track, c_value=c_value, c_is_int=c_is_int, ranks=ranks, src_row=src_row,
    )


def _first_seen_ids(df: pl.DataFrame) -> tuple[I64, pl.DataFrame]:
    """Per row, the index of its distinct row in order of first appearance; and the distinct rows.

    Same result as ``df.unique(maintain_order=True)`` joined back, from one row hash and one
    numpy sort; checked against the rows themselves (a hash collision falls back to the join).
    """
    if df.height == 0:
        return np.zeros(0, dtype=np.int64), df
    h = df.hash_rows(seed=0).to_numpy()
    _, first, inv = np.unique(h, return_index=True, return_inverse=True)
    by_first = np.argsort(first, kind="stable")
    remap = np.empty(first.size, dtype=np.int64)
    remap[by_first] = np.arange(first.size, dtype=np.int64)
    aid = remap[inv.reshape(-1)]
    uniq = df[first[by_first]]
    if uniq[aid].equals(df, null_equal=True):
        return aid, uniq
    uniq = df.unique(maintain_order=True).with_row_index("_aid")
    aid = df.join(uniq, on=df.columns, how="left", nulls_equal=True, maintain_order="left")["_aid"].to_numpy()
    return aid.astype(np.int64), uniq.drop("_aid")


def launch_edges(sl: pl.DataFrame) -> tuple[I64, I64]:
    """(launch slice, GPU slice) pairs joined on (rank, correlation), sorted."""
    idx = sl.with_row_index("_i").select("_i", "rank", "kind", "correlation")
    launches = (
        idx.filter((pl.col("kind") == LAUNCH) & pl.col("correlation").is_not_null())
        .unique(["rank", "correlation"], keep="first", maintain_order=True)
        .select("rank", "correlation", pl.col("_i").alias("_src"))
    )
    gpu = idx.filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("correlation").is_not_null())
    e = gpu.join(launches, on=["rank", "correlation"], how="inner").sort("_src", "_i")
    return e["_src"].to_numpy().astype(np.int64), e["_i"].to_numpy().astype(np.int64)


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


def _flows(sl: pl.DataFrame, kinds: Sequence[str]) -> tuple[I64, I64]:
    """Flow edges (source slice, destination slice) in slice indices, deterministic order."""
    idx = sl.with_row_index("_i").select("_i", "rank", "kind", "group", "coll_seq", "start_ns")
    src: list[I64] = []
    dst: list[I64] = []
    if "launches" in kinds:
        s, d = launch_edges(sl)
        src.append(s)
        dst.append(d)
    if "collectives" in kinds:
        coll = (
            idx.filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("group").is_not_null() & pl.col("coll_seq").is_not_null())
            .sort("group", "coll_seq", "start_ns", "rank", "_i")
        )
        nxt = coll.with_columns(
            pl.col("_i").shift(-1).over("group", "coll_seq").alias("_next")
        ).filter(pl.col("_next").is_not_null())
        src.append(nxt["_i"].to_numpy().astype(np.int64))
        dst.append(nxt["_next"].to_numpy().astype(np.int64))
    if not src:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(src), np.concatenate(dst)


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
    "build_layout_reference",
    "counter_samples",
    "display_names",
    "dur_tracks",
    "layout_options",
    "make_tracks",
    "rank_devices_pids",
    "rank_info",
]
