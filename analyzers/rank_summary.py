"""One summary of a per-rank quantity over many ranks (issue 29, docs/scale.md "Many ranks").

A run of 1,024 ranks cannot be read as 1,024 table rows. Every renderer that shows one value per
rank (``ranks``, ``attribute``'s by-rank shares, ``gap --by rank``, ``info``, the HTML report)
summarises the value with ``summarize``: count, median and p90 (the repo's one quantile rule,
``robust.nearest_rank``: each is one rank's own value), mean, min and max, and the worst ranks
named with their host. "Worst" is the quantity's bad end (``worse="high"``: a wait, a delta; or
``"low"``: a share of busy time); ties go to the lower rank.

Pure functions over plain values: no polars, nothing read from a run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from tracekit.analyzers.robust import nearest_rank

WORST_N: Final = 3  # ranks named at the bad end of a summary (and shown in full in a folded table)

Worse = Literal["high", "low"]


@dataclass(frozen=True)
class RankValue:
    """One rank's value, with the host the run's manifest records for it (None: not recorded)."""

    rank: int
    value: float
    host: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "value": self.value, "host": self.host}


@dataclass(frozen=True)
class RankSummary:
    """A per-rank quantity over ``count`` ranks (the ranks whose value is known)."""

    quantity: str
    unit: str
    worse: Worse
    count: int
    median: float
    p90: float
    mean: float
    min: RankValue
    max: RankValue
    worst: tuple[RankValue, ...]

    def to_dict(self) -> dict[str, Any]:
        """The ``rank_summary`` item of the ``--json`` documents (docs/documents.md)."""
        return {
            "quantity": self.quantity, "unit": self.unit, "worse": self.worse, "ranks": self.count,
            "median": self.median, "p90": self.p90, "mean": self.mean,
            "min": self.min.to_dict(), "max": self.max.to_dict(), "worst": [w.to_dict() for w in self.worst],
        }


def summarize(values: Iterable[tuple[int, float | None]], quantity: str, unit: str, *, worse: Worse = "high",
              hosts: Mapping[int, str | None] | None = None, n_worst: int = WORST_N) -> RankSummary | None:
    """The summary of ``(rank, value)`` pairs (None values left out); None when no rank has a value.

    ``hosts``: rank -> host name (``manifest.hosts``' values, keyed by int rank)."""
    pairs = [(int(r), v) for r, v in values if v is not None]
    if not pairs:
        return None
    hosts = hosts or {}

    def rv(p: tuple[int, float]) -> RankValue:
        return RankValue(p[0], p[1], hosts.get(p[0]))

    vals = [v for _, v in pairs]
    median, p90 = nearest_rank(vals, 0.5), nearest_rank(vals, 0.9)
    assert median is not None and p90 is not None
    lo = min(pairs, key=lambda p: (p[1], p[0]))
    hi = min(pairs, key=lambda p: (-p[1], p[0]))
    order = sorted(pairs, key=(lambda p: (-p[1], p[0])) if worse == "high" else (lambda p: (p[1], p[0])))
    return RankSummary(quantity, unit, worse, len(pairs), median, p90, sum(vals) / len(vals), rv(lo), rv(hi),
                       tuple(rv(p) for p in order[:n_worst]))


def int_hosts(manifest: Mapping[str, Any]) -> dict[int, str | None]:
    """``manifest.hosts`` keyed by int rank (ranks whose key is not an integer are left out)."""
    from tracekit.manifest import hosts

    return {int(r): h for r, h in hosts(manifest).items() if str(r).lstrip("-").isdigit()}


__all__ = ["WORST_N", "RankSummary", "RankValue", "Worse", "int_hosts", "summarize"]
