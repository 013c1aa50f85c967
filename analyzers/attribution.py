"""Where phase time went: exclusive per-instance buckets, facts, queue delay.

Pure functions over polars frames (no printing). ``attribute_instances`` gives
one row per phase instance (the ``--by cycle`` view); ``by_rank``, ``by_phase``,
``by_seq`` and ``stragglers`` (``analyzers.attribution_views``) aggregate it. Definitions: docs/attribution.md;
the walk itself is ``analyzers.buckets``.

Instance columns: phase, rank, phase_id, cycle, the facts (batch_size,
num_tokens, seq_len, graphed, accept_len), host_start_ns, host_ns,
window_start_ns, window_end_ns, gpu_window_ns, ``<bucket>_ns`` for every bucket
(summing to gpu_window_ns), queue_delay_ns, between_ns (GPU time from this
instance's window end to the next instance's window start on the rank, any
phase), overlapped_comm_ns, gpu_events, launches (eager launch calls +
graph launches), eager_launches, graph_launches, allreduce_ns (allreduce
kernel time, overlapped or not), allreduce_wait_ns, allreduce_transfer_ns,
cross_thread_events (GPU events of the instance whose launch call ran on another
thread than its range: docs/attribution.md 1), graphed_label_conflict (the
collector's graphed label contradicts the launches:
labelled graphed with eager launches and no graph launch, or the reverse).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.finalize.categories import CATEGORIES
from tracekit.finalize.collectives import match_arrays, match_collectives
from tracekit.finalize.phases import FACT_COLUMNS
from tracekit.schema import GPU_RANGE, KERNEL, LAUNCH, MEMCPY, MEMSET, RANGE

from .attribution_native import attribute_ranks, kind_codes
from .attribution_views import (
    BUCKET_COLUMNS,
    SUM_COLUMNS,
    by_phase,
    by_rank,
    by_seq,
    check_sums,
    stragglers,
)
from .buckets import BUCKETS, DEFAULT_LAUNCH_LATENCY_NS, NB, Walk, walk
from .phase_rows import instance_head, phase_instances
from .robust import outliers
from .timeline import first_of_launch, launch_ends, queue_delay
from .whole_trace import WHOLE_TRACE_PHASE, is_whole_trace, whole_trace

I64 = npt.NDArray[np.int64]

# category -> bucket: every category of the rule vocabulary (tracekit.finalize.categories.CATEGORIES,
# the only values a rule can give) is the bucket of the same name
CATEGORY_BUCKET: Final[dict[str, str]] = {c: c for c in CATEGORIES}
_CODE: Final = {b: i for i, b in enumerate(BUCKETS)}


# --- preparation ------------------------------------------------------------------------------


def _phase_ranges(events: pl.DataFrame) -> pl.DataFrame:
    """The phase ranges (narrow: kind, phase_id, rank, phase) of a table."""
    return events.select("kind", "phase_id", "rank", "phase").filter(
        pl.col("kind").is_in([RANGE, GPU_RANGE]) & pl.col("phase_id").is_not_null()
    )


def prepare(events: pl.DataFrame, phase: str | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Resolve the phase selection over a finalized table (``tracekit.finalize``: a run as
    ``tracekit.store.load_run`` gives it; readers never re-annotate).

    ``phase``: None (every phase), a phase name, a regex over phase names, or a
    regex over range names (those ranges then become the instances of a phase
    named by the regex: ``select_ranges``, a selection of this analysis; the stored
    phases are not changed). A table with no phase
    ranges at all is attributed as a whole: one instance of phase ``trace`` per rank
    (``analyzers.whole_trace``). Returns (events, selected phase names). Raises
    AnalysisError when nothing matches.
    """
    present = phase_names(events)
    if not present and phase in (None, WHOLE_TRACE_PHASE):
        whole = whole_trace(events)
        if whole is events:
            raise AnalysisError("no phase ranges found (no tracekit labels, no SGLang step[...] spans) and no GPU events")
        return whole, [WHOLE_TRACE_PHASE]
    hits = select_phases(present, phase)
    if hits:
        return events, hits
    name = str(phase)  # not None: select_phases returns every present phase for None
    ev2 = select_ranges(events, re.compile(name), name)
    if not ev2.filter((pl.col("kind") == RANGE) & (pl.col("phase") == phase)).height:
        found = ", ".join(present) if present else "none"
        raise AnalysisError(f"no phase or range name matches {phase!r} (phases found: {found})")
    return ev2, [name]


