"""Collective kernels: recognise them, give them a communicator and an order, match across ranks.

``annotate_collectives`` sets, on every communication kernel:

- ``coll_op`` (when missing) from the kernel name: allreduce, allgather,
  reducescatter, broadcast, sendrecv, alltoall, dispatch, combine;
- ``group``: the c10d process-group name (``"Process Group Name"`` in the
  kernel's args) when present; otherwise a key derived from the stream, so
  NCCL launched outside c10d (SGLang's pynccl inside CUDA graphs) and custom
  allreduce kernels group the same way on every rank: ``stream:<id>`` when the
  ranks use the same stream ids for such kernels, else ``stream#<k>`` (the k-th
  such stream of the rank, by id);
- ``coll_seq``: 0-based order by start time within (rank, group).

Communication kernels are those whose ``category`` is one of COMM_CATEGORIES
(categories.py); kernels with no category are recognised by name
(``is_comm_name``), which covers NCCL and the custom / fused / symmetric-memory
allreduce and DeepEP kernels listed in DESIGN.md and the SGLang reference.

``match_collectives`` pairs the k-th collective of a group across ranks and
computes, per (group, coll_seq, rank): arrival (= kernel start), the latest
arrival over the ranks, ``wait_ns`` = latest arrival - own arrival clipped to
[0, dur] and ``transfer_ns`` = dur - wait. A group whose per-rank counts differ,
or whose k-th collective has different ops on different ranks, cannot be
matched by order: its rows are kept with ``matched = False``, null wait and
transfer, and the reason in ``issue`` (``collective_issues`` lists them once).
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.finalize.categories import COMM_CATEGORIES
from tracekit.schema import KERNEL, conform

_COMM_RE: Final = re.compile(
    r"nccl(Dev)?Kernel|^nccl|cross_device_reduce|AllReduceKernel|all_reduce_\w*(shot|kernel)"
    r"|allreduce_fusion|multimem|allreduce_1shot|one_shot_all_reduce|two_shot_all_reduce"
    r"|deep_ep::|dpsk::ep|all_gather_kernel|reduce_scatter_kernel"
)
# (pattern, op) in order; matched with re.search on the kernel name
_OP_RULES: Final[list[tuple[re.Pattern[str], str]]] = [
    (re.compile(r"ReduceScatter|reduce_?scatter", re.I), "reducescatter"),
    (re.compile(r"AllGather|all_?gather", re.I), "allgather"),
    (re.compile(r"AllToAll|all_?to_?all", re.I), "alltoall"),
    (re.compile(r"Broadcast", re.I), "broadcast"),
    (re.compile(r"SendRecv|ncclDevKernel_(Send|Recv)|ncclKernel_(Send|Recv)"), "sendrecv"),
    (re.compile(r"(deep_ep::|dpsk::ep).*(dispatch)", re.I), "dispatch"),
    (re.compile(r"(deep_ep::|dpsk::ep).*(combine)", re.I), "combine"),
    (re.compile(r"AllReduce|all_?reduce|cross_device_reduce|multimem", re.I), "allreduce"),
]
_PG_NAME: Final = r'"Process Group Name"\s*:\s*"([^"]*)"'


def is_comm_name(name: str) -> bool:
    """True for a communication kernel name (NCCL, custom/fused allreduce, DeepEP, ...)."""
    return _COMM_RE.search(name) is not None


def op_of_name(name: str) -> str | None:
    """The collective op a communication kernel name implies, or None."""
    for pat, op in _OP_RULES:
        if pat.search(name):
            return op
    return None


def comm_mask(events: pl.DataFrame) -> pl.Series:
    """Boolean mask of the communication kernels of ``events``.

    The category decides where it is set; names are looked at (once per distinct
    name) only for kernels without a category.
    """
    kind = events.get_column("kind") == KERNEL
    cat = events.get_column("category") if "category" in events.columns else None
    if cat is None:
        need = kind
        by_cat = pl.Series([False]).new_from_index(0, events.height)
    else:
        need = kind & cat.is_null()
        by_cat = cat.is_in(list(COMM_CATEGORIES)).fill_null(False)
    mask = (kind & by_cat).alias("comm")
    if need.any():
        names = events.get_column("name").cast(pl.String)
        cand = names.filter(need).unique().drop_nulls().to_list()
        comm_names = [n for n in cand if is_comm_name(n)]
        if comm_names:
            mask = mask | (need & names.is_in(comm_names).fill_null(False))
    return mask.alias("comm")


def _scatter(col: pl.Series, rows: pl.Series, values: pl.Series) -> pl.Series:
    """``col`` with ``values`` at ``rows`` (a copy)."""
    out = col.clone()
    out.scatter(rows, values.cast(col.dtype))
    return out


def annotate_collectives(events: pl.DataFrame) -> pl.DataFrame:
    """Set coll_op (if missing), group and coll_seq on communication kernels (module doc)."""
    ev = conform(events)
    mask = comm_mask(ev)
    if not mask.any():
        return ev
    c = (
        ev.select(["rank", "name", "stream", "args", "coll_op", "group", "start_ns"])
        .with_row_index("_row")
        .filter(mask)
    )
    names = c.get_column("name").unique().to_list()
    ops = pl.DataFrame({"name": names, "_op": [op_of_name(n) for n in names]}, schema={"name": pl.String, "_op": pl.String})
    c = c.join(ops, on="name", how="left").with_columns(
        pl.coalesce(pl.col("coll_op"), pl.col("_op")).alias("coll_op"),
        pl.coalesce(pl.col("group"), pl.col("args").str.extract(_PG_NAME, 1)).alias("group"),
    )
    # stream-derived keys for kernels without a communicator name
    no_group = c.filter(pl.col("group").is_null())
    if no_group.height:
        per_rank = no_group.group_by("rank").agg(pl.col("stream").unique().sort().alias("streams"))
        same_ids = per_rank.get_column("streams").n_unique() == 1
        if same_ids:
            key = pl.format("stream:{}", pl.col("stream").fill_null(-1))
        else:
            key = pl.format("stream#{}", pl.col("stream").rank("dense").over("rank").cast(pl.Int64) - 1)
        c = c.with_columns(pl.when(pl.col("group").is_null()).then(key).otherwise(pl.col("group")).alias("group"))
    c = c.sort(["rank", "group", "start_ns", "_row"]).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).over(["rank", "group"]).alias("coll_seq")
    )
    rows = c.get_column("_row")
    return ev.with_columns(
        _scatter(ev.get_column("coll_op"), rows, c.get_column("coll_op")),
        _scatter(ev.get_column("group"), rows, c.get_column("group")),
        _scatter(ev.get_column("coll_seq"), rows, c.get_column("coll_seq")),
    )


MATCH_SCHEMA: Final[dict[str, pl.DataType]] = {
    "group": pl.String(),
    "coll_seq": pl.Int64(),
    "rank": pl.Int32(),
    "name": pl.String(),
    "coll_op": pl.String(),
    "phase": pl.String(),
    "phase_id": pl.Int64(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    "n_ranks": pl.UInt32(),
    "group_ranks": pl.UInt32(),
    "last_arrival_ns": pl.Int64(),
    "last_rank": pl.Int32(),
    "wait_ns": pl.Int64(),
    "transfer_ns": pl.Int64(),
    "matched": pl.Boolean(),
    "issue": pl.String(),
}


def match_collectives(events: pl.DataFrame) -> pl.DataFrame:
    """One row per (group, coll_seq, rank) with arrival, latest arrival, wait and transfer.

    ``events`` must have been through ``annotate_collectives`` (kernels with a
    ``coll_seq``). See the module doc for the matching and mismatch rules.
    """
    c = events.filter((pl.col("kind") == KERNEL) & pl.col("coll_seq").is_not_null()).select(
        "group",
        "coll_seq",
        "rank",
        "name",
        "coll_op",
        "phase" if "phase" in events.columns else pl.lit(None, pl.String).alias("phase"),
        "phase_id" if "phase_id" in events.columns else pl.lit(None, pl.Int64).alias("phase_id"),
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        "dur_ns",
    )
    if c.height == 0:
        return pl.DataFrame(schema=MATCH_SCHEMA)
    # dense codes (dense rank keeps the lexical order of group names), then one sort
    codes = c.select(
        pl.col("group").fill_null("").rank("dense").cast(pl.Int64).alias("g"),
        pl.col("coll_op").fill_null("?").rank("dense").cast(pl.Int64).alias("op"),
    )
    g = codes.get_column("g").to_numpy()
    op = codes.get_column("op").to_numpy()
    seqn = c.get_column("coll_seq").to_numpy().astype(np.int64)
    rk = c.get_column("rank").fill_null(-1).cast(pl.Int64).to_numpy()
    order = np.lexsort((rk, seqn, g))
    c = c[pl.Series(order)]
    g, op, seqn, rk = g[order], op[order], seqn[order], rk[order]
    start = c.get_column("start_ns").to_numpy().astype(np.int64)
    dur = c.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64)
    n = g.size
    # segments: one per (group, coll_seq)
    brk = np.ones(n, dtype=bool)
    brk[1:] = (g[1:] != g[:-1]) | (seqn[1:] != seqn[:-1])
    lo = np.flatnonzero(brk)
    seg = np.cumsum(brk) - 1
    seg_len = np.diff(np.append(lo, n))
    last_arr = np.maximum.reduceat(start, lo)
    big = np.iinfo(np.int64).max
    last_rank = np.minimum.reduceat(np.where(start == last_arr[seg], rk, big), lo)
    ops_differ = np.maximum.reduceat(op, lo) != np.minimum.reduceat(op, lo)
    # per group: collectives per rank (must be equal), first seq whose ops differ
    g0 = g - 1
    ng = int(g0.max()) + 1
    r_lo = int(rk.min())
    nr = int(rk.max()) - r_lo + 1
    per = np.bincount(g0 * nr + (rk - r_lo), minlength=ng * nr).reshape(ng, nr)
    present = per > 0
    group_ranks = present.sum(axis=1)
    n_min = np.where(present, per, big).min(axis=1)
    n_max = per.max(axis=1)
    seg_g = g0[lo]
    issue: list[str | None] = [None] * ng
    group_col = c.get_column("group").fill_null("")
    first_row = np.full(ng, -1, dtype=np.int64)
    first_row[g0[::-1]] = np.arange(n)[::-1]
    for k in np.flatnonzero(n_min != n_max).tolist():
        cnt = ", ".join(f"rank {r + r_lo}: {per[k, r]}" for r in np.flatnonzero(present[k]).tolist())
        issue[k] = f"collective count differs across ranks in group {group_col[int(first_row[k])]} ({cnt})"
    for s_idx in np.flatnonzero(ops_differ).tolist():
        k = int(seg_g[s_idx])
        if issue[k] is not None:
            continue
        a, b = int(lo[s_idx]), int(lo[s_idx]) + int(seg_len[s_idx])
        ops = "/".join(sorted({str(x) if x is not None else "?" for x in c.get_column("coll_op")[a:b].to_list()}))
        issue[k] = f"collective #{int(seqn[a])} of group {group_col[int(first_row[k])]} has different ops across ranks ({ops})"
    bad = np.array([x is not None for x in issue], dtype=bool)
    matched = ~bad[g0]
    la = last_arr[seg]
    wait = np.minimum(np.maximum(la - start, 0), dur)
    out = c.with_columns(
        pl.Series("n_ranks", seg_len[seg]).cast(pl.UInt32),
        pl.Series("group_ranks", group_ranks[g0]).cast(pl.UInt32),
        pl.Series("last_arrival_ns", la),
        pl.Series("last_rank", last_rank[seg]),
        pl.Series("wait_ns", wait),
        pl.Series("transfer_ns", dur - wait),
        pl.Series("matched", matched),
        pl.Series("issue", [issue[k] for k in g0.tolist()], dtype=pl.String) if bad.any()
        else pl.lit(None, pl.String).alias("issue"),
    )
    unmatched = ~pl.col("matched")
    out = out.with_columns(
        *[pl.when(unmatched).then(None).otherwise(pl.col(k)).alias(k)
          for k in ("wait_ns", "transfer_ns", "last_arrival_ns", "last_rank")]
    )
    return out.select([pl.col(k).cast(v) for k, v in MATCH_SCHEMA.items()])


def match_arrays(
    g: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
    seqn: npt.NDArray[np.int64],
    rk: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    dur: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``match_collectives``'s wait and matched flag per collective kernel, in input order.

    g, op: dense codes (>= 1) of group and op; seqn: coll_seq; rk: rank. Wait is
    computed for every row (also where ``matched`` is False, where
    match_collectives leaves it null).
    """
    n = g.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    order = np.lexsort((rk, seqn, g))
    gs, ss, st, ops = g[order], seqn[order], start[order], op[order]
    brk = np.ones(n, dtype=bool)
    brk[1:] = (gs[1:] != gs[:-1]) | (ss[1:] != ss[:-1])
    lo = np.flatnonzero(brk)
    seg = np.cumsum(brk) - 1
    last_arr = np.maximum.reduceat(st, lo)
    ops_differ = np.maximum.reduceat(ops, lo) != np.minimum.reduceat(ops, lo)
    g0 = g - 1
    ng = int(g0.max()) + 1
    r_lo = int(rk.min())
    nr = int(rk.max()) - r_lo + 1
    per = np.bincount(g0 * nr + (rk - r_lo), minlength=ng * nr).reshape(ng, nr)
    present = per > 0
    big = np.iinfo(np.int64).max
    bad = np.where(present, per, big).min(axis=1) != per.max(axis=1)
    bad[gs[lo][ops_differ] - 1] = True
    wait = np.empty(n, dtype=np.int64)
    wait[order] = np.minimum(np.maximum(last_arr[seg] - st, 0), dur[order])
    return wait, ~bad[g0]


def collective_issues(matched: pl.DataFrame) -> list[str]:
    """The distinct mismatch messages of a ``match_collectives`` frame, sorted."""
    return sorted(matched.get_column("issue").drop_nulls().unique().to_list())


__all__ = [
    "COMM_CATEGORIES",
    "MATCH_SCHEMA",
    "annotate_collectives",
    "collective_issues",
    "comm_mask",
    "is_comm_name",
    "match_arrays",
    "match_collectives",
    "op_of_name",
]
