"""One line against the grammars: a row, a half match (which field broke), or nothing.

Pure functions over one decoded line; :mod:`tracekit.logs.parse` streams files through them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from tracekit.logs.grammars import GRAMMARS, STARTUP, Field, Grammar, Kind
from tracekit.logs.patterns import UserPattern
from tracekit.logs.prefix import parse_prefix

_KEYED_VALUE = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"


class FieldProblem(ValueError):
    """A known field whose value does not parse, or a required field that is missing."""

    def __init__(self, field_label: str, problem: str) -> None:
        self.field_label = field_label
        self.problem = problem
        super().__init__(f"field {field_label!r}: {problem}")


@dataclass
class Match:
    grammar: str
    row: dict[str, Any]
    unknown: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HalfMatch:
    grammar: str
    field: str
    problem: str


def value(kind: Kind, raw: str, unit: str, label: str) -> Any:
    """The typed value of one printed field (FieldProblem when it does not parse)."""
    if not unit:  # the common case first: a plain number
        try:
            if kind == "int":
                return int(raw)
            if kind == "float":
                x = float(raw)
                return None if x != x else x
        except ValueError:
            pass
    v = raw.strip()
    if unit and v.endswith(unit):
        v = v[: -len(unit)].strip()
    try:
        if kind == "int":
            return int(v)
        if kind in ("float", "pct"):
            if kind == "pct" and v.endswith("%"):
                v = v[:-1]
            x = float(v)
            if math.isnan(x):
                return None
            return x
        if kind == "bool":
            if v in ("True", "False"):
                return v == "True"
            raise ValueError(v)
        if kind == "rates":
            return [float(p) for p in v.split(",") if p.strip()] if v.strip() else []
    except ValueError:
        what = {"int": "an integer", "float": "a number", "pct": "a percentage", "bool": "True or False",
                "rates": "a list of numbers"}[kind]
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise FieldProblem(label, f"{shown!r} is not {what}") from None
    return v


# per grammar, keyed by name (hashing a frozen Grammar hashes all its fields: too slow per line)
_TABLES: dict[str, dict[str, Field]] = {}
_LABELS: dict[str, dict[str, str]] = {}
_REWRITES: dict[str, tuple[tuple[re.Pattern[str], str, str], ...]] = {}
_KEYED: dict[str, tuple[tuple[Field, re.Pattern[str]], ...]] = {}


def _table(g: Grammar) -> dict[str, Field]:
    t = _TABLES.get(g.name)
    if t is None:
        t = _TABLES[g.name] = g.field_by_label()
    return t


def _labels(g: Grammar) -> dict[str, str]:
    t = _LABELS.get(g.name)
    if t is None:
        t = _LABELS[g.name] = {f.column: f.label for f in g.fields}
    return t


def _rewrites(g: Grammar) -> tuple[tuple[re.Pattern[str], str, str], ...]:
    t = _REWRITES.get(g.name)
    if t is None:
        t = _REWRITES[g.name] = tuple((re.compile(rx), label, col) for rx, label, col in g.label_rewrites)
    return t


def _keyed(g: Grammar) -> tuple[tuple[Field, re.Pattern[str]], ...]:
    t = _KEYED.get(g.name)
    if t is None:
        t = _KEYED[g.name] = tuple((f, re.compile(rf"'{re.escape(f.label)}': ({_KEYED_VALUE})")) for f in g.fields)
    return t


def _fields(g: Grammar, body: str, row: dict[str, Any]) -> tuple[list[str], set[str]]:
    """Read a ``label: value, ...`` body into ``row``: (unknown labels, labels seen)."""
    table = _table(g)
    if g.strip_end and body.endswith(g.strip_end):
        body = body[: -len(g.strip_end)]
    items: list[str] = []
    for part in body.split(", "):
        if ": " not in part and items:
            prev = table.get(items[-1].partition(": ")[0])
            if prev is not None and prev.kind == "rates":
                items[-1] += ", " + part  # the next value of a list (per-position rates)
                continue
        items.append(part)
    unknown: list[str] = []
    seen: set[str] = set()
    for item in items:
        label, sep, raw = item.partition(": ")
        if not sep:
            if item.strip():
                unknown.append(item.strip()[:60])
            continue
        f = table.get(label)
        tag: tuple[str, str] | None = None
        if f is None:
            for rx, canon, col in _rewrites(g):
                m = rx.match(label)
                if m is not None:
                    f, tag = table.get(canon), (col, m.group(1))
                    break
        if f is None:
            unknown.append(label[:60])
            continue
        seen.add(label)
        if f.column in row and row[f.column] is not None:
            continue  # the first of two labels of one column wins (a repeated label)
        row[f.column] = value(f.kind, raw, f.unit, label)
        if tag is not None:
            row[tag[0]] = tag[1]
        if f.column == "graph":
            row["graph_backend"] = label
    return unknown, seen


def match_grammar(g: Grammar, line: str, year: int) -> Match | HalfMatch | None:
    """``line`` read by ``g``: a row, a half match, or None when its anchor is not there."""
    m = g.anchor.search(line)
    if m is None:
        return None
    pre = parse_prefix(line[: m.start()], year)
    row: dict[str, Any] = {"time_ns": pre.time_ns, "proc": pre.proc, **pre.tags}
    groups = m.groupdict()
    if groups.get("iter") is not None:
        row["iter"] = int(groups["iter"])
    if groups.get("engine_index") is not None:
        row["engine_index"] = int(groups["engine_index"])
    unknown: list[str] = []
    seen: set[str] = set()
    try:
        if g.mode == "fields":
            unknown, seen = _fields(g, line[m.end():].rstrip("\r\n").rstrip().rstrip(","), row)
        elif g.mode == "regex":
            for f in g.fields:
                raw = groups.get(f.label)
                if raw is not None:
                    row[f.column] = value(f.kind, raw, f.unit, f.label)
                    seen.add(f.label)
        else:
            rest = line[m.end():]
            for f, rx in _keyed(g):
                km = rx.search(rest)
                if km is not None:
                    row[f.column] = value(f.kind, km.group(1), f.unit, f.label)
                    seen.add(f.label)
    except FieldProblem as exc:
        return HalfMatch(g.name, exc.field_label, exc.problem)
    labels = _labels(g)
    for col in g.required:
        if row.get(col) is None:
            return HalfMatch(g.name, labels.get(col, col), "missing (a truncated line, or a format this "
                                                           "tracekit does not know)")
    row["version"] = _version(g, groups.get("sep"), seen)
    return Match(g.name, row, unknown)


def _version(g: Grammar, sep: str | None, seen: set[str]) -> str:
    for v in g.versions:
        if v.sep is not None and v.sep != sep:
            continue
        if any(label not in seen for label in v.has) or any(label in seen for label in v.lacks):
            continue
        return v.family
    return "unknown"


def match_user(p: UserPattern, line: str, year: int) -> Match | HalfMatch | None:
    m = p.regex.search(line)
    if m is None:
        return None
    pre = parse_prefix(line[: m.start()], year)
    row: dict[str, Any] = {"time_ns": pre.time_ns, "proc": pre.proc, **pre.tags, "version": "user"}
    try:
        for name, kind in p.fields:
            row[name] = value(kind, m.group(name), "", name)
    except FieldProblem as exc:  # pragma: no cover - the regex only admits parseable values
        return HalfMatch(f"pattern {p.text!r}", exc.field_label, exc.problem)
    return Match(f"user: {p.text}", row)


def match_line(line: str, patterns: list[UserPattern], year: int) -> list[Match | HalfMatch]:
    """Every grammar and user pattern that ``line`` matches (usually one)."""
    out: list[Match | HalfMatch] = []
    for g in GRAMMARS:
        if g.keyword in line:
            r = match_grammar(g, line, year)
            if r is not None:
                out.append(r)
    for p in patterns:
        if p.keyword in line:
            r = match_user(p, line, year)
            if r is not None:
                out.append(r)
    return out


# --- start-up lines: facts for the manifest -----------------------------------------------------

def split_args(body: str, limit: int = 400) -> dict[str, str]:
    """``a=1, b='x, y', c=Cfg(d=2)`` -> {a: '1', b: "'x, y'", c: 'Cfg(d=2)'} (top-level commas only)."""
    out: dict[str, str] = {}
    depth, quote, start = 0, "", 0
    parts: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
        i += 1
    parts.append(body[start:])
    for part in parts:
        k, sep, v = part.strip().partition("=")
        if sep and k.isidentifier():
            out[k] = v.strip()[:limit]
    return out


def startup_fact(line: str, known: Container[str] = ()) -> tuple[str, str, dict[str, Any]] | None:
    """(engine, kind, facts) of a start-up line (:data:`tracekit.logs.grammars.STARTUP`), or None;
    a kind in ``known`` (already found in this file: the first one counts) is matched, not read."""
    for st in STARTUP:
        if st.keyword not in line:
            continue
        if st.kind in known:
            return st.engine, st.kind, {}
        m = st.regex.search(line)
        if m is None:
            continue
        if st.kind == "capture_bs":
            return st.engine, st.kind, {"capture_bs": [int(x) for x in re.findall(r"\d+", m["body"])]}
        facts: dict[str, Any] = dict(split_args(m["body"]))
        if st.kind == "engine_config":
            facts = {"version": m["version"], "config": facts}
        return st.engine, st.kind, facts
    return None


__all__ = ["FieldProblem", "HalfMatch", "Match", "match_grammar", "match_line", "match_user", "split_args",
           "startup_fact", "value"]
