"""The export layout on integer codes: the same ``Layout`` as ``layout_reference.build_layout_reference``,
without building, sorting or gathering a frame of every slice.

Each string column of the run becomes one integer code per row (``tracekit._walk.intern`` on the
Arrow buffers: ids in order of first appearance), every string that occurs is held once
(``_Strings``), and the layout works on numpy arrays of codes: one stable sort by start whose
runs of equal start are then ordered in place (``tracekit._core.sort_ties``) gives the nesting
order, and the final order is its tie runs ordered by track, lanes by the compiled greedy pass,
names, categories and arg sets as first-seen ids of code tuples in the final order (the
annotations most slices lack read only at the slices that have one: ``_sparse_args``), the launch -> kernel join by one
hash table of the launches (``tracekit._core.launch_join``). Integer columns are read through the
slice index straight from their Arrow buffers (``tracekit._walk.take``), the per-slice integer
args once, in the final order; intermediates are released as soon as they are used (fresh memory
costs a page fault per page). Only the distinct values (names, arg sets, groups) are turned into
Python objects. Used when the compiled core is built; the tests compare both paths
Layout field by field and byte by byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit._native import arrow_stream, core, walk
from tracekit.export.buckets import ArgSets, BucketTable, add_bucket_args
from tracekit.export.lanes import assign_lanes_grouped
from tracekit.export.layout import (
    G_GPU_RANGE,
    G_PHASE_GPU,
    G_STREAM,
    G_THREAD,
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
from tracekit.schema import COUNTER, GPU_KINDS, GPU_RANGE, LAUNCH

if TYPE_CHECKING:  # typing.Unpack is 3.11+; annotations are not evaluated at run time
    from typing import Unpack

I64 = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]

_STR_COLS = ("name", "phase")
_INT_SET = ("batch_size", "num_tokens", "seq_len")
# the arg-set annotations most slices lack: read only at the slices that have one of them (and the phase
# slices, which carry the facts); every other slice has the all-null tuple of them. The phase facts
# always; a string column only when at most a quarter of the rows have it (args can be on every op)
_MAYBE_SPARSE_STR = ("args", "coll_op", "group")
_SPARSE_NUM = (*_INT_SET, "graphed", "accept_len")


def first_seen(cols: Sequence[npt.NDArray[Any]], order: I64 | None = None) -> tuple[I64, I64]:
    """(id of each row's tuple, numbered in order of first appearance; first row of each id). Rows are
    the tuples of ``cols`` at the indices ``order`` when given (no gathered copy), else in order."""
    n = int(cols[0].size if order is None else order.size)
    ids = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    assert core is not None
    k = core.first_seen(tuple(np.ascontiguousarray(c, dtype=np.int64) for c in cols), ids, first,
                        None if order is None else np.ascontiguousarray(order, dtype=np.int64))
    return ids, first[:k]


class _Strings:
    """Every distinct string (or None) of the layout once: value -> code."""

    def __init__(self) -> None:
        self.code: dict[str | None, int] = {}
        self.values: list[str | None] = []

    def get(self, v: str | None) -> int:
        c = self.code.get(v)
        if c is None:
            c = self.code[v] = len(self.values)
            self.values.append(v)
        return c

    def lut(self, vals: Sequence[str | None]) -> I64:
        return np.fromiter((self.get(v) for v in vals), dtype=np.int64, count=len(vals))


def _intern_into(series: pl.Series, rows: I64, out: I64) -> tuple[list[str], bool]:
    """Writes to ``out`` the code of each of ``series[rows]``: 0 for a null, else 1 + the index of its value
    in the distinct non-null values (returned, in order of first appearance); and whether a null was
    among the rows. A column of nulls costs nothing; a string column is interned by
    ``tracekit._walk.intern`` from the Arrow buffers in one pass (a null row is its validity bit; rows
    sharing one copy of a value's bytes, as a parquet dictionary reads, are looked up by their view: no
    byte hashed, no dictionary cast); an Enum is its codes."""
    n_null = series.null_count()
    if n_null == series.len():
        out[:] = 0
        return [], True
    if walk is not None and series.dtype == pl.String:
        vals = walk.intern(arrow_stream(series), rows, None, out)
        return vals, bool(n_null) and bool((out == 0).any())
    # an Enum (kind, category: schema.KIND_DTYPE / CATEGORY_DTYPE) is its codes already
    cat = series if isinstance(series.dtype, pl.Enum) else series.cast(pl.Categorical)
    # null: one past the largest code (an Enum's: its vocabulary size), so first_seen keeps its direct table
    null_code = len(series.dtype.categories) if isinstance(series.dtype, pl.Enum) else np.iinfo(np.uint32).max
    phys = cat.to_physical().fill_null(null_code).cast(pl.Int64).to_numpy()
    ids, first = first_seen([phys], order=rows)
    seen: list[str | None] = series.gather(rows[first]).to_list() if first.size else []
    present = np.array([v is not None for v in seen], dtype=np.int64)
    to_code = np.cumsum(present) * present
    np.take(to_code, ids, out=out)
    return [v for v in seen if v is not None], None in seen


def _intern(series: pl.Series, rows: I64) -> tuple[I64, list[str | None]]:
    """(index into the distinct values of each of ``series[rows]``, the distinct values in order of first
    appearance, null as None after them): ``_intern_into``."""
    ids = np.empty(rows.size, dtype=np.int64)
    got, has_null = _intern_into(series, rows, ids)
    vals: list[str | None] = list(got)
    if has_null:
        vals.append(None)
        ids[ids == 0] = len(vals)
    ids -= 1
    return ids, vals


def _codes(series: pl.Series, rows: I64, strings: _Strings, head: I64 | None = None, null_as: str | None = None) -> I64:
    """Codes (``strings``) of ``series[rows]`` after the codes ``head``: ``_intern_into`` writes its codes
    in place, then one lookup per distinct value (a null read as ``null_as``, looked up last)."""
    h = 0 if head is None else head.size
    out = np.empty(h + rows.size, dtype=np.int64)
    if head is not None:
        out[:h] = head
    body = out[h:]
    vals, has_null = _intern_into(series, rows, body)
    lut = np.zeros(len(vals) + 1, dtype=np.int64)
    lut[1:] = strings.lut(vals)
    if has_null:
        lut[0] = strings.get(null_as)
    if body.size:
        np.take(lut, body, out=body, mode="clip")
    return out


def _pack(cols: Sequence[I64]) -> list[I64]:
    """Integer columns combined into as few int64 columns as their value ranges allow (mixed radix):
    two rows have equal packed tuples exactly when they have equal tuples. Each combined column is
    written in one pass over its columns (``tracekit._core.pack_rows``), the ranges read in one pass over
    all of them (``col_ranges``)."""
    if not cols or cols[0].size == 0:
        return list(cols)
    assert core is not None
    cols = [np.ascontiguousarray(c, dtype=np.int64) for c in cols]
    los, his = np.empty(len(cols), dtype=np.int64), np.empty(len(cols), dtype=np.int64)
    core.col_ranges(tuple(cols), los, his)
    groups: list[list[tuple[I64, int, int]]] = []  # (column, lo, radix) of each packed column
    span = 0
    for c, lo, hi in zip(cols, los.tolist(), his.tolist(), strict=True):
        r = hi - lo + 1
        if r >= 1 << 62:
            groups.append([(c, 0, 0)])
            span = 0
        elif span and span * r < 1 << 62:
            groups[-1].append((c, lo, r))
            span *= r
        else:
            groups.append([(c, lo, r)])
            span = r
    out: list[I64] = []
    for g in groups:
        if len(g) == 1:
            c, lo, _ = g[0]
            out.append(c - lo if lo else c)
            continue
        packed = np.empty(cols[0].size, dtype=np.int64)
        core.pack_rows(tuple(c for c, _, _ in g),
                       np.array([lo for _, lo, _ in g], dtype=np.int64), np.array([r for _, _, r in g], dtype=np.int64),
                       packed)
        out.append(packed)
    return out


def _int_col(df: pl.DataFrame, c: str) -> tuple[I64, BoolA]:
    """(values with nulls as 0, present) of an integer column."""
    s = df[c]
    if s.null_count() == 0:
        return s.to_numpy().astype(np.int64, copy=False), np.ones(s.len(), dtype=bool)
    return s.fill_null(0).to_numpy().astype(np.int64, copy=False), s.is_not_null().to_numpy()


def _take(series: pl.Series, src: I64, head: tuple[I64, BoolA] | None = None, fill: int = 0) -> tuple[I64, BoolA]:
    """(values, present) per slice of an integer or boolean column read through ``src``: row ``src[j]``
    of ``series`` (``fill`` where null), or ``head[.][-1 - src[j]]`` where ``src[j] < 0`` (the phase
    slices). ``tracekit._walk.take`` reads the Arrow buffers: no filled copy, mask or concatenation."""
    assert walk is not None
    hv, ho = head if head is not None else (np.zeros(0, np.int64), np.zeros(0, bool))
    vals, ok = np.empty(src.size, np.int64), np.empty(src.size, bool)
    walk.take(arrow_stream(series), src, np.ascontiguousarray(hv, dtype=np.int64), np.ascontiguousarray(ho, dtype=np.bool_),
              fill, vals, ok)
    return vals, ok


def _either(mask: BoolA, a: tuple[I64, BoolA], b: tuple[I64, BoolA]) -> tuple[I64, BoolA]:
    """(values, present) from ``a`` where ``mask``, else from ``b``."""
    return np.where(mask, a[0], b[0]), np.where(mask, a[1], b[1])


def _order(start: I64, dur: I64) -> I64:
    """Stable order by (start, longer first): ``np.lexsort((-dur, start))``, as a stable sort by start
    (the rows are mostly in time order already) whose runs of equal start are then sorted
    (``tracekit._core.sort_ties``)."""
    assert core is not None
    o = np.argsort(start, kind="stable")
    core.sort_ties(o, start, dur)
    return o


def _then_by(o: I64, start: I64, dur: I64, key: I64) -> I64:
    """``o`` (sorted by start, longer first, row) re-sorted in place to (start, longer first, key, row)."""
    assert core is not None
    core.sort_ties(o, start, dur, np.ascontiguousarray(key, dtype=np.int64))
    return o


def build_layout_fast(events: pl.DataFrame, manifest: Mapping[str, Any], **opts: Unpack[LayoutOptions]) -> Layout:
    """``layout.build_layout`` on integer codes (see the module docstring); same Layout."""
    flows, buckets, outstanding = layout_options(opts)
    ranks = sorted(int(r) for r in events["rank"].unique().drop_nulls().to_list())
    info = opts.get("info") or _rank_info(manifest, events, ranks)
    phases = _phase_slices(events)
    # kinds: one code per row, the masks by lookup (a null kind is in none of them)
    k_ids, k_vals = _intern(events["kind"], np.arange(events.height, dtype=np.int64))
    rows = np.flatnonzero(np.array([v is not None and v != COUNTER for v in k_vals], dtype=bool)[k_ids])
    k_rows = k_ids[rows]
    nb, npf = int(rows.size), phases.height
    n = npf + nb
    b_gpu = np.array([v in GPU_KINDS for v in k_vals], dtype=bool)[k_rows]
    b_gr = np.array([v == GPU_RANGE for v in k_vals], dtype=bool)[k_rows]
    b_launch = np.array([v == LAUNCH for v in k_vals], dtype=bool)[k_rows]
    strings = _Strings()
    # per slice (phase slices first, then the run's rows in order): the columns the layout reads
    ph_n = phases.select(pl.col("rank").cast(pl.Int64), pl.col("_g").cast(pl.Int64), "start_ns", "dur_ns")
    # per slice: phase slices (src < 0: phase slice -1 - src), then the run's rows
    src = np.empty(n, dtype=np.int64)
    src[:npf] = np.arange(-1, -1 - npf, -1, dtype=np.int64)
    src[npf:] = rows
    rank, start, dur = (_take(events[c], src, _int_col(ph_n, c))[0] for c in ("rank", "start_ns", "dur_ns"))
    np.maximum(dur, 0, out=dur)  # a null or negative duration is shown as 0
    g_b = np.where(b_gpu, G_STREAM, np.where(b_gr, G_GPU_RANGE, G_THREAD)).astype(np.int64)
    grp = np.concatenate([ph_n["_g"].to_numpy().astype(np.int64), g_b])
    zp = np.zeros(npf, np.int64)
    fp = np.zeros(npf, bool)
    # a thread's slices are grouped by (pid, tid), a stream's and its annotations' by (device, stream)
    on_gpu = np.concatenate([fp, b_gpu | b_gr])
    (a_val, a_ok), (b_val, b_ok) = (_either(on_gpu, _take(events[g], src, (zp, fp)), _take(events[h], src, (zp, fp)))
                                    for g, h in (("device", "pid"), ("stream", "tid")))
    del on_gpu
    is_gpu = np.concatenate([fp, b_gpu])
    is_launch = np.concatenate([fp, b_launch])
    # strings as codes
    all_ph = np.arange(npf, dtype=np.int64)
    none = strings.get(None)
    # a missing name is shown as ""; categories: GPU rows their category (else their kind), other rows
    # their kind, null -> "other"
    ph_str = {c: _codes(phases[c], all_ph, strings, null_as="" if c == "name" else None)
              for c in ("name", "category", "phase", "window")}
    code: dict[str, I64] = {c: _codes(events[c], rows, strings, ph_str[c], null_as="" if c == "name" else None)
                            for c in _STR_COLS}
    sparse_str = tuple(c for c in _MAYBE_SPARSE_STR if 4 * (events.height - events[c].null_count()) <= events.height)
    for c in _MAYBE_SPARSE_STR:
        if c not in sparse_str:
            code[c] = _codes(events[c], rows, strings, np.full(npf, none, np.int64))
    k_code = strings.lut(k_vals)[k_rows]
    c_code = _codes(events["category"], rows, strings)
    cat = np.concatenate([ph_str["category"], np.where(b_gpu & (c_code != none), c_code, k_code)])
    cat[cat == none] = strings.get("other")
    code["window"] = np.concatenate([ph_str["window"], np.full(nb, none, np.int64)])
    # integer, boolean and float columns (value, present)
    # the integer args (INT_ARGS) are read in the final order only, once it is known
    ph_int = {c: _int_col(phases, c) if c in phases.columns and phases[c].dtype != pl.Null else (zp, fp)
              for c in (*INT_ARGS, *_INT_SET)}
    ph_graph = _bool_head(phases, "graph", npf)
    graph = _take(events["graph"], src, ph_graph, fill=2)[0]  # values 0 / 1, and 2 where null
    sp = _sparse_args(events, phases, rows, src, ph_int, sparse_str, strings, none)

    # groups (rank, group kind, pid/device, tid/stream): first-seen ids; lanes in nesting order
    gid, gfirst = first_seen([rank, grp, a_val, b_val, a_ok.astype(np.int64) * 2 + b_ok])
    group_of: list[tuple[Any, ...]] = [
        (int(r), int(g), int(a) if ao else None, int(b) if bo else None)
        for r, g, a, ao, b, bo in zip(rank[gfirst].tolist(), grp[gfirst].tolist(), a_val[gfirst].tolist(),
                                      a_ok[gfirst].tolist(), b_val[gfirst].tolist(), b_ok[gfirst].tolist(), strict=True)
    ]
    # intermediates are released as soon as they are used: fresh memory costs a page fault per page,
    # memory given back is reused by the next arrays (bench/export_faults.py)
    del grp, a_val, a_ok, b_val, b_ok
    o1 = _order(start, dur)
    gk = gid.astype(np.int16) if len(group_of) < (1 << 15) else gid
    by_group = o1[np.argsort(gk[o1], kind="stable")]
    s_sorted = start[by_group]
    e_sorted = s_sorted + dur[by_group]
    bounds = np.r_[0, np.flatnonzero(np.diff(gid[by_group])) + 1, by_group.size].astype(np.int64)
    sorted_lanes, lane_max = assign_lanes_grouped(s_sorted, e_sorted, bounds)
    lanes = np.zeros(n, dtype=np.int64)
    lanes[by_group] = sorted_lanes
    del by_group, s_sorted, e_sorted, sorted_lanes, gk
    lane_n = {grp_t: int(lane_max[i]) for i, grp_t in enumerate(group_of)}
    multi: dict[tuple[int, int], set[Any]] = {}
    for r, g, a, _ in group_of:
        if g in (G_THREAD, G_STREAM, G_GPU_RANGE):
            multi.setdefault((r, g), set()).add(a)
    multi_set = {k for k, v in multi.items() if len(v) > 1}
    groups = sorted(group_of, key=lambda t: tuple((0, 0) if v is None else (1, v) for v in t))
    ctr = events.lazy().filter(pl.col("kind") == COUNTER).select("rank", "name", "start_ns", "value").collect()
    ctr_names = ctr.select("rank", "name").unique().sort("rank", "name")
    ph_names = phases.filter(pl.col("_g") == G_PHASE_GPU).select("rank", "phase").unique().sort("rank", "phase")
    tb = make_tracks(ranks, info, groups, multi_set, lane_n, ctr_names, ph_names, outstanding)
    tracks, track_of = tb.tracks, tb.track_of
    lane0 = np.array([track_of[(*g, 0)] for g in group_of], dtype=np.int64)
    track_col = lane0[gid] + lanes
    final = _then_by(o1, start, dur, track_col)  # o1, ordered again in place
    f_track = track_col[final]
    del o1, lanes, track_col, gid

    # names, categories and arg sets: codes per slice in input order, ids by first appearance in the final order
    name = code["name"]
    gpu_names = np.flatnonzero(np.bincount(name[is_gpu], minlength=len(strings.values)))
    disp_map = display_names(sorted(str(strings.values[int(c)]) for c in gpu_names))
    disp_lut = np.arange(len(strings.values), dtype=np.int64)
    for nc in gpu_names.tolist():
        disp_lut[nc] = strings.get(disp_map[str(strings.values[nc])])
    disp = np.where(is_gpu, disp_lut[name], name)
    name_id, nfirst = first_seen([disp], order=final)
    names = [str(strings.values[int(c)]) for c in disp[final[nfirst]]]
    cat_id, cfirst = first_seen([cat], order=final)
    cats = [str(strings.values[int(c)]) for c in cat[final[cfirst]]]
    del cat
    # arg sets: the SET_ARGS tuples (full name only where it differs from the display name); the sparse
    # annotations enter the key as the id of their tuple (0: none of them)
    arg_name = np.where(is_gpu & (disp != name), name, none)
    key_cols: list[I64] = [arg_name, graph, sp.key(n), *(code[c] for c in SET_ARGS if c in code and c != "name")]
    aid, afirst = first_seen(_pack(key_cols), order=final)  # the arg-set tuples numbered in the final order
    del key_cols
    argsets = _argset_values(final[afirst], arg_name, code, graph, sp, strings)
    group_final = (code["group"] if "group" in code else sp.full("group", n, none))[final] if "collectives" in flows else None
    del sp, graph, arg_name, disp, name
    for c in ("name", *_MAYBE_SPARSE_STR):
        code.pop(c, None)
    f_gpu = is_gpu[final]
    src_final = src[final]
    del src
    ints = {c: _take(events[c], src_final, ph_int[c]) for c in INT_ARGS}
    src_final[src_final < 0] = -1
    argset_arr = aid
    f_win_gpu = (code.pop("window") == strings.get("gpu"))[final]  # the GPU-window phase slices
    f_rank = rank[final]
    sets: ArgSets | None = None
    if buckets:
        pid_vals, pid_ok = ints["phase_id"]
        brows = np.flatnonzero(f_win_gpu & pid_ok)
        if isinstance(buckets, BucketTable):
            sets = add_bucket_args(brows, f_rank[brows], pid_vals[brows], argset_arr, argsets, buckets)
        else:
            add_buckets(brows, f_rank[brows], pid_vals[brows], argset_arr, argsets, buckets)
    nonempty = sets.nonempty() if sets is not None else np.array([len(a) > 0 for a in argsets], dtype=bool)
    argset_arr[~nonempty[argset_arr]] = -1
    f_start, f_dur = start[final], dur[final]
    f_launch = is_launch[final]
    del start, dur, is_gpu, is_launch, rank
    corr, corr_ok = ints["correlation"]
    fsrc_l: list[I64] = []
    fdst_l: list[I64] = []
    le: tuple[I64, I64] | None = None
    if "launches" in flows or outstanding:
        le = _launch_edges(f_rank, corr, f_launch & corr_ok, f_gpu & corr_ok)
    if "launches" in flows and le is not None:
        fsrc_l.append(le[0])
        fdst_l.append(le[1])
    if "collectives" in flows:
        assert group_final is not None
        s, d = _collective_edges(f_rank, f_start, f_gpu, group_final, ints["coll_seq"], strings, none)
        fsrc_l.append(s)
        fdst_l.append(d)
    fsrc = np.concatenate(fsrc_l) if fsrc_l else np.zeros(0, np.int64)
    fdst = np.concatenate(fdst_l) if fdst_l else np.zeros(0, np.int64)
    fid = np.arange(1, fsrc.size + 1, dtype=np.int64)
    dur_rows = np.flatnonzero(f_win_gpu)
    d_phase = code["phase"][final[dur_rows]]
    out_args = (le[0], le[1], f_rank, f_start, f_dur, f_gpu) if outstanding and le is not None else None
    pair, pfirst = first_seen([f_rank[dur_rows], d_phase])  # the distinct (rank, phase) pairs
    d_lut = dur_tracks(f_rank[dur_rows[pfirst]].tolist(), [strings.values[int(c)] for c in d_phase[pfirst]], track_of)
    c_ts, c_track, c_value, c_is_int = counter_samples(
        f_start[dur_rows], d_lut[pair] if pair.size else d_lut, f_dur[dur_rows], ctr, track_of, out_args)
    return Layout(
        tracks=tracks, start=f_start, dur=f_dur, track=f_track, name_id=name_id, cat_id=cat_id,
        argset=argset_arr, ints=ints, is_gpu=f_gpu, names=names, cats=cats, argsets=argsets if sets is None else sets,
        flow_src=fsrc, flow_dst=fdst, flow_id=fid, c_ts=c_ts, c_track=c_track, c_value=c_value, c_is_int=c_is_int,
        ranks=ranks, src_row=src_final,
    )


def _bool_head(phases: pl.DataFrame, c: str, npf: int) -> tuple[I64, BoolA]:
    """(values 0 / 1 and 2 where null, present) of the phase slices' boolean column ``c``."""
    ps = phases[c] if c in phases.columns and phases[c].dtype != pl.Null else pl.Series([None] * npf, dtype=pl.Boolean())
    return ps.cast(pl.Int64).fill_null(2).to_numpy(), ps.is_not_null().to_numpy()


class _Sparse:
    """The sparse arg-set annotations (``_SPARSE_NUM`` and the sparse string columns) at the slices ``at`` (sorted slice indices: every phase
    slice, then the run's rows having one of them): string codes, integer values, booleans (2: null),
    accept_len with its presence; ``ids``: the id of each such slice's tuple, 0 for the all-null tuple."""

    def __init__(self, at: I64, str_cols: tuple[str, ...], vals: dict[str, I64], ok: dict[str, BoolA],
                 acc: npt.NDArray[np.float64], ids: I64) -> None:
        self.at, self.str_cols, self.vals, self.ok, self.acc, self.ids = at, str_cols, vals, ok, acc, ids

    def key(self, n: int) -> I64:
        """Per slice: the id of its sparse tuple (0 where it has none)."""
        out = np.zeros(n, dtype=np.int64)
        out[self.at] = self.ids
        return out

    def full(self, c: str, n: int, fill: int) -> I64:
        """Per slice: column ``c`` (``fill`` where the slice has none of the annotations)."""
        out = np.full(n, fill, dtype=np.int64)
        out[self.at] = self.vals[c]
        return out

    def value(self, c: str, rows: I64, strings: _Strings) -> list[ArgValue | None]:
        """The values of ``c`` at slices ``rows`` (None: null)."""
        if self.at.size == 0:
            return [None] * rows.size
        pos = np.searchsorted(self.at, rows)
        pos_c = np.minimum(pos, self.at.size - 1)
        has = (pos < self.at.size) & (self.at[pos_c] == rows)
        if c in self.str_cols:
            return [strings.values[int(v)] if h else None for v, h in zip(self.vals[c][pos_c].tolist(), has.tolist(), strict=True)]
        if c == "graphed":
            return [None if (not h or v == 2) else bool(v) for v, h in zip(self.vals[c][pos_c].tolist(), has.tolist(), strict=True)]
        ok = self.ok[c][pos_c] & has
        vals = self.acc[pos_c] if c == "accept_len" else self.vals[c][pos_c]
        return [v if o else None for v, o in zip(vals.tolist(), ok.tolist(), strict=True)]


def _sparse_args(events: pl.DataFrame, phases: pl.DataFrame, rows: I64, src: I64, ph_int: Mapping[str, tuple[I64, BoolA]],
                 str_cols: tuple[str, ...], strings: _Strings, none: int) -> _Sparse:
    """``_Sparse`` of the layout's slices (phase slices first, then ``events[rows]``; ``src`` as in
    ``build_layout_fast``): the columns ``_SPARSE_NUM`` and ``str_cols``."""
    npf = phases.height
    has = events.select(pl.any_horizontal([pl.col(c).is_not_null() for c in (*str_cols, *_SPARSE_NUM)]).alias("h"))["h"].to_numpy()
    run_at = np.flatnonzero(has[rows]) if rows.size else np.zeros(0, np.int64)
    at = np.concatenate([np.arange(npf, dtype=np.int64), npf + run_at])
    sp_rows, sp_src = rows[run_at], src[at]
    vals: dict[str, I64] = {c: _codes(events[c], sp_rows, strings, np.full(npf, none, np.int64)) for c in str_cols}
    ok: dict[str, BoolA] = {}
    for c in _INT_SET:
        vals[c], ok[c] = _take(events[c], sp_src, ph_int[c])
    vals["graphed"], ok["graphed"] = _take(events["graphed"], sp_src, _bool_head(phases, "graphed", npf), fill=2)
    acc_p = phases["accept_len"].cast(pl.Float64) if "accept_len" in phases.columns else pl.Series([None] * npf, dtype=pl.Float64())
    acc_s = pl.concat([acc_p, events["accept_len"].gather(sp_rows)])
    acc = acc_s.fill_null(0.0).to_numpy().astype(np.float64)
    ok["accept_len"] = acc_s.is_not_null().to_numpy()
    # the tuple of each slice, after one all-null tuple (id 0): -0.0 and 0.0 one value, every NaN one value
    v = np.where(acc == 0.0, 0.0, acc)
    bits = v.view(np.int64).copy()
    bits[np.isnan(v)] = 0x7FF8000000000000
    nulls = np.zeros(at.size, dtype=np.int64)
    for i, c in enumerate((*_INT_SET, "accept_len")):
        nulls |= (~ok[c]).astype(np.int64) << i
    cols = [*(vals[c] for c in str_cols), *(vals[c] for c in _INT_SET), vals["graphed"],
            np.where(ok["accept_len"], bits, 0), nulls]
    all_null = [*(none for _ in str_cols), *(0 for _ in _INT_SET), 2, 0, (1 << (len(_INT_SET) + 1)) - 1]
    ids, _ = first_seen(_pack([np.concatenate([np.array([a], dtype=np.int64), c]) for a, c in zip(all_null, cols, strict=True)]))
    return _Sparse(at, str_cols, vals, ok, acc, ids[1:])


def _argset_values(rows: I64, arg_name: I64, code: Mapping[str, I64], graph: I64, sp: _Sparse,
                   strings: _Strings) -> list[ArgSet]:
    """The arg sets of slices ``rows`` as (key, value) tuples, in SET_ARGS order, nulls left out."""
    cols: list[list[Any]] = [[strings.values[int(c)] for c in arg_name[rows]]]
    for c in SET_ARGS[1:]:
        if c in code:
            cols.append([strings.values[int(x)] for x in code[c][rows]])
        elif c == "graph":
            cols.append([None if v == 2 else bool(v) for v in graph[rows].tolist()])
        else:
            cols.append(sp.value(c, rows, strings))
    out: list[ArgSet] = []
    for vals in zip(*cols, strict=True):
        items: list[tuple[str, ArgValue]] = [(k, v) for k, v in zip(SET_ARGS, vals, strict=True) if v is not None]
        out.append(tuple(items))
    return out


def _launch_edges(rank: I64, corr: I64, launch: BoolA, gpu: BoolA) -> tuple[I64, I64]:
    """(launch slice, GPU slice) on (rank, correlation), the first launch of a pair; sorted by launch
    slice, then GPU slice (``tracekit._core.launch_join``: one hash table of the launches)."""
    assert core is not None
    m = int(np.count_nonzero(gpu))
    src, dst = np.empty(m, np.int64), np.empty(m, np.int64)
    k = core.launch_join(np.ascontiguousarray(rank, dtype=np.int64), np.ascontiguousarray(corr, dtype=np.int64),
                         np.ascontiguousarray(launch, dtype=np.bool_), np.ascontiguousarray(gpu, dtype=np.bool_), src, dst)
    return src[:k], dst[:k]


def _collective_edges(rank: I64, start: I64, gpu: BoolA, group: I64, coll_seq: tuple[I64, BoolA], strings: _Strings,
                      none: int) -> tuple[I64, I64]:
    """The same collective (group, order) across ranks: from each slice to the next by (start, rank, slice)."""
    seq, seq_ok = coll_seq
    i = np.flatnonzero(gpu & (group != none) & seq_ok)
    if i.size < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    used = np.unique(group[i])
    order = sorted(used.tolist(), key=lambda c: str(strings.values[c]))
    g_rank = np.zeros(len(strings.values), dtype=np.int64)
    g_rank[np.array(order, dtype=np.int64)] = np.arange(len(order), dtype=np.int64)
    gr, sq = g_rank[group[i]], seq[i]
    o = np.lexsort((i, rank[i], start[i], sq, gr))
    gi, si, ii = gr[o], sq[o], i[o]
    nxt = (gi[1:] == gi[:-1]) & (si[1:] == si[:-1])
    return ii[:-1][nxt], ii[1:][nxt]


__all__ = ["build_layout_fast", "first_seen"]
