"""The report's light pass over a run read rank by rank (``analyzers.ranked``'s rule and executor): per
rank, ``tracekit info``'s tables (``summary.InfoParts``: they add up over ranks) and its phase rows
(``phase_rows.phase_rows``: the few range rows per cycle that phase instances are made of).

From those the driver builds what the report draws besides ``attribute`` / ``gap`` / ``ranks`` /
``diff`` (``analyzers.ranked``): info's document (``summary.info_document``), ``spec``'s cycles and
decode steps and the cycle composition (both read only phase instances). What travels per rank: its
info tables (a row per rank, category, kind, unmatched or NCCL kernel name) and its phase rows; never
its event table.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.store import RankedRun, RankFile, read_rank
from tracekit.summary import InfoParts, info_parts, merge_info_parts

from .phase_rows import phase_rows
from .ranked import Executor, Say, each_rank, unique_ids


@dataclass(frozen=True)
class RankLight:
    """``light_rank``'s result: one rank's info tables, distinct phase ids and phase rows."""

    rank: int
    info: InfoParts
    phase_ids: pl.Series
    phases: pl.DataFrame


def light_rank(f: RankFile) -> RankLight:
    """The light pass of one rank (module doc)."""
    ev = read_rank(f)
    return RankLight(f.rank, info_parts(ev), ev.get_column("phase_id").drop_nulls().unique().sort(), phase_rows(ev))


@dataclass(frozen=True)
class Light:
    """The run's info tables and phase rows (phase ids as the whole run reads them: ``unique_phase_ids``)."""

    info: InfoParts
    phases: pl.DataFrame


def light_pass(run: RankedRun, executor: Executor, say: Say | None = None, what: str = "") -> Light:
    """``light_rank`` over every rank of ``run``."""
    got = each_rank(run, executor, light_rank, say, f"{what}info and phase rows")
    _, phases = unique_ids([r.phase_ids for r in got], [r.phases for r in got])
    return Light(merge_info_parts([r.info for r in got]), phases)


__all__ = ["Light", "RankLight", "light_pass", "light_rank"]
