"""The duration formatters of every table and sentence (documents keep integer ns).

- ``dur(ns)``: a readable unit chosen by size: ``1.23 ms``, ``4.5 µs``, ``800 ns``
  (``digits`` for ms, one fewer for µs; ``signed`` prefixes + / - / ±).
- ``ms(ns)``: fixed milliseconds: ``1.234 ms`` (``unit=False``: the number only, for a column
  headed "ms"; ``grouping``: thousands separators).
"""

from __future__ import annotations


def dur(ns: float | None, signed: bool = False, digits: int = 2) -> str:
    if ns is None:
        return "n/a"
    sign = ("+" if ns > 0 else "-" if ns < 0 else "±") if signed else ("-" if ns < 0 else "")
    a = abs(ns)
    if a >= 1e6:
        body = f"{a / 1e6:.{digits}f} ms"
    elif a >= 1e3:
        body = f"{a / 1e3:.{max(digits - 1, 0)}f} µs"
    else:
        body = f"{a:.0f} ns"
    return sign + body


def ms(ns: float | None, digits: int = 3, *, unit: bool = True, grouping: bool = False, none: str = "n/a") -> str:
    if ns is None:
        return none
    text = f"{ns / 1e6:,.{digits}f}" if grouping else f"{ns / 1e6:.{digits}f}"
    return f"{text} ms" if unit else text


__all__ = ["dur", "ms"]
