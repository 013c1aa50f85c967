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

import polars as pl

from tracekit.schema import KERNEL, conform

COMM_CATEGORIES: Final = ("allreduce", "comm")

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
    counts = c.group_by(["group", "rank"]).agg(pl.len().alias("n"))
    grp = counts.group_by("group").agg(
        pl.col("rank").n_unique().alias("group_ranks"),
        pl.col("n").min().alias("n_min"),
        pl.col("n").max().alias("n_max"),
        pl.format("rank {}: {}", pl.col("rank"), pl.col("n")).sort_by("rank").str.join(", ").alias("counts"),
    )
    seq = c.group_by(["group", "coll_seq"]).agg(
        pl.col("rank").n_unique().alias("n_ranks"),
        pl.col("start_ns").max().alias("last_arrival_ns"),
        pl.col("coll_op").fill_null("?").n_unique().alias("n_ops"),
    )
    # last rank: the lowest rank among those arriving at the latest arrival
    last = (
        c.select("group", "coll_seq", "rank", "start_ns")
        .join(seq.select("group", "coll_seq", "last_arrival_ns"), on=["group", "coll_seq"])
        .filter(pl.col("start_ns") == pl.col("last_arrival_ns"))
        .group_by(["group", "coll_seq"])
        .agg(pl.col("rank").min().alias("last_rank"))
    )
    seq = seq.join(last, on=["group", "coll_seq"], how="left")
    bad = seq.filter(pl.col("n_ops") > 1).select("group", "coll_seq")
    op_bad = (
        c.join(bad, on=["group", "coll_seq"], how="semi")
        .group_by(["group", "coll_seq"])
        .agg(pl.col("coll_op").fill_null("?").unique().sort().str.join("/").alias("ops"))
        .sort("coll_seq")
        .group_by("group", maintain_order=True)
        .agg(pl.col("coll_seq").first().alias("bad_seq"), pl.col("ops").first().alias("bad_ops"))
    )
    grp = grp.join(op_bad, on="group", how="left").with_columns(
        pl.when(pl.col("n_min") != pl.col("n_max"))
        .then(pl.format("collective count differs across ranks in group {} ({})", pl.col("group"), pl.col("counts")))
        .when(pl.col("bad_seq").is_not_null())
        .then(pl.format("collective #{} of group {} has different ops across ranks ({})", pl.col("bad_seq"), pl.col("group"), pl.col("bad_ops")))
        .otherwise(None)
        .alias("issue")
    )
    out = (
        c.join(seq.select("group", "coll_seq", "n_ranks", "last_arrival_ns", "last_rank"), on=["group", "coll_seq"], how="left")
        .join(grp.select("group", "group_ranks", "issue"), on="group", how="left")
        .with_columns(pl.col("issue").is_null().alias("matched"))
    )
    wait = (pl.col("last_arrival_ns") - pl.col("start_ns")).clip(0, None)
    wait = pl.min_horizontal(wait, pl.col("dur_ns"))
    out = out.with_columns(
        pl.when(pl.col("matched")).then(wait).otherwise(None).alias("wait_ns"),
    ).with_columns(
        pl.when(pl.col("matched")).then(pl.col("dur_ns") - pl.col("wait_ns")).otherwise(None).alias("transfer_ns"),
        pl.when(pl.col("matched")).then(pl.col("last_arrival_ns")).otherwise(None).alias("last_arrival_ns"),
        pl.when(pl.col("matched")).then(pl.col("last_rank")).otherwise(None).alias("last_rank"),
    )
    return out.select([pl.col(k).cast(v) for k, v in MATCH_SCHEMA.items()]).sort(["group", "coll_seq", "rank"])


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
    "match_collectives",
    "op_of_name",
]
