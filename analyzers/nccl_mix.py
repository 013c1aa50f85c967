"""Which NCCL kernels each rank ran, from the trace alone: the algorithm / protocol mix.

    mix = nccl_mix(events)              # NcclMix: per rank, per (collective, dtype, setting)
    changes = mix_changes(old, new)     # per rank, where the set of settings changed

Kernel names are parsed by ``tracekit.nccl.parse_nccl_kernel`` (every NCCL name format of 2.8 -
2.28 and RCCL's). Counts and times are of kernel rows (``kind == kernel``) in the profiled window;
``total_ns`` is the sum of their durations (exact ns). A setting is the kernel's specialisation
(``RING/LL``) except for NCCL's symmetric-memory kernels, whose names carry the algorithm that ran
(``exact``): see tracekit/nccl.py for what each name format can and cannot say.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tracekit import schema
from tracekit.nccl import NcclKernel, parse_nccl_kernel


@dataclass(frozen=True)
class MixRow:
    """One (rank, collective, dtype, setting): how many kernels and their summed duration."""

    rank: int
    collective: str
    dtype: str | None
    setting: str  # "RING/LL", "TREE/LL", "AGxLL_R", "-"
    exact: bool
    family: str
    count: int
    total_ns: int


@dataclass(frozen=True)
class NcclMix:
    rows: tuple[MixRow, ...] = ()

    def ranks(self) -> list[int]:
        return sorted({r.rank for r in self.rows})

    def of_rank(self, rank: int) -> list[MixRow]:
        return [r for r in self.rows if r.rank == rank]

    def settings(self, rank: int) -> dict[str, int]:
        """``collective setting`` -> kernel count on ``rank`` (dtype folded)."""
        out: dict[str, int] = {}
        for r in self.of_rank(rank):
            key = f"{r.collective} {r.setting}"
            out[key] = out.get(key, 0) + r.count
        return out


@dataclass(frozen=True)
class MixChange:
    """A rank whose NCCL settings differ between two runs (counts by ``collective setting``)."""

    rank: int
    old: dict[str, int]
    new: dict[str, int]

    @property
    def appeared(self) -> list[str]:
        return sorted(set(self.new) - set(self.old))

    @property
    def vanished(self) -> list[str]:
        return sorted(set(self.old) - set(self.new))


def nccl_mix(events: pl.DataFrame) -> NcclMix:
    """The NCCL kernels of every rank grouped by what their names say."""
    return mix_of(nccl_counts(events))


def nccl_counts(events: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, NCCL kernel name): count and total_ns (what ``mix_of`` groups; per rank: a rank's rows
    need only its own events)."""
    k = events.lazy().filter((pl.col("kind") == schema.KERNEL) & pl.col("name").cast(pl.String).str.starts_with("nccl"))
    return (k.group_by("rank", pl.col("name").cast(pl.String))
            .agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns")).collect())


def mix_of(agg: pl.DataFrame) -> NcclMix:
    """``nccl_mix`` from the ``nccl_counts`` of every rank."""
    acc: dict[tuple[int, str, str | None, str, bool, str], list[int]] = {}
    parsed: dict[str, NcclKernel | None] = {}
    for rank, name, count, total in agg.iter_rows():
        if name not in parsed:
            parsed[name] = parse_nccl_kernel(name)
        p = parsed[name]
        if p is None:
            continue
        key = (int(rank), p.collective, p.dtype, p.setting, p.exact, p.family)
        slot = acc.setdefault(key, [0, 0])
        slot[0] += int(count)
        slot[1] += int(total or 0)
    rows = tuple(MixRow(r, c, d, s, e, f, n, t) for (r, c, d, s, e, f), (n, t) in sorted(
        acc.items(), key=lambda kv: (kv[0][0], -kv[1][1], kv[0][1], kv[0][3])))
    return NcclMix(rows)


def mix_changes(old: NcclMix, new: NcclMix) -> list[MixChange]:
    """Ranks (of either run) whose set of ``collective setting`` differs between the runs."""
    out: list[MixChange] = []
    for rank in sorted(set(old.ranks()) | set(new.ranks())):
        a, b = old.settings(rank), new.settings(rank)
        if set(a) != set(b):
            out.append(MixChange(rank, a, b))
    return out


__all__ = ["MixChange", "MixRow", "NcclMix", "mix_changes", "mix_of", "nccl_counts", "nccl_mix"]