def phase_names(events: pl.DataFrame) -> list[str]:
    """The phases of a table's phase ranges, sorted."""
    return sorted(_phase_ranges(events).get_column("phase").drop_nulls().unique().to_list())


def select_phases(present: Sequence[str], phase: str | None) -> list[str]:
    """``prepare``'s selection among the ``present`` phases: all (None), the one named, or those a regex
    matches in full; [] when none does (``prepare`` then tries range names). AnalysisError: not a regex."""
    if phase is None:
        return list(present)
    if phase in present:
        return [phase]
    try:
        pat = re.compile(phase)
    except re.error as exc:
        raise AnalysisError(f"--phase {phase!r} is neither a phase name nor a valid regex ({exc})") from None
    return [p for p in present if pat.fullmatch(p)]


def select_ranges(events: pl.DataFrame, pattern: re.Pattern[str], name: str) -> pl.DataFrame:
    """The table with the ranges whose names ``pattern`` searches as the instances of a phase
    ``name`` (``attribute --phase 'ProfilerStep#\\d+'``): the membership rules of
    ``tracekit.finalize.membership`` with this one rule tried first, the trace's own after it,
    on the analysis' copy of the table."""
    from tracekit.finalize.membership import annotate_phases
    from tracekit.finalize.pipeline import span_rules

    return annotate_phases(events, rules=span_rules(events, [(pattern, name)]))


_COLL_COLS: Final = ("kind", "group", "coll_seq", "rank", "name", "coll_op", "phase", "phase_id", "start_ns", "dur_ns")


def _bools(s: pl.Series) -> npt.NDArray[np.bool_]:
    return (s.fill_null(False) if s.null_count() else s).to_numpy()


def _full(s: pl.Series, fill: int) -> npt.NDArray[np.int64] | npt.NDArray[np.int32]:
    """The column as numpy (zero-copy when it has no nulls), nulls as ``fill``."""
    return (s.fill_null(fill) if s.null_count() else s).to_numpy()  # type: ignore[no-any-return]


def _i64(a: npt.NDArray[np.int64] | npt.NDArray[np.int32]) -> I64:
    return a.astype(np.int64, copy=False)


def _instance_of(dense: I64, pid: I64) -> I64:
    """Instance index per phase id through ``dense`` (its last entry is -1: no instance);
    -1 for ids that are no instance (fill value -1, unknown or out of range)."""
    last = dense.size - 1
    if pid.size and int(pid.min()) >= -1:  # -1 indexes the last entry: no branches needed
        return dense[np.minimum(pid, last)]
    return dense[np.where((pid >= 0) & (pid <= last), pid, last)]


def _coll_rows(events: pl.DataFrame) -> pl.DataFrame:
    """The collective kernels of ``events`` (narrow columns), for match_collectives."""
    return events.select(_COLL_COLS).filter(pl.col("coll_seq").is_not_null())


def matched(events: pl.DataFrame) -> pl.DataFrame:
    """``match_collectives`` over the collective kernels of an annotated table."""
    return match_collectives(_coll_rows(events))


