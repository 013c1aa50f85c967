"""Collective instances matched across ranks, as the forensic analyzers need them.

A thin adapter over ``tracekit.finalize.collectives`` on a finalized table
(group/coll_seq set once, when the run was written): ``match_collectives`` pairs the k-th collective of each communicator across
ranks. Only collectives matched on every rank of the run, exactly once each,
are kept (a partial match says nothing about skew or clock offsets).

One row per (collective, rank): ``key`` (``group#coll_seq``), rank, start_ns
(arrival), end_ns, name, plus the matcher's columns (group, coll_seq, coll_op,
phase, phase_id, dur_ns, last_arrival_ns, last_rank, wait_ns, transfer_ns).

``host_collectives``: a CPU run (gloo) has no collective kernels; torch records each gloo
collective as a range ``gloo:all_reduce`` (``gloo:all_gather``, ``gloo:barrier``, ...) from the
moment the work is queued (the rank's arrival) to its completion, on every rank. The k-th range
of one name on each rank is the same collective (one process group: every rank issues the same
sequence), so the matched rows are ``key`` (``gloo:all_reduce#k``), rank, start_ns, end_ns.
"""

from __future__ import annotations

from typing import TypeVar

import polars as pl

from tracekit.finalize.collectives import MATCH_SCHEMA, match_collectives

OUT_SCHEMA: dict[str, pl.DataType] = {"key": pl.String(), **MATCH_SCHEMA}


def matched_collectives(events: pl.DataFrame, match: pl.DataFrame | None = None) -> pl.DataFrame:
    """Matched collective kernels (see module doc); empty frame when nothing matches.
    ``match``: ``match_collectives(events)`` when the caller has it already."""
    n_ranks = events.get_column("rank").drop_nulls().n_unique()
    if n_ranks < 2:
        return pl.DataFrame(schema=OUT_SCHEMA)
    m = (match_collectives(events) if match is None else match).filter(pl.col("matched"))
    m = m.with_columns(
        pl.concat_str([pl.col("group").fill_null(""), pl.col("coll_seq").cast(pl.String())], separator="#").alias("key")
    )
    counts = m.group_by("key").agg(pl.col("rank").n_unique().alias("_nr"), pl.len().alias("_n"))
    keep = counts.filter((pl.col("_nr") == n_ranks) & (pl.col("_n") == n_ranks)).select("key")
    return m.join(keep, on="key", how="semi").select(list(OUT_SCHEMA)).sort(["key", "rank"])


HOST_PREFIX = "gloo:"  # torch's range name of a gloo collective's work (ProcessGroupGloo)
HOST_SCHEMA: dict[str, pl.DataType] = {"key": pl.String(), "rank": pl.Int32(), "start_ns": pl.Int64(),
                                       "end_ns": pl.Int64()}


def host_collectives(events: pl.DataFrame) -> pl.DataFrame:
    """Gloo collectives matched on every rank by name and order (see module doc); empty when none."""
    n_ranks = events.get_column("rank").drop_nulls().n_unique()
    if n_ranks < 2:
        return pl.DataFrame(schema=HOST_SCHEMA)
    g = (events.lazy()
         .filter((pl.col("kind") == "range") & pl.col("name").str.starts_with(HOST_PREFIX))
         .select("rank", "name", "start_ns", "dur_ns")
         .sort(["rank", "start_ns", "name"])
         .with_columns(pl.int_range(pl.len()).over(["rank", "name"]).alias("_k"))
         .select(pl.concat_str([pl.col("name"), pl.col("_k").cast(pl.String())], separator="#").alias("key"),
                 pl.col("rank").cast(pl.Int32), "start_ns", (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"))
         .collect())
    keep = g.group_by("key").agg(pl.col("rank").n_unique().alias("_nr")).filter(pl.col("_nr") == n_ranks)
    return g.join(keep.select("key"), on="key", how="semi").sort(["key", "rank"])


# the columns match_collectives and host_collectives read
ALIGN_COLUMNS = ("rank", "kind", "name", "group", "coll_seq", "coll_op", "phase", "phase_id", "start_ns", "dur_ns")


_Frame = TypeVar("_Frame", pl.DataFrame, pl.LazyFrame)


def alignment_rows(events: _Frame) -> _Frame:
    """The rows and columns clock alignment reads (``align.estimate_offsets``): collective kernels and
    gloo's collective ranges. A rank's share is small: what travels from a worker to fit the offsets of
    a run ingested rank by rank (``tracekit.ingest.sharded``)."""
    return events.filter(((pl.col("kind") == "kernel") & pl.col("coll_seq").is_not_null())
                         | ((pl.col("kind") == "range") & pl.col("name").str.starts_with(HOST_PREFIX))
                         ).select(ALIGN_COLUMNS)
