"""Text tables of one row per rank, folded when the ranks are many (issue 29; docs/scale.md "Many ranks").

A table with more than ``FOLD_ABOVE`` rank rows prints, instead of every row, the summary of each
numeric column over the ranks (``analyzers.rank_summary``: median, p90, mean, min, max), then the
``WORST_N`` worst ranks by the table's key column in full, then one line saying how many rows were
folded and how to see them (``--all-ranks``, ``--ranks``, ``--json``). ``RankView`` is what the
command was asked to show: ``--ranks SEL`` (rows of those ranks only; the analysis still used
every rank) and ``--all-ranks`` (never fold).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rich.table import Table

from tracekit.analyzers.rank_summary import WORST_N, RankSummary, RankValue, Worse, summarize
from tracekit.ranklist import format_rank_list

FOLD_ABOVE: Final = 16  # more rank rows than this: summary rows + the worst ranks (``--all-ranks``: every row)
STATS: Final = ("median", "p90", "mean", "min", "max")


@dataclass(frozen=True)
class RankView:
    """Which rank rows a command shows: ``ranks`` = the ``--ranks`` selection (None: every rank),
    ``all_ranks`` = ``--all-ranks`` (print every selected row, never fold)."""

    ranks: tuple[int, ...] | None = None
    all_ranks: bool = False

    def shows(self, rank: int) -> bool:
        return self.ranks is None or int(rank) in self.ranks

    def folds(self, rows: int) -> bool:
        return not self.all_ranks and rows > FOLD_ABOVE

    def note(self) -> str | None:
        """The line a command prints when ``--ranks`` selected rows, or None."""
        if self.ranks is None:
            return None
        return (f"shown: ranks {format_rank_list(self.ranks)} only (--ranks); the analysis used every rank's events "
                "(collectives matched, stragglers and phase figures over all ranks)")

    def select(self, rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [r for r in rows if self.shows(int(r["rank"]))]


ALL: Final = RankView()


@dataclass(frozen=True)
class Column:
    """A table column: its header and cell text for a rank's row; ``value`` (a number, None when
    unknown) and ``fmt`` make it a summarised column."""

    header: str
    cell: Callable[[Mapping[str, Any]], str]
    value: Callable[[Mapping[str, Any]], float | None] | None = None
    fmt: Callable[[float], str] = field(default=str)
    justify: str = "right"


def count(v: float) -> str:
    """A count, or a mean of counts: ``3``, ``1,024``, ``0.38``."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"


def stat_of(s: RankSummary, stat: str) -> RankValue | float:
    """One of ``STATS`` of ``s``: a number, or the rank and value of min / max."""
    if stat in ("min", "max"):
        v: RankValue = s.min if stat == "min" else s.max
        return v
    return float({"median": s.median, "p90": s.p90, "mean": s.mean}[stat])


def _stat_cell(s: RankSummary | None, stat: str, fmt: Callable[[float], str]) -> str:
    if s is None:
        return ""
    v = stat_of(s, stat)
    return fmt(v.value) if isinstance(v, RankValue) else fmt(v)


def summary_line(s: RankSummary | None, what: str, fmt: Callable[[float], str]) -> str | None:
    """``what over 64 ranks: median X, p90 X, mean X; worst: rank 1 (host a) X, ...``."""
    if s is None:
        return None
    end = "highest" if s.worse == "high" else "lowest"
    named = ", ".join(f"rank {w.rank}{'' if w.host is None else f' ({w.host})'} {fmt(w.value)}" for w in s.worst)
    return (f"{what} over {s.count} ranks: median {fmt(s.median)}, p90 {fmt(s.p90)}, mean {fmt(s.mean)}, "
            f"min {fmt(s.min.value)} (rank {s.min.rank}), max {fmt(s.max.value)} (rank {s.max.rank}); {end}: {named}")


def fold_line(total: int, shown: int, key_header: str) -> str:
    return (f"{total} rank rows: {total - shown} folded into the median / p90 / mean / min / max rows, the {shown} "
            f"worst by {key_header!r} shown in full; --all-ranks prints every row, --ranks 0-7,12 selects rows, "
            "--json keeps every rank")


def rank_table(table: Table, rows: Sequence[Mapping[str, Any]], columns: Sequence[Column], key: int, worse: Worse,
               view: RankView, hosts: Mapping[int, str | None] | None = None) -> tuple[RankSummary | None, list[str]]:
    """Fill ``table`` (its title set, no columns yet) with ``rows`` (each has ``rank``) under ``view``.

    ``columns[0]`` is the rank column; ``columns[key]`` the quantity whose ``worse`` end picks the worst
    ranks. Returns the key column's summary (over the selected rows) and the lines to print after
    the table (fold line, worst ranks named)."""
    for c in columns:
        table.add_column(c.header, justify="left" if c.justify == "left" else "right")
    sel = view.select(rows)
    lines: list[str] = []
    if view.ranks is not None and not sel:
        lines.append(f"no row of ranks {format_rank_list(view.ranks)} (--ranks): the run's rows are ranks "
                     f"{format_rank_list(int(r['rank']) for r in rows)}")
        return None, lines
    sums = [None if c.value is None else summarize(((int(r["rank"]), c.value(r)) for r in sel), c.header, "",
                                                   worse=worse, hosts=hosts) for c in columns]
    kc = columns[key]
    key_sum = sums[key]
    if not view.folds(len(sel)):
        for r in sel:
            table.add_row(*[c.cell(r) for c in columns])
        return key_sum, lines
    for i, stat in enumerate(STATS):
        label = f"{stat} of {len(sel)}" if stat in ("median", "p90", "mean") else stat
        table.add_row(label, *[_stat_cell(s, stat, c.fmt) for c, s in zip(columns[1:], sums[1:], strict=True)],
                      style="bold", end_section=i == len(STATS) - 1)
    by_rank = {int(r["rank"]): r for r in sel}
    worst = [] if key_sum is None else [by_rank[w.rank] for w in key_sum.worst]
    for r in worst:
        table.add_row(*[c.cell(r) for c in columns])
    lines.append(fold_line(len(sel), len(worst), kc.header))
    if (s := summary_line(key_sum, kc.header, kc.fmt)) is not None:
        lines.append(s)
    return key_sum, lines


__all__ = ["ALL", "FOLD_ABOVE", "STATS", "WORST_N", "Column", "RankView", "count", "fold_line", "rank_table", "summary_line"]