def _codes(events: pl.DataFrame, gmask: npt.NDArray[np.bool_], g_mem: npt.NDArray[np.bool_]) -> npt.NDArray[np.int8]:
    """Bucket code per GPU event: category (any non-null unknown one is ``other``), memory for
    copies. A kernel without a category (a run finalize never saw): AnalysisError."""
    col = events.get_column("category").filter(pl.Series(gmask))
    names = list(CATEGORY_BUCKET)
    lut = np.array([_CODE[CATEGORY_BUCKET[k]] for k in names] + [_CODE["other"], -1], dtype=np.int8)
    # Enum cast: unknown categories become null; tell them from missing ones by is_null
    enum = col.cast(pl.Enum(names), strict=False).to_physical()
    if enum.null_count():
        phys = enum.fill_null(len(names)).to_numpy()
        if col.null_count():
            phys = np.where(col.is_null().to_numpy(), len(names) + 1, phys)
        codes: npt.NDArray[np.int8] = lut[phys]
    else:
        codes = lut[enum.to_numpy()]
    if g_mem.any():
        codes[g_mem] = _CODE["memory"]
    missing = np.flatnonzero(codes < 0)
    if missing.size:
        row = int(np.flatnonzero(gmask)[missing[0]])
        rank = events.get_column("rank")[row]
        raise AnalysisError(f"{missing.size} GPU events have no category (the run was not finalized by this "
                            "tracekit: `tracekit upgrade` finalizes it)", rank=None if rank is None else int(rank))
    return codes


def _allreduce_rows(acc: _Acc) -> tuple[I64, I64, I64, I64, npt.NDArray[np.bool_]]:
    """(phase_id, dur, wait, transfer, matched) of the allreduce kernels with a phase id, from
    the collective kernels the chunks collected: the same numbers as ``matched(events)``
    (match_collectives) without building its frame."""
    num = list(acc.coll_num[0]) if len(acc.coll_num) == 1 else [np.concatenate(c) for c in zip(*acc.coll_num, strict=True)]
    seqn, rk, start, dur, pid = num
    if acc.coll_codes is not None:  # the compiled pass coded group and op already
        g, op, is_ar = acc.coll_codes
    else:
        sub = pl.concat(acc.coll_str) if len(acc.coll_str) > 1 else acc.coll_str[0]
        codes = sub.select(
            pl.col("group").fill_null("").rank("dense").cast(pl.Int64).alias("g"),
            pl.col("coll_op").fill_null("?").rank("dense").cast(pl.Int64).alias("op"),
            (pl.col("coll_op") == "allreduce").fill_null(False).alias("ar"),
        )
        g, op = codes.get_column("g").to_numpy(), codes.get_column("op").to_numpy()
        is_ar = codes.get_column("ar").to_numpy()
    wait, ok = match_arrays(g, op, seqn, rk, start, dur)
    keep = is_ar & (pid >= 0)
    return pid[keep], dur[keep], wait[keep], (dur - wait)[keep], ok[keep]


class _Acc:
    """Per-instance sums over the rank chunks (each instance lives in one chunk)."""

    def __init__(self, K: int) -> None:
        self.buckets = np.zeros((K, NB), dtype=np.int64)
        self.ws = np.zeros(K, dtype=np.int64)
        self.we = np.zeros(K, dtype=np.int64)
        self.ov = np.zeros(K, dtype=np.int64)
        self.n_ev = np.zeros(K, dtype=np.int64)
        self.qd = np.zeros(K, dtype=np.int64)
        self.graph_l = np.zeros(K, dtype=np.int64)
        self.eager_l = np.zeros(K, dtype=np.int64)
        self.cross = np.zeros(K, dtype=np.int64)
        # collective kernels (group, coll_op) and (coll_seq, rank, start, dur, phase_id), when wanted
        self.collect = False
        self.coll_str: list[pl.DataFrame] = []
        self.coll_num: list[tuple[I64, I64, I64, I64, I64]] = []
        # (group code, op code, is allreduce) of those kernels, when the compiled pass made them
        self.coll_codes: tuple[I64, I64, npt.NDArray[np.bool_]] | None = None


_CHUNK_ROWS: Final = 1 << 20


