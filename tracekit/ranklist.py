"""The one rank-list syntax of every command: ``all``, ``3``, ``0,3,5``, ``0-3,7``.

``parse_rank_list`` returns the sorted unique ranks, or None for ``all``; ValueError names what
is wrong. ``capture --ranks`` and ``export --ranks`` read it (the CLI turns the ValueError into a
usage error, exit 2).
"""

from __future__ import annotations

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


__all__ = ["SYNTAX", "parse_rank_list"]
