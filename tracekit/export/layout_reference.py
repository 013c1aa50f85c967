"""The reference layout builder (polars, no compiled code): what ``fastlayout`` must equal; used where
the compiled ``_core`` is not built, and by the tests and benches that compare the two."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from tracekit.export.lanes import assign_lanes_grouped
from tracekit.schema import COUNTER, GPU_KINDS, GPU_RANGE, LAUNCH

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are not evaluated at run time
    from typing import Unpack
from tracekit.export.layout import (
    G_GPU_RANGE,
    G_PHASE_GPU,
    G_STREAM,
    G_THREAD,
    I64,
    INT_ARGS,
    SET_ARGS,
    ArgSet,
    ArgValue,
    Layout,
    LayoutOptions,
    _phase_slices,
    _rank_info,
    add_buckets,
    counter_samples,
    display_names,
    dur_tracks,
    layout_options,
    make_tracks,
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


__all__ = ["build_layout_reference", "launch_edges"]
