"""The one rank-list syntax of every command: ``all``, ``3``, ``0,3,5``, ``0-3,7``.

``parse_rank_list`` returns the sorted unique ranks, or None for ``all``; ValueError names what
is wrong. ``capture --ranks`` and ``export --ranks`` read it (the CLI turns the ValueError into a
usage error, exit 2). ``format_rank_list`` writes ranks back in the same syntax (``1-127``,
``0-3,7``): every message that names several ranks uses it; ``ranks_by_reason`` groups the ranks
that share a reason (missing ranks), one ``(ranks, reason)`` per reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

SYNTAX = "all, a rank (3), a list (0,3,5) or ranges (0-3,7)"


def parse_rank_list(text: str) -> tuple[int, ...] | None:
    """``"all"`` -> None; ``"0,5"`` / ``"0-3,7"`` -> sorted unique ranks >= 0. Raises ValueError."""
    if text.strip().lower() == "all":
        return None
    out: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(f"not a rank or rank range: {part!r} (expected {SYNTAX})") from None
        if b < a:
            raise ValueError(f"empty rank range {part!r}")
        out.update(range(a, b + 1))
    if not out:
        raise ValueError(f"no ranks given (expected {SYNTAX})")
    return tuple(sorted(out))


def format_rank_list(ranks: Iterable[int | str]) -> str:
    """Sorted unique ranks in the syntax ``parse_rank_list`` reads: ``[3, 0, 1, 2, 7]`` -> ``"0-3,7"``,
    ``range(1, 128)`` -> ``"1-127"``; ``""`` for none."""
    nums = sorted({int(r) for r in ranks})
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)


def ranks_by_reason(reasons: Mapping[Any, str]) -> list[tuple[str, str]]:
    """``{1: "x", 2: "x", 5: "y"}`` -> ``[("ranks 1-2", "x"), ("rank 5", "y")]``: the ranks that share
    a reason (``rank_noun``), in the order of their first rank."""
    groups: dict[str, list[int]] = {}
    for r, why in sorted(((int(k), w) for k, w in reasons.items()), key=lambda kv: kv[0]):
        groups.setdefault(why, []).append(r)
    return [(rank_noun(rs), why) for why, rs in groups.items()]


def rank_noun(ranks: Iterable[int | str]) -> str:
    """``"rank 3"`` or ``"ranks 0-3,7"``."""
    rs = list(ranks)
    return f"{'rank' if len(set(map(int, rs))) == 1 else 'ranks'} {format_rank_list(rs)}"


__all__ = ["SYNTAX", "format_rank_list", "parse_rank_list", "rank_noun", "ranks_by_reason"]
