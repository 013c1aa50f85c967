"""What the report reads besides the analyses from a run read rank by rank (``analyzers.ranked``): per
rank, in pass 1 (``ranked.scan(light=True)``: the rank is read there anyway), ``tracekit info``'s tables
(``summary.InfoParts``: they add up over ranks) and its phase rows (``phase_rows.phase_rows``: the few
range rows per cycle that phase instances are made of).

From those the driver builds what the report draws besides ``attribute`` / ``gap`` / ``ranks`` /
``diff`` (``analyzers.ranked``): info's document (``summary.info_document``), ``spec``'s cycles and
decode steps and the cycle composition (both read only phase instances). What travels per rank: its
info tables (a row per rank, category, kind, unmatched or NCCL kernel name) and its phase rows; never
its event table.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit.summary import InfoParts, merge_info_parts

from .ranked import Scanned


@dataclass(frozen=True)
class Light:
    """The run's info tables and phase rows (phase ids as the whole run reads them: ``unique_phase_ids``)."""

    info: InfoParts
    phases: pl.DataFrame


def light_of(s: Scanned) -> Light:
    """``Light`` of a run scanned with ``light=True``."""
    from tracekit.finalize.version import shift_phase_ids

    phases = pl.concat([x.phase_rows for x in s.scans if x.phase_rows is not None], how="vertical", rechunk=True)
    return Light(merge_info_parts([x.info for x in s.scans]), phases if s.top is None else shift_phase_ids(phases, s.top))


__all__ = ["Light", "light_of"]
