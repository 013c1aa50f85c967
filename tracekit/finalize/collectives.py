"""Collective kernels: recognise them, give them a communicator and an order, match across ranks.

``annotate_collectives`` sets, on every communication kernel:

- ``coll_op`` (when missing) from the kernel name by the category rule table's
  ``coll_op`` (``tracekit/data/categories.toml``, the one name -> op mapping):
  allreduce, allgather, reducescatter, broadcast, sendrecv, alltoall, dispatch, combine;
- ``group``: the c10d process-group name (``"Process Group Name"`` in the
  kernel's args) when present; otherwise a key derived from the stream, so
  NCCL launched outside c10d (SGLang's pynccl inside CUDA graphs) and custom
  allreduce kernels group the same way on every rank: ``stream:<id>`` when the
  ranks use the same stream ids for such kernels, else ``stream#<k>`` (the k-th
  such stream of the rank, by id);
- ``coll_seq``: 0-based order by start time within (rank, group).

Communication kernels are those whose ``category`` is one of COMM_CATEGORIES
(categories.py); kernels with no category are recognised by name through the
same rule table, which covers NCCL and the custom / fused / symmetric-memory
allreduce and DeepEP kernels (``tracekit/data/categories.toml``).

``match_collectives`` pairs the k-th collective of a group across ranks and
computes, per (group, coll_seq, rank): arrival (= kernel start), the latest
arrival over the ranks, ``wait_ns`` = latest arrival - own arrival clipped to
[0, dur] and ``transfer_ns`` = dur - wait. A group whose per-rank counts differ,
or whose k-th collective has different ops on different ranks, cannot be
matched by order: its rows are kept with ``matched = False``, null wait and
transfer, and the reason in ``issue`` (``collective_issues`` lists them once).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.finalize.categories import COMM_CATEGORIES, rule_table
from tracekit.schema import KERNEL, conform

_PG_NAME: Final = r'"Process Group Name"\s*:\s*"([^"]*)"'


def comm_mask(events: pl.DataFrame) -> pl.Series:
    """Boolean mask of the communication kernels of ``events``: category in COMM_CATEGORIES;
    kernels without a category by the category rule table (``categories.rule_table``, once per
    distinct name)."""
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
        table = rule_table(cand)
        comm_names = table.filter(pl.col("_cat").is_in(list(COMM_CATEGORIES))).get_column("name")
        if comm_names.len():
            mask = mask | (need & names.is_in(comm_names.implode()).fill_null(False))
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
    ops = rule_table(c.get_column("name").unique().drop_nulls().to_list()).select("name", "_op")
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
    m = _match(g, op, seqn, rk, c.get_column("start_ns").to_numpy().astype(np.int64))
    c = c[pl.Series(m.order)]
    g, seqn, rk = g[m.order], seqn[m.order], rk[m.order]
    start = c.get_column("start_ns").to_numpy().astype(np.int64)
    dur = c.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64)
    n = g.size
    lo, seg = m.lo, m.seg
    seg_len = np.diff(np.append(lo, n))
    big = np.iinfo(np.int64).max
    last_rank = np.minimum.reduceat(np.where(start == m.last_arr[seg], rk, big), lo)
    g0 = g - 1
    ng = m.per.shape[0]
    present = m.per > 0
    issue: list[str | None] = [None] * ng
    group_col = c.get_column("group").fill_null("")
    first_row = np.full(ng, -1, dtype=np.int64)
    first_row[g0[::-1]] = np.arange(n)[::-1]
    for k in np.flatnonzero(m.count_differs).tolist():
        cnt = ", ".join(f"rank {r + m.r_lo}: {m.per[k, r]}" for r in np.flatnonzero(present[k]).tolist())
        issue[k] = f"collective count differs across ranks in group {group_col[int(first_row[k])]} ({cnt})"
    for s_idx in np.flatnonzero(m.ops_differ).tolist():
        k = int(g0[lo[s_idx]])
        if issue[k] is not None:
            continue
        a, b = int(lo[s_idx]), int(lo[s_idx]) + int(seg_len[s_idx])
        ops = "/".join(sorted({str(x) if x is not None else "?" for x in c.get_column("coll_op")[a:b].to_list()}))
        issue[k] = f"collective #{int(seqn[a])} of group {group_col[int(first_row[k])]} has different ops across ranks ({ops})"
    bad = m.bad()
    la = m.last_arr[seg]
    wait = np.minimum(np.maximum(la - start, 0), dur)
    out = c.with_columns(
        pl.Series("n_ranks", seg_len[seg]).cast(pl.UInt32),
        pl.Series("group_ranks", present.sum(axis=1)[g0]).cast(pl.UInt32),
        pl.Series("last_arrival_ns", la),
        pl.Series("last_rank", last_rank[seg]),
        pl.Series("wait_ns", wait),
        pl.Series("transfer_ns", dur - wait),
        pl.Series("matched", ~bad[g0]),
        pl.Series("issue", [issue[k] for k in g0.tolist()], dtype=pl.String) if bad.any()
        else pl.lit(None, pl.String).alias("issue"),
    )
    unmatched = ~pl.col("matched")
    out = out.with_columns(
        *[pl.when(unmatched).then(None).otherwise(pl.col(k)).alias(k)
          for k in ("wait_ns", "transfer_ns", "last_arrival_ns", "last_rank")]
    )
    return out.select([pl.col(k).cast(v) for k, v in MATCH_SCHEMA.items()])


@dataclass(frozen=True)
class _Matched:
    """The matching of collective kernels by order: one segment per (group, coll_seq)."""

    order: npt.NDArray[np.int64]  # input rows sorted by (group, coll_seq, rank)
    lo: npt.NDArray[np.int64]  # first sorted row of each segment
    seg: npt.NDArray[np.int64]  # segment of each sorted row
    last_arr: npt.NDArray[np.int64]  # latest arrival (start) per segment
    ops_differ: npt.NDArray[np.bool_]  # per segment: ops differ across ranks
    per: npt.NDArray[np.int64]  # (group, rank - r_lo) -> collectives
    r_lo: int
    seg_group: npt.NDArray[np.int64]  # group code - 1 of each segment

    @property
    def count_differs(self) -> npt.NDArray[np.bool_]:
        """Per group: the ranks hold different numbers of its collectives."""
        big = np.iinfo(np.int64).max
        return np.asarray(np.where(self.per > 0, self.per, big).min(axis=1) != self.per.max(axis=1))

    def bad(self) -> npt.NDArray[np.bool_]:
        """Per group: cannot be matched by order (counts differ, or the k-th collective's op does)."""
        bad = self.count_differs.copy()
        bad[self.seg_group[self.ops_differ]] = True
        return bad


def _match(
    g: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
    seqn: npt.NDArray[np.int64],
    rk: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
) -> _Matched:
    """The one matching algorithm (module doc): the k-th collective of a group across ranks.
    g, op: dense codes (>= 1) of group and op; seqn: coll_seq; rk: rank; start: arrival."""
    n = g.size
    order = np.lexsort((rk, seqn, g))
    gs, ss = g[order], seqn[order]
    brk = np.ones(n, dtype=bool)
    brk[1:] = (gs[1:] != gs[:-1]) | (ss[1:] != ss[:-1])
    lo = np.flatnonzero(brk)
    ops = op[order]
    g0 = g - 1
    r_lo = int(rk.min())
    ng, nr = int(g0.max()) + 1, int(rk.max()) - r_lo + 1
    return _Matched(
        order=order,
        lo=lo,
        seg=np.cumsum(brk) - 1,
        last_arr=np.maximum.reduceat(start[order], lo),
        ops_differ=np.maximum.reduceat(ops, lo) != np.minimum.reduceat(ops, lo),
        per=np.bincount(g0 * nr + (rk - r_lo), minlength=ng * nr).reshape(ng, nr),
        r_lo=r_lo,
        seg_group=gs[lo] - 1,
    )


def match_arrays(
    g: npt.NDArray[np.int64],
    op: npt.NDArray[np.int64],
    seqn: npt.NDArray[np.int64],
    rk: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    dur: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``match_collectives``'s wait and matched flag per collective kernel, in input order (the
    same ``_match``, without building its frame).

    g, op: dense codes (>= 1) of group and op; seqn: coll_seq; rk: rank. Wait is
    computed for every row (also where ``matched`` is False, where
    match_collectives leaves it null).
    """
    n = g.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    from tracekit import _native

    if _native.walk is not None:  # the same matching compiled, without the sort (tracekit/_walk.c)
        wait = np.empty(n, dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        arrays = (np.ascontiguousarray(a, dtype=np.int64) for a in (g, op, seqn, rk, start, dur))
        if _native.walk.match(*arrays, wait, ok):
            return wait, ok
    m = _match(g, op, seqn, rk, start)
    wait = np.empty(n, dtype=np.int64)
    wait[m.order] = np.minimum(np.maximum(m.last_arr[m.seg] - start[m.order], 0), dur[m.order])
    return wait, ~m.bad()[g - 1]


def collective_issues(matched: pl.DataFrame) -> list[str]:
    """The distinct mismatch messages of a ``match_collectives`` frame, sorted."""
    return sorted(matched.get_column("issue").drop_nulls().unique().to_list())


__all__ = [
    "COMM_CATEGORIES",
    "MATCH_SCHEMA",
    "annotate_collectives",
    "collective_issues",
    "comm_mask",
    "match_arrays",
    "match_collectives",
]
