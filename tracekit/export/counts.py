"""What an export wrote, counted: one field list for a whole export and for each stream of ranks."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class ExportCounts:
    bytes_written: int
    estimated_bytes: int
    n_slices: int
    n_gpu_slices: int
    n_counters: int
    n_flows: int
    n_tracks: int

    @staticmethod
    def total(parts: Iterable[ExportCounts]) -> ExportCounts:
        """The sums over ``parts`` (streams concatenated into one file)."""
        s = ExportCounts(0, 0, 0, 0, 0, 0, 0)
        for p in parts:
            s = ExportCounts(s.bytes_written + p.bytes_written, s.estimated_bytes + p.estimated_bytes,
                             s.n_slices + p.n_slices, s.n_gpu_slices + p.n_gpu_slices, s.n_counters + p.n_counters,
                             s.n_flows + p.n_flows, s.n_tracks + p.n_tracks)
        return s


__all__ = ["ExportCounts"]
