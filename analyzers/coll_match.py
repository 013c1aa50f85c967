"""Collective instances matched across ranks, as the forensic analyzers need them.

A thin adapter over ``tracekit.finalize.collectives`` on a finalized table
(group/coll_seq set once, when the run was written): ``match_collectives`` pairs the k-th collective of each communicator across
ranks. Only collectives matched on every rank of the run, exactly once each,
are kept (a partial match says nothing about skew or clock offsets).

One row per (collective, rank): ``key`` (``group#coll_seq``), rank, start_ns
(arrival), end_ns, name, plus the matcher's columns (group, coll_seq, coll_op,
phase, phase_id, dur_ns, last_arrival_ns, last_rank, wait_ns, transfer_ns).
"""

from __future__ import annotations

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