def _rank_chunks(events: pl.DataFrame) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) holding whole ranks (consecutive ranks merged up to ~1 M rows);
    the whole table when ranks are not contiguous and sorted."""
    n = events.height
    rank = _full(events.get_column("rank"), -1)
    if n == 0 or not np.all(rank[1:] >= rank[:-1]):
        return [(0, n)]
    brk = (np.flatnonzero(rank[1:] != rank[:-1]) + 1).tolist()
    out: list[tuple[int, int]] = []
    lo = 0
    for b in [*brk, n]:
        if b - lo >= _CHUNK_ROWS or b == n:
            out.append((lo, b))
            lo = b
    return out


def _attribute_chunk(
    events: pl.DataFrame,
    dense: I64,
    K: int,
    launch_latency_ns: int,
    i_rank: I64,
    host_start: I64,
    is_host: npt.NDArray[np.bool_],
    acc: _Acc,
    i_tid: I64 | None = None,
) -> None:
    """Walk, queue delay and launch counts of the instances of the ranks in ``events``, into ``acc``."""
    # kinds: two string comparisons over the table, the rest only on the other rows
    kind = events.get_column("kind")
    is_k = _bools(kind == KERNEL)
    lmask = _bools(kind == LAUNCH)
    others = np.flatnonzero(~(is_k | lmask))
    gmask = is_k
    g_mem = np.zeros(0, dtype=bool)
    if others.size:
        mem_rows = others[_bools(kind.gather(others).is_in([MEMCPY, MEMSET]))]
        if mem_rows.size:
            gmask = is_k.copy()
            gmask[mem_rows] = True
            g_mem = ~is_k[gmask]
    if g_mem.size == 0:
        g_mem = np.zeros(int(np.count_nonzero(gmask)), dtype=bool)
    # numeric columns once (zero-copy where they have no nulls), GPU rows taken once
    start_all = _i64(_full(events.get_column("start_ns"), 0))
    dur_all = _i64(_full(events.get_column("dur_ns"), 0))
    pid_col = _i64(_full(events.get_column("phase_id"), -1))
    corr_s = events.get_column("correlation")
    corr_all = _i64(_full(corr_s, 0))
    has_corr = ~_bools(corr_s.is_null()) if corr_s.null_count() else np.ones(events.height, dtype=bool)
    rank_raw = _full(events.get_column("rank"), -1)

    g_idx = np.flatnonzero(gmask)  # index arrays: much faster than boolean masks to take with
    l_idx = np.flatnonzero(lmask & has_corr)
    g_rank = _i64(rank_raw[g_idx])
    g_start = start_all[g_idx]
    g_end = g_start + dur_all[g_idx]
    g_pid = pid_col[g_idx]
    g_inst = _instance_of(dense, g_pid)
    mem = g_inst >= 0
    g_corr, g_has = corr_all[g_idx], has_corr[g_idx]
    launch_end = launch_ends(
        _i64(rank_raw[l_idx]), corr_all[l_idx], start_all[l_idx] + dur_all[l_idx], g_rank, g_corr, g_has
    )
    if i_tid is not None:  # GPU events whose launch ran on another thread than the instance's range
        l_inst_c = _instance_of(dense, pid_col[l_idx])
        tid_all = _i64(_full(events.get_column("tid"), -1))
        l_cross = ((l_inst_c >= 0) & (tid_all[l_idx] != i_tid[np.maximum(l_inst_c, 0)])).astype(np.int64)
        g_cross = launch_ends(_i64(rank_raw[l_idx]), corr_all[l_idx], l_cross, g_rank, g_corr, g_has) == 1
        acc.cross += np.bincount(g_inst[g_cross & mem], minlength=K)[:K]
    codes = _codes(events, gmask, g_mem)
    g_stream = _i64(_full(events.get_column("stream"), -1))[g_idx]
    if mem.all():  # every GPU event belongs to an instance: no copies
        first = first_of_launch(g_rank, g_corr, g_has, g_start)
        w = walk(g_inst, g_start, g_end, codes, launch_end, K, launch_latency_ns, first, g_stream)
    else:
        first = first_of_launch(g_rank[mem], g_corr[mem], g_has[mem], g_start[mem])
        w = walk(
            g_inst[mem], g_start[mem], g_end[mem], codes[mem], launch_end[mem], K, launch_latency_ns, first, g_stream[mem]
        )
    has_gpu = w.n_events > 0
    acc.buckets += w.buckets
    acc.ws += w.window_start
    acc.we += w.window_end
    acc.ov += w.overlapped_comm
    acc.n_ev += w.n_events
    acc.qd += queue_delay(g_rank, g_start, g_end, i_rank, w.window_start, host_start, has_gpu & is_host)

    # launch counts per instance (graph launches: graph flag, else the cudaGraphLaunch name)
    l_rows = np.flatnonzero(lmask & (pid_col >= 0))
    graph_s = events.get_column("graph")
    l_graph = _bools(graph_s)[l_rows]
    if graph_s.null_count():
        unknown = np.flatnonzero(graph_s.is_null().to_numpy()[l_rows])
        names = events.get_column("name").gather(l_rows[unknown])
        l_graph[unknown] = names.str.contains("GraphLaunch").fill_null(False).to_numpy()
    l_pid = pid_col[l_rows]
    l_inst = _instance_of(dense, l_pid)
    ok = l_inst >= 0
    acc.graph_l += np.bincount(l_inst[ok & l_graph], minlength=K)[:K]
    acc.eager_l += np.bincount(l_inst[ok & ~l_graph], minlength=K)[:K]

    if acc.collect:
        seq_s = events.get_column("coll_seq")
        coll = is_k & _bools(seq_s.is_not_null()) if seq_s.null_count() else is_k
        rows = np.flatnonzero(coll)
        sub = events.select("group", "coll_op", "coll_seq").filter(pl.Series(coll))
        acc.coll_str.append(sub.select("group", "coll_op"))
        seq = _i64(_full(sub.get_column("coll_seq"), 0))
        acc.coll_num.append((seq, _i64(rank_raw[rows]), start_all[rows], dur_all[rows], pid_col[rows]))


# --- the instance table ------------------------------------------------------------------------


def attribute_instances(
    events: pl.DataFrame,
    phases: Sequence[str] | None = None,
    *,
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
    collectives: pl.DataFrame | None = None,
    has_tid: bool | None = None,
) -> pl.DataFrame:
    """One row per phase instance (module doc) of an annotated table; ``phases`` filters.

    ``collectives``: ``matched(events)`` when the caller has it already. ``has_tid``: whether the run
    has host instances and thread ids (cross-thread counts), when ``events`` is one rank of it
    (``analyzers.ranked``); None: from ``events``.
    """
    kc = kind_codes(events)  # None: the reference path
    src = events.select("kind", "phase", "phase_id", "rank", "pid", "tid", "start_ns", "dur_ns", *FACT_COLUMNS)
    if kc is not None:  # only the range rows can be instances: no string filter over the table
        src = src.gather(kc.range_rows())
    inst = phase_instances(src).sort(["rank", "start_ns", "phase_id"])
    K = inst.height
    pid_all = inst.get_column("phase_id").to_numpy().astype(np.int64)
    max_id = int(pid_all.max()) + 1 if K else 0
    dense = np.full(max_id + 1, -1, dtype=np.int64)
    dense[pid_all] = np.arange(K, dtype=np.int64)

    i_rank = inst.get_column("rank").to_numpy().astype(np.int64)
    host_start = inst.get_column("start_ns").to_numpy().astype(np.int64)
    is_host = (inst.get_column("source") == "host").to_numpy()
    # the range's thread, for counting cross-thread launches (host instances only: -2 never matches)
    i_tid = np.where(is_host, _i64(_full(inst.get_column("tid"), -2)), -2).astype(np.int64)
    if has_tid is None:
        has_tid = bool(is_host.any()) and events.get_column("tid").null_count() < events.height
    # rank by rank (a rank's rows are contiguous in the canonical order): temporaries stay
    # small enough for the allocator to reuse them, and per-rank lookups need no slicing
    collect = collectives is None and events.get_column("coll_seq").null_count() < events.height
    acc = _Acc(K)
    acc.collect = collect
    if not attribute_ranks(events, dense, launch_latency_ns, i_rank, host_start, is_host, i_tid if has_tid else None, acc, kc):
        # the numpy reference path (TRACEKIT_PURE=1, or a table the compiled pass does not take)
        acc = _Acc(K)
        acc.collect = collect
        for lo, hi in _rank_chunks(events):
            part = events if (lo, hi) == (0, events.height) else events.slice(lo, hi - lo)
            _attribute_chunk(part, dense, K, launch_latency_ns, i_rank, host_start, is_host, acc, i_tid if has_tid else None)
    w = Walk(acc.buckets, acc.ws, acc.we, acc.ov, acc.n_ev)
    has_gpu = w.n_events > 0
    qd, graph_l, eager_l = acc.qd, acc.graph_l, acc.eager_l

    # GPU time between consecutive instances of a rank (any phase), by window start
    between = np.zeros(K, dtype=np.int64)
    for r in np.unique(i_rank).tolist():
        idx = np.flatnonzero((i_rank == r) & has_gpu)
        if idx.size < 2:
            continue
        idx = idx[np.argsort(w.window_start[idx], kind="stable")]
        reach = np.maximum.accumulate(w.window_end[idx])
        between[idx[:-1]] = np.maximum(w.window_start[idx[1:]] - reach[:-1], 0)

    # allreduce kernel time, wait and transfer (collectives matched across ranks)
    ar = np.zeros((3, K), dtype=np.int64)
    unmatched = np.zeros(K, dtype=bool)
    if collectives is not None:
        m = collectives.filter((pl.col("coll_op") == "allreduce") & pl.col("phase_id").is_not_null())
        m_pid = _i64(m.get_column("phase_id").to_numpy())
        m_vals = [_i64(_full(m.get_column(c), 0)) for c in ("dur_ns", "wait_ns", "transfer_ns")]
        m_ok = _bools(m.get_column("matched"))
    elif acc.collect:
        m_pid, d, wt, tr, m_ok = _allreduce_rows(acc)
        m_vals = [d, np.where(m_ok, wt, 0), np.where(m_ok, tr, 0)]
    else:
        m_pid = np.zeros(0, dtype=np.int64)
    if m_pid.size:
        m_inst = _instance_of(dense, m_pid)
        okm = m_inst >= 0
        for j, v in enumerate(m_vals):
            ar[j] = np.rint(np.bincount(m_inst[okm], weights=v[okm].astype(np.float64), minlength=K)[:K]).astype(np.int64)
        # unmatched collectives: wait/transfer unknown, null them
        unmatched[m_inst[okm & ~m_ok]] = True

    graphed_derived = pl.Series(np.where(graph_l + eager_l > 0, graph_l > 0, False))
    has_launches = pl.Series((graph_l + eager_l) > 0)
    cols: dict[str, pl.Series] = {
        "host_start_ns": pl.Series(host_start),
        "window_start_ns": pl.Series(np.where(has_gpu, w.window_start, 0)),
        "window_end_ns": pl.Series(np.where(has_gpu, w.window_end, 0)),
        "gpu_window_ns": pl.Series(w.window_ns),
        **{c: pl.Series(w.buckets[:, j]) for j, c in enumerate(BUCKET_COLUMNS)},
        "queue_delay_ns": pl.Series(qd),
        "between_ns": pl.Series(between),
        "overlapped_comm_ns": pl.Series(w.overlapped_comm),
        "gpu_events": pl.Series(w.n_events),
        "launches": pl.Series(graph_l + eager_l),
        "eager_launches": pl.Series(eager_l),
        "graph_launches": pl.Series(graph_l),
        "cross_thread_events": pl.Series(acc.cross),
        "allreduce_kernel_ns": pl.Series(ar[0]),
        "allreduce_wait_ns": pl.Series(ar[1]),
        "allreduce_transfer_ns": pl.Series(ar[2]),
    }
    # the collector's graphed label checked against the launches: labelled graphed with eager
    # launches and no graph launch, or labelled eager with graph launches and no eager launch
    label = pl.col("graphed")
    g_l, e_l = pl.Series(graph_l), pl.Series(eager_l)
    conflict = (
        label.is_not_null()
        & ((label & (e_l > 0) & (g_l == 0)) | (~label & (g_l > 0) & (e_l == 0)))
    ).fill_null(False)
    out = inst.with_columns(conflict.alias("graphed_label_conflict")).with_columns(
        pl.when(pl.col("graphed").is_not_null())
        .then(pl.col("graphed"))
        .when(has_launches)
        .then(graphed_derived)
        .otherwise(None)
        .alias("graphed"),
        **{k: v.cast(pl.Int64) for k, v in cols.items()},
    ).with_columns(
        pl.when(pl.Series(unmatched)).then(None).otherwise(pl.col("allreduce_wait_ns")).alias("allreduce_wait_ns"),
        pl.when(pl.Series(unmatched)).then(None).otherwise(pl.col("allreduce_transfer_ns")).alias("allreduce_transfer_ns"),
    )
    if phases is not None:
        out = out.filter(pl.col("phase").is_in(list(phases)))
    return out.select(
        *instance_head(),
        *BUCKET_COLUMNS,
        *SUM_COLUMNS[len(BUCKET_COLUMNS) + 2 :],
        "graphed_label_conflict",
    )


def attribute_report(
    events: pl.DataFrame,
    phase: str | None = None,
    rank: int | None = None,
    *,
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
) -> dict[str, pl.DataFrame]:
    """Everything ``tracekit attribute`` shows, as frames.

    Keys: instances (by cycle), by_rank, by_phase, by_seq, stragglers, issues
    (one ``issue`` per line: unmatched collectives), outliers (``analyzers.robust.outliers``
    of the GPU window per (phase, rank), start_ns = window start). ``rank`` restricts the
    views (collectives are still matched over every rank).
    """
    ev, phases = prepare(events, phase)
    coll = matched(ev)
    inst = only_rank(attribute_instances(ev, phases, launch_latency_ns=launch_latency_ns, collectives=coll), rank,
                     phases)
    strag = stragglers(ev, inst, collectives=coll, launch_latency_ns=launch_latency_ns)
    return attribution_tables(inst, strag, coll, phases == [WHOLE_TRACE_PHASE] and is_whole_trace(ev))


def only_rank(inst: pl.DataFrame, rank: int | None, phases: Sequence[str]) -> pl.DataFrame:
    """The instances of ``rank`` (None: all); AnalysisError naming the ranks with instances when it has none."""
    if rank is None:
        return inst
    ranks = sorted(inst.get_column("rank").unique().to_list())
    if rank not in ranks:
        raise AnalysisError(f"no {'/'.join(phases)} instances on this rank (ranks with instances: {ranks})", rank=rank)
    return inst.filter(pl.col("rank") == rank)


def attribution_tables(inst: pl.DataFrame, strag: pl.DataFrame, coll: pl.DataFrame,
                       whole: bool) -> dict[str, pl.DataFrame]:
    """``attribute_report``'s frames from its parts: the instances (of the selected rank), the phases'
    stragglers, the matched collectives, whether the run was attributed as a whole."""
    from tracekit.finalize.collectives import collective_issues

    issues = collective_issues(coll)
    return {
        "instances": inst,
        "by_rank": by_rank(inst),
        "by_phase": by_phase(inst),
        "by_seq": by_seq(inst),
        "stragglers": strag,
        "issues": pl.DataFrame({"issue": issues}, schema={"issue": pl.String}),
        "outliers": outliers(inst.filter(pl.col("gpu_events") > 0), "gpu_window_ns", "window_start_ns"),
        "whole_trace": pl.DataFrame({"whole_trace": [whole]}),
    }


__all__ = [
    "BUCKETS",
    "BUCKET_COLUMNS",
    "NB",
    "attribute_instances",
    "attribute_report",
    "attribution_tables",
    "by_phase",
    "by_rank",
    "by_seq",
    "check_sums",
    "matched",
    "only_rank",
    "phase_names",
    "prepare",
    "select_phases",
    "select_ranges",
    "stragglers",
]
