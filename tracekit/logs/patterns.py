"""User patterns: home-made instrumentation lines as rows (``--pattern``, ``--patterns FILE``).

A pattern is the line's text with named fields: ``'Target verify: {verify_ms:f} ms/cyc'``. Types:
``{name:d}`` integer, ``{name:f}`` number (``nan``/``inf`` too), ``{name}`` / ``{name:s}`` a word
(no spaces). Any run of spaces in the pattern matches any run of spaces in the line (the seed's
``Target verify: 20.00 ms/cyc ( 94.7%)`` pads); the pattern is searched anywhere in the line, so
the logging prefix and any text after it do not matter. ``{{`` and ``}}`` are literal braces.
A pattern file holds one pattern per line (``#`` comments and blank lines skipped).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import TracekitError
from tracekit.logs.grammars import Kind

_FIELD = re.compile(r"\{(?P<name>[^{}:]*)(?::(?P<type>[^{}]*))?\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_TYPES: dict[str, tuple[Kind, str]] = {
    "d": ("int", r"[-+]?\d+"),
    "f": ("float", r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"),
    "s": ("str", r"\S+"),
    "": ("str", r"\S+"),
}


class PatternError(TracekitError):
    """A user pattern that cannot be compiled (a usage error: exit 2)."""

    exit_code = 2


@dataclass(frozen=True)
class UserPattern:
    text: str
    regex: re.Pattern[str]
    fields: tuple[tuple[str, Kind], ...]  # (column, kind) in order
    keyword: str  # the longest literal part: the fast pre-filter


def _literal(s: str) -> str:
    out = []
    for part in re.split(r"(\s+)", s.replace("{{", "{").replace("}}", "}")):
        out.append(r"\s+" if part and part.isspace() else re.escape(part))
    return "".join(out)


def compile_pattern(text: str) -> UserPattern:
    """One pattern; :class:`PatternError` naming what is wrong."""
    pos = 0
    rx: list[str] = []
    fields: list[tuple[str, Kind]] = []
    literals: list[str] = []
    protected = text.replace("{{", "\0").replace("}}", "\1")
    for m in _FIELD.finditer(protected):
        lit = protected[pos:m.start()].replace("\0", "{{").replace("\1", "}}")
        literals.append(lit)
        rx.append(_literal(lit))
        name, typ = m["name"], (m["type"] or "")
        if not _NAME.match(name):
            raise PatternError(f"pattern {text!r}: field name {name!r} is not an identifier (letters, digits, _)")
        if typ not in _TYPES:
            raise PatternError(f"pattern {text!r}: field {name!r} has type {typ!r} (use d, f or s)")
        if any(n == name for n, _k in fields):
            raise PatternError(f"pattern {text!r}: field {name!r} appears twice")
        kind, val = _TYPES[typ]
        rx.append(f"(?P<{name}>{val})")
        fields.append((name, kind))
        pos = m.end()
    tail = protected[pos:].replace("\0", "{{").replace("\1", "}}")
    if "{" in tail.replace("{{", "") or "}" in tail.replace("}}", ""):
        raise PatternError(f"pattern {text!r}: unbalanced brace (write {{{{ or }}}} for a literal one)")
    literals.append(tail)
    rx.append(_literal(tail))
    if not fields:
        raise PatternError(f"pattern {text!r} names no field (e.g. {{verify_ms:f}})")
    keyword = max((p.strip() for lit in literals for p in re.split(r"\s+", lit.replace("{{", "{").replace("}}", "}"))),
                  key=len, default="")
    try:
        regex = re.compile("".join(rx))
    except re.error as exc:  # pragma: no cover - every part is escaped
        raise PatternError(f"pattern {text!r}: {exc}") from None
    return UserPattern(text=text, regex=regex, fields=tuple(fields), keyword=keyword)


def read_pattern_file(path: str) -> list[str]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise PatternError(f"cannot read the pattern file ({exc})", path=path) from None
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


def compile_patterns(texts: list[str], reserved: set[str]) -> list[UserPattern]:
    """All patterns; a field named like a built-in column, or twice with two types, is refused."""
    out = [compile_pattern(t) for t in texts]
    kinds: dict[str, Kind] = {}
    for p in out:
        for name, kind in p.fields:
            if name in reserved:
                raise PatternError(f"pattern {p.text!r}: field {name!r} is a built-in column; choose another name")
            if kinds.setdefault(name, kind) != kind:
                raise PatternError(f"field {name!r} has two types in the patterns ({kinds[name]}, {kind})")
    return out


__all__ = ["PatternError", "UserPattern", "compile_pattern", "compile_patterns", "read_pattern_file"]
