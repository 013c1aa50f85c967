"""Phase instances and membership: which phase instance every event belongs to.

docs/attribution.md section 1. ``annotate_phases`` is one pass over the event table:

1. Phase ranges are ``range`` rows whose name maps to a phase
   (``tracekit.finalize.phases.phase_of_span``: tracekit labels and SGLang spans, plus
   caller-supplied ``(regex, phase)`` rules that are tried first).
2. A phase range nested directly or indirectly inside a range of the *same*
   phase on the same thread (tracekit's ``tracekit:verify|...`` around SGLang's
   own ``step[TARGET_VERIFY bs=4]``) is not a new instance: it joins the outer
   one and contributes the facts the outer label lacks. Every other phase range
   is an instance with a ``phase_id`` unique in the run (numbered in
   (rank, start, longer-first) order).
3. Late facts markers (``tracekit:facts|phase=verify|cycle=N|accept=..``) are
   merged onto the instance(s) with the same rank, phase and cycle.
4. Host rows (launch, runtime, sync, op, python, instant) belong to
   the innermost phase range open on the same (rank, pid, tid) at their start
   (innermost = latest started among the open ones).
   4b. Cross-thread work: a launch row on a thread with no open phase range at its
   start belongs to the innermost phase range open at that time on another thread
   of the same process (rank, pid) (SGLang's overlap scheduler holds the range on
   the scheduler thread while a forward thread launches; training launches
   AllReduces from the autograd thread).
5. GPU rows (kernel, memcpy, memset) inherit ``phase``/``phase_id``/``cycle``
   from their launch via (rank, correlation); graph replays carry the
   correlation of their ``cudaGraphLaunch``.
6. On ranks that have no launch rows at all (traces recorded without CUDA
   runtime events), GPU rows fall back to the innermost phase ``gpu_range``
   (projected annotation) on the same (rank, stream) containing their start;
   those gpu ranges are then the instances.

Phase range rows carry the instance's facts (cycle, batch_size, num_tokens,
seq_len, graphed, accept_len); member rows carry phase, phase_id and cycle.
Row order and all other columns are preserved.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit._native import series
from tracekit.finalize.phases import FACT_COLUMNS, parse_label, phase_of_span
from tracekit.finalize.version import unique_phase_ids
from tracekit.schema import GPU_KINDS, GPU_RANGE, INSTANT, KINDS, LAUNCH, RANGE, conform

I64 = npt.NDArray[np.int64]

_FACT_DTYPES: Final[dict[str, pl.DataType]] = {
    "cycle": pl.Int64(),
    "batch_size": pl.Int64(),
    "num_tokens": pl.Int64(),
    "seq_len": pl.Int64(),
    "graphed": pl.Boolean(),
    "accept_len": pl.Float64(),
}
# host rows that get membership; ranges do not (a range row with a phase_id is a phase range)
HOST_MEMBER_KINDS: Final = ("launch", "runtime", "sync", "op", "python", "instant")

Rule = tuple["str | re.Pattern[str]", str]


def _compile(rules: Sequence[Rule]) -> list[tuple[re.Pattern[str], str]]:
    return [(re.compile(p) if isinstance(p, str) else p, phase) for p, phase in rules]


def _name_table(names: pl.Series, rules: Sequence[Rule]) -> pl.DataFrame:
    """name -> (_map_phase, _is_facts, fact columns) for every distinct range name."""
    compiled = _compile(rules)
    rows: dict[str, list[object]] = {"name": [], "_map_phase": [], "_is_facts": []}
    for c in FACT_COLUMNS:
        rows[c] = []
    for name in names.unique().drop_nulls().to_list():
        phase: str | None = None
        facts: dict[str, int | float | bool] = {}
        is_facts = False
        for pat, ph in compiled:
            if pat.search(name):
                phase = ph
                break
        if phase is None:
            lab = parse_label(name)
            if lab is not None and lab.is_facts:
                phase, facts, is_facts = lab.phase, dict(lab.facts), True
            else:
                mapped = phase_of_span(name)
                if mapped is not None:
                    phase, facts = mapped
        if phase is None:
            continue
        rows["name"].append(name)
        rows["_map_phase"].append(phase)
        rows["_is_facts"].append(is_facts)
        for c in FACT_COLUMNS:
            rows[c].append(facts.get(c))
    schema: dict[str, pl.DataType] = {"name": pl.String(), "_map_phase": pl.String(), "_is_facts": pl.Boolean()}
    schema.update(_FACT_DTYPES)
    return pl.DataFrame(rows, schema=schema)


def range_parents(starts: I64, ends: I64) -> I64:
    """Parent of each range (sorted by start, longer first): the range on top of the open stack."""
    n = starts.size
    parent = np.full(n, -1, dtype=np.int64)
    stack: list[int] = []
    s_list = starts.tolist()
    e_list = ends.tolist()
    for i in range(n):
        s = s_list[i]
        while stack and e_list[stack[-1]] <= s:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


def innermost(starts: I64, ends: I64, parent: I64, t: I64) -> I64:
    """Index of the latest-started range with start <= t < end, or -1 (vectorised).

    ``starts`` sorted ascending (ties: longer first), ``parent`` from the open-range
    stack; the walk follows parents at most (nesting depth) times.
    """
    cand = np.searchsorted(starts, t, side="right").astype(np.int64) - 1
    while True:
        safe = np.maximum(cand, 0)
        bad = (cand >= 0) & (ends[safe] <= t)
        if not bad.any():
            return cand
        cand[bad] = parent[cand[bad]]


def _group_bounds(keys: I64) -> tuple[I64, I64, I64]:
    """For sorted ``keys``: unique values, start offsets, end offsets."""
    if keys.size == 0:
        e = np.zeros(0, dtype=np.int64)
        return e, e, e
    brk = np.flatnonzero(np.diff(keys)) + 1
    lo = np.concatenate([[0], brk]).astype(np.int64)
    hi = np.concatenate([brk, [keys.size]]).astype(np.int64)
    return keys[lo], lo, hi


def _key(df: pl.DataFrame, cols: Sequence[str]) -> I64:
    """A dense int64 key over ``cols`` (nulls are a value of their own)."""
    if df.height == 0:
        return np.zeros(0, dtype=np.int64)
    k = df.select(pl.struct([pl.col(c) for c in cols]).rank("dense").cast(pl.Int64).alias("k"))
    return k.get_column("k").to_numpy().astype(np.int64)


def _i64(s: pl.Series, fill: int = 0) -> I64:
    if s.null_count():
        s = s.fill_null(fill)
    return s.cast(pl.Int64).to_numpy().astype(np.int64, copy=False)


def _ints(s: pl.Series, fill: int = -1) -> npt.NDArray[np.signedinteger[Any]]:
    """Integer column as numpy in its own width (no int64 widening copy), nulls filled."""
    if s.null_count():
        s = s.fill_null(fill)
    if not s.dtype.is_signed_integer():
        s = s.cast(pl.Int64)
    a: npt.NDArray[np.signedinteger[Any]] = s.to_numpy()
    return a


# kind bits: phase range candidates, host member rows, GPU rows, launch rows
_R, _H, _G, _L = 1, 2, 4, 8
_KIND_BITS: Final = np.array(
    [
        (_R if k in (RANGE, INSTANT, GPU_RANGE) else 0)
        | (_H if k in HOST_MEMBER_KINDS else 0)
        | (_G if k in GPU_KINDS else 0)
        | (_L if k == LAUNCH else 0)
        for k in KINDS
    ]
    + [0],  # null or unknown kind
    dtype=np.uint8,
)


def _kind_bits(kind: pl.Series) -> npt.NDArray[np.uint8]:
    """One pass over the kind strings: a bit set per row (see _KIND_BITS)."""
    codes = kind.cast(pl.Enum(list(KINDS)), strict=False).to_physical().fill_null(len(KINDS)).cast(pl.UInt8)
    out: npt.NDArray[np.uint8] = _KIND_BITS[codes.to_numpy()]
    return out


def annotate_phases(events: pl.DataFrame, rules: Sequence[Rule] = ()) -> pl.DataFrame:
    """Set phase, phase_id, cycle and the phase facts on every event (see module doc).

    ``rules``: extra ``(regex, phase)`` pairs tried before the built-in span
    mapping (``regex.search`` on range names), e.g. ``[(r"^step\\[TARGET_VERIFY", "verify")]``.

    Speed: the wide table is only read through a few boolean masks and narrow
    row subsets (range rows, host member rows, GPU/launch rows); results are
    written back with one ``with_columns`` (phase_id, phase, cycle, and only the
    fact columns whose phase range rows actually change).
    """
    ev = conform(events)
    n = ev.height
    bits = _kind_bits(ev.get_column("kind"))
    range_np = (bits & _R) > 0
    range_rows = np.flatnonzero(range_np)
    range_mask = series("", range_np)
    rsub = ev.select(["rank", "kind", "name", "pid", "tid", "stream", "start_ns", "dur_ns", *FACT_COLUMNS]).filter(
        range_mask
    )
    rsub = rsub.with_columns(series("_row", range_rows.astype(np.int64, copy=False)))
    names_tbl = _name_table(rsub.get_column("name"), rules)

    # --- phase range rows and facts markers -------------------------------------------
    cand = rsub.join(names_tbl, on="name", how="inner", suffix="_lab", maintain_order="left")
    cand = cand.with_columns([pl.coalesce(pl.col(f"{c}_lab"), pl.col(c)).alias(c) for c in FACT_COLUMNS]).drop(
        [f"{c}_lab" for c in FACT_COLUMNS]
    )  # label facts win over values already in the row
    markers = cand.filter(pl.col("_is_facts"))
    launch_np = (bits & _L) > 0
    launch_ranks = ev.select("rank").filter(series("", launch_np)).get_column("rank").unique().drop_nulls()
    host = cand.filter(~pl.col("_is_facts") & (pl.col("kind") == RANGE) & (pl.col("dur_ns") > 0))
    gpu_gr = cand.filter(
        ~pl.col("_is_facts")
        & (pl.col("kind") == GPU_RANGE)
        & (pl.col("dur_ns") > 0)
        & ~pl.col("rank").is_in(launch_ranks.implode())
    )

    inst_host = _instances(host, ["rank", "pid", "tid"], 0)
    n_host = int(inst_host.get_column("_id").n_unique()) if inst_host.height else 0
    inst_gpu = _instances(gpu_gr, ["rank", "stream"], n_host)
    inst_rows = pl.concat([inst_host, inst_gpu])  # one row per phase range row: _row, _id, _phase, facts
    inst = _instance_table(inst_rows, markers)

    # --- membership ----------------------------------------------------------------------
    pid_arr = np.full(n, -1, dtype=np.int64)
    own = np.zeros(n, dtype=bool)
    own_rows = np.zeros(0, dtype=np.int64)
    if inst_rows.height:
        own_rows = inst_rows.get_column("_row").to_numpy().astype(np.int64)
        pid_arr[own_rows] = inst_rows.get_column("_id").to_numpy()
        own[own_rows] = True

    # host rows: innermost host phase range open on the same (rank, pid, tid)
    if inst_host.height:
        hmask = ((bits & _H) > 0) & ev.get_column("tid").is_not_null().to_numpy() & ~own
        hrows = np.flatnonzero(hmask)
        hsub = ev.select("rank", "pid", "tid", "start_ns").filter(series("", hmask))
        both = pl.concat([inst_host.select("rank", "pid", "tid"), hsub.select("rank", "pid", "tid")])
        keys = _thread_key(both)
        del both
        ni = inst_host.height
        i_key, h_key = keys[:ni], keys[ni:]
        h_start = _i64(hsub.get_column("start_ns"))
        del hsub
        i_s = _i64(inst_host["start_ns"])
        i_e = i_s + _i64(inst_host["dur_ns"])
        i_id = inst_host["_id"].to_numpy().astype(np.int64)
        for k, sel_h in _groups(h_key, _distinct(i_key)):
            sel = i_key == k
            pid_arr[hrows[sel_h]] = _assign_one(i_s[sel], i_e[sel], i_id[sel], h_start[sel_h])
        _cross_thread(ev, bits, inst_host, i_s, i_e, i_id, pid_arr)

    # GPU rows: via (rank, correlation) from the launch row (first launch row per correlation)
    gpu_np = (bits & _G) > 0
    if gpu_np.any() and launch_np.any():
        has_corr = ev.get_column("correlation").is_not_null().to_numpy()
        lc_np = launch_np & has_corr
        gc_np = gpu_np & has_corr
        del has_corr
        lrows = np.flatnonzero(lc_np)
        grows = np.flatnonzero(gc_np)
        lsub = ev.select("rank", "correlation").filter(series("", lc_np))
        gsub = ev.select("rank", "correlation").filter(series("", gc_np))
        del lc_np, gc_np
        l_rank, l_corr = _ints(lsub.get_column("rank"), -1), _i64(lsub.get_column("correlation"))
        g_rank, g_corr = _ints(gsub.get_column("rank"), -1), _i64(gsub.get_column("correlation"))
        del lsub, gsub
        l_val = pid_arr[lrows]
        for r, sel_g in _groups(g_rank, _distinct(l_rank)):
            sel_l = l_rank == r
            pid_arr[grows[sel_g]] = _lookup(l_corr[sel_l], l_val[sel_l], g_corr[sel_g])
    # fallback: ranks without launch rows, via projected phase gpu ranges on the same stream
    if inst_gpu.height and gpu_np.any():
        fb = series("", gpu_np) & ~ev.get_column("rank").is_in(launch_ranks.implode()).fill_null(False)
        frows = np.flatnonzero(fb.to_numpy())
        fsub = ev.select("rank", "stream", "start_ns").filter(fb)
        f_rank, f_stream = _i64(fsub.get_column("rank"), -1), _i64(fsub.get_column("stream"), -1)
        f_start = _i64(fsub.get_column("start_ns"))
        gr, gs = _i64(inst_gpu["rank"], -1), _i64(inst_gpu["stream"], -1)
        g_s = _i64(inst_gpu["start_ns"])
        g_e = g_s + _i64(inst_gpu["dur_ns"])
        g_id = inst_gpu["_id"].to_numpy().astype(np.int64)
        pairs = inst_gpu.select(pl.col("rank").fill_null(-1), pl.col("stream").fill_null(-1)).unique(
            maintain_order=True
        )
        for r, st in pairs.iter_rows():
            m = (f_rank == r) & (f_stream == st)
            if not m.any():
                continue
            sel = (gr == r) & (gs == st)
            pid_arr[frows[m]] = _assign_one(g_s[sel], g_e[sel], g_id[sel], f_start[m])
    del bits
    return _write_back(ev, inst.sort("_id"), pid_arr, own_rows)


def _process_key(threads: pl.DataFrame) -> I64:
    """One int64 per (rank, pid) row (``_thread_key`` with the thread left out)."""
    return _thread_key(threads.select("rank", "pid", pl.lit(0, dtype=pl.Int64).alias("tid")))


def _cross_thread(
    ev: pl.DataFrame, bits: npt.NDArray[np.uint8], inst_host: pl.DataFrame, i_s: I64, i_e: I64, i_id: I64,
    pid_arr: I64,
) -> None:
    """Step 4b, in place on ``pid_arr``: a launch row on a thread with no open phase range
    joins the innermost phase range open at its start on another thread of the same
    process (rank, pid): the scheduler thread holds the range while a forward thread, or
    the autograd thread of a training step, launches."""
    lmask = ((bits & _L) > 0) & (pid_arr < 0) & ev.get_column("pid").is_not_null().to_numpy()
    if not lmask.any():
        return
    lrows = np.flatnonzero(lmask)
    lsub = ev.select("rank", "pid", "start_ns").filter(series("", lmask))
    keys = _process_key(pl.concat([inst_host.select("rank", "pid"), lsub.select("rank", "pid")], how="vertical_relaxed"))
    ni = inst_host.height
    i_key, l_key = keys[:ni], keys[ni:]
    l_start = _i64(lsub.get_column("start_ns"))
    for k, sel_l in _groups(l_key, _distinct(i_key)):
        sel = i_key == k
        pid_arr[lrows[sel_l]] = _assign_one(i_s[sel], i_e[sel], i_id[sel], l_start[sel_l])


def _instance_table(inst_rows: pl.DataFrame, markers: pl.DataFrame) -> pl.DataFrame:
    """One row per instance: facts coalesced over merged rows (outer first), then late markers."""
    inst = (
        inst_rows.sort(["_id", "start_ns", "dur_ns"], descending=[False, False, True])
        .group_by("_id", maintain_order=True)
        .agg(
            pl.col("rank").first(),
            pl.col("_phase").first(),
            *[pl.col(c).drop_nulls().first().alias(c) for c in FACT_COLUMNS],
        )
    )
    # late facts markers: same rank, phase, cycle
    if markers.height and inst.height:
        mk = (
            markers.filter(pl.col("cycle").is_not_null())
            .group_by(["rank", "_map_phase", "cycle"])
            .agg(*[pl.col(c).drop_nulls().last().alias(f"{c}_mk") for c in FACT_COLUMNS if c != "cycle"])
            .rename({"_map_phase": "_phase"})
        )
        inst = inst.join(mk, on=["rank", "_phase", "cycle"], how="left")
        inst = inst.with_columns(
            [pl.coalesce(pl.col(c), pl.col(f"{c}_mk")).alias(c) for c in FACT_COLUMNS if c != "cycle"]
        ).drop([f"{c}_mk" for c in FACT_COLUMNS if c != "cycle"])
    return inst


def _write_back(ev: pl.DataFrame, inst: pl.DataFrame, pid_arr: I64, own_rows: I64) -> pl.DataFrame:
    """phase_id/phase/cycle on member rows; instance facts on phase range rows (instance ids are 0..K-1).
    One ``with_columns``: the instance table's columns gathered by each row's instance id."""
    pid = pl.lit(series("_pid", pid_arr))
    member = pl.when(pid >= 0).then(pid)  # the row's instance id, null for no instance

    def of_instance(c: str) -> pl.Expr:
        col = inst.get_column(c)
        return pl.lit(col).gather(member) if inst.height else pl.lit(None, dtype=col.dtype)

    new = [member.alias("phase_id"), of_instance("_phase").alias("phase"),
           pl.coalesce(of_instance("cycle"), pl.col("cycle")).alias("cycle")]
    # facts on phase range rows: the instance's value (an instance's fact is null only when
    # all its range rows had none, so coalescing with the row's own value is exact)
    if own_rows.size:
        own = np.zeros(ev.height, dtype=bool)
        own[own_rows] = True
        is_own = pl.lit(series("_own", own))
        new += [pl.when(is_own).then(pl.coalesce(of_instance(c), pl.col(c))).otherwise(pl.col(c)).alias(c)
                for c in FACT_COLUMNS if c != "cycle"]
    return ev.with_columns(new)


def _distinct(a: I64) -> I64:
    """``np.unique(a)`` (sorted distinct values) without numpy.ma: numpy 2's plain ``np.unique`` asks
    ``np.ma.is_masked``, and that first use imports numpy.ma (~20 ms of a short ingest)."""
    s = np.sort(a)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _groups(keys: I64, wanted: I64) -> list[tuple[int, I64]]:
    """(key, positions in ``keys``) for each value of ``wanted`` present in ``keys``."""
    out: list[tuple[int, I64]] = []
    if keys.size == 0:
        return out
    for k in wanted.tolist():
        pos = np.flatnonzero(keys == k)
        if pos.size:
            out.append((int(k), pos))
    return out


def _thread_key(threads: pl.DataFrame) -> I64:
    """One int64 per (rank, pid, tid) row: packed when the parts fit, else a dense code."""
    if threads.height == 0:
        return np.zeros(0, dtype=np.int64)
    parts = [pl.col(c).cast(pl.Int64).fill_null(-1) for c in ("rank", "pid", "tid")]
    lo_hi = threads.select(*[p.min().alias(f"lo{i}") for i, p in enumerate(parts)],
                           *[p.max().alias(f"hi{i}") for i, p in enumerate(parts)]).row(0)
    bits = (14, 24, 24)
    if all(lo_hi[i] >= -1 and lo_hi[3 + i] < (1 << bits[i]) for i in range(3)):
        packed = (parts[0] + 1) * (1 << 50) + (parts[1] + 1) * (1 << 25) + (parts[2] + 1)
        out: I64 = threads.select(packed.alias("k")).get_column("k").to_numpy()
        return out
    return _key(threads, ["rank", "pid", "tid"])


def _lookup(keys: I64, vals: I64, queries: I64) -> I64:
    """vals of the first occurrence of each query in keys, else -1 (direct table when dense)."""
    lo = int(min(keys.min(), queries.min()))
    hi = int(max(keys.max(), queries.max()))
    if hi - lo + 1 <= 8 * (keys.size + queries.size) + (1 << 16):
        table = np.full(hi - lo + 1, -1, dtype=np.int64)
        table[(keys - lo)[::-1]] = vals[::-1]  # last write wins: the first occurrence
        return table[queries - lo]
    uk, first = np.unique(keys, return_index=True)
    pos = np.minimum(np.searchsorted(uk, queries), uk.size - 1)
    return np.where(uk[pos] == queries, vals[first][pos], -1)


def _assign_one(s: I64, e: I64, ids: I64, t: I64) -> I64:
    """Instance id of the innermost range (s, e) open at each t, else -1."""
    order = np.lexsort((-(e - s), s))
    s, e, ids = s[order], e[order], ids[order]
    idx = innermost(s, e, range_parents(s, e), t)
    return np.where(idx >= 0, ids[np.maximum(idx, 0)], -1)


def _instances(ranges: pl.DataFrame, key_cols: list[str], first_id: int) -> pl.DataFrame:
    """Number phase instances; same-phase ranges nested in each other share the outer's id.

    Returns one row per phase range row: _row, _id, _phase, rank, pid, tid, stream,
    start_ns, dur_ns and the fact columns.
    """
    cols = ["_row", "rank", "pid", "tid", "stream", "start_ns", "dur_ns", "_map_phase", *FACT_COLUMNS]
    if ranges.height == 0:
        have = ranges.schema
        schema = {c: have[c] for c in cols}
        return pl.DataFrame(schema=schema).rename({"_map_phase": "_phase"}).with_columns(
            pl.lit(None, dtype=pl.Int64).alias("_id")
        )
    r = ranges.select(cols).sort(["rank", "start_ns", "dur_ns"], descending=[False, False, True])
    key = _key(r, key_cols)
    s = _i64(r["start_ns"])
    e = s + _i64(r["dur_ns"])
    ph = r.get_column("_map_phase").to_list()
    # stable sort by key keeps (rank, start, longer-first) order inside each key
    order = np.argsort(key, kind="stable")
    root = np.arange(r.height, dtype=np.int64)
    _, lo, hi = _group_bounds(key[order])
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        idx = order[a:b]
        par = range_parents(s[idx], e[idx])
        for j in range(idx.size):  # parents come first, so their root is final
            p = int(par[j])
            # walk up to the nearest enclosing range of the same phase
            while p >= 0 and ph[idx[p]] != ph[idx[j]]:
                p = int(par[p])
            if p >= 0:
                root[idx[j]] = root[idx[p]]
    # ids in (rank, start, longer-first) order of the root ranges
    is_root = root == np.arange(r.height)
    new_id = np.full(r.height, -1, dtype=np.int64)
    new_id[is_root] = np.arange(int(is_root.sum()), dtype=np.int64) + first_id
    ids = new_id[root]
    return r.rename({"_map_phase": "_phase"}).with_columns(series("_id", ids))


__all__ = [
    "annotate_phases",
    "innermost",
    "range_parents",
    "unique_phase_ids",
]
