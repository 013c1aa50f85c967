"""Collective instances matched across ranks, as the forensic analyzers need them.

One row per (collective, rank): ``key`` identifies the collective (the same on
every rank that took part), ``start_ns`` is the rank's arrival (its kernel
start), ``end_ns`` its kernel end. Only collectives seen exactly once on every
rank of the run are kept (a partial match says nothing about skew).

Matching, first rule that applies:
1. ``tracekit.collectives.match_collectives`` when that module is present
   (c10d metadata, communicator order), adapted to the columns above;
2. rows with ``coll_seq``: key = (group, coll_seq);
3. kernels of category ``allreduce`` / ``comm`` (or with ``coll_op``): key =
   (operation, order of that operation within the rank), i.e. order within the
   communicator when a job uses one communicator per operation kind.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

import polars as pl

from tracekit import schema

COMM_CATEGORIES: Final = ("allreduce", "comm")
OUT_SCHEMA: Final = {
    "key": pl.String(),
    "rank": pl.Int32(),
    "start_ns": pl.Int64(),
    "end_ns": pl.Int64(),
    "name": pl.String(),
}


def _complete(rows: pl.DataFrame, n_ranks: int) -> pl.DataFrame:
    """Keep collectives seen exactly once on each of the ``n_ranks`` ranks."""
    counts = rows.group_by("key").agg(
        pl.col("rank").n_unique().alias("_nr"), pl.len().alias("_n")
    )
    keep = counts.filter((pl.col("_nr") == n_ranks) & (pl.col("_n") == n_ranks)).select("key")
    return rows.join(keep, on="key", how="semi").select(list(OUT_SCHEMA)).sort(["key", "rank"])


def _from_module(events: pl.DataFrame) -> pl.DataFrame | None:
    try:
        mod: Any = importlib.import_module("tracekit.collectives")
    except ImportError:
        return None
    fn = getattr(mod, "match_collectives", None)
    if fn is None:
        return None
    matched = fn(events)
    if not isinstance(matched, pl.DataFrame):
        return None
    cols = set(matched.columns)
    key_cols = [c for c in ("group", "coll_seq") if c in cols]
    if not key_cols or not {"rank", "start_ns"} <= cols:
        return None
    end = (
        pl.col("end_ns")
        if "end_ns" in cols
        else (pl.col("start_ns") + pl.col("dur_ns"))
        if "dur_ns" in cols
        else None
    )
    if end is None:
        return None
    return matched.select(
        pl.concat_str([pl.col(c).cast(pl.String()).fill_null("") for c in key_cols], separator="#").alias("key"),
        pl.col("rank").cast(pl.Int32()),
        pl.col("start_ns").cast(pl.Int64()),
        end.cast(pl.Int64()).alias("end_ns"),
        (pl.col("name") if "name" in cols else pl.lit(None, dtype=pl.String())).alias("name"),
    )


def matched_collectives(events: pl.DataFrame) -> pl.DataFrame:
    """Matched collective kernels (see module doc); empty frame when nothing matches."""
    ranks = events.get_column("rank").drop_nulls().unique()
    n_ranks = ranks.len()
    if n_ranks < 2:
        return pl.DataFrame(schema=OUT_SCHEMA)
    got = _from_module(events)
    if got is not None and got.height:
        return _complete(got, n_ranks)
    gpu = events.filter(pl.col("kind") == schema.KERNEL)
    seq = gpu.filter(pl.col("coll_seq").is_not_null())
    if seq.height:
        rows = seq.select(
            pl.concat_str(
                [pl.col("group").fill_null(""), pl.col("coll_seq").cast(pl.String())], separator="#"
            ).alias("key"),
            "rank",
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
            "name",
        )
        return _complete(rows, n_ranks)
    comm = gpu.filter(
        pl.col("category").is_in(list(COMM_CATEGORIES)) | pl.col("coll_op").is_not_null()
    ).sort(["rank", "start_ns"])
    if comm.is_empty():
        return pl.DataFrame(schema=OUT_SCHEMA)
    op = pl.coalesce(pl.col("coll_op"), pl.col("category"))
    rows = comm.with_columns(op.alias("_op")).with_columns(
        pl.int_range(pl.len()).over(["rank", "_op"]).alias("_ord")
    ).select(
        pl.concat_str([pl.col("_op"), pl.col("_ord").cast(pl.String())], separator="#").alias("key"),
        "rank",
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        "name",
    )
    return _complete(rows, n_ranks)
