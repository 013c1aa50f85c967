"""Kernel categories: an ordered table of name rules (``tracekit/data/categories.toml``).

    rules = load_rules("my.toml")        # the user's rules first, then the built-in table
    events = categorize(events, rules)    # fills `category` on GPU events, `coll_op` on named collectives
    unmatched_kernels(events, rules)      # kernels no rule matched, by total time

Rules are searched (``re.search``) in the full kernel name, first match wins.
memcpy / memset events are ``memory`` whatever their name; kernels no rule matches
are ``other`` and reported, never dropped.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit import buckets, schema
from tracekit.errors import TracekitError
from tracekit.finalize.names import normalize_names

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CATEGORIES: Final = schema.CATEGORIES
COMM_CATEGORIES: Final = buckets.COMM_CATEGORIES
COLL_OPS: Final = ("allreduce", "allgather", "reducescatter", "broadcast", "sendrecv", "alltoall", "dispatch", "combine")
OTHER: Final = "other"
MEMORY: Final = "memory"


@dataclass(frozen=True)
class Rule:
    category: str
    pattern: str
    coll_op: str | None = None
    note: str = ""
    origin: str = "built-in"

    @property
    def regex(self) -> re.Pattern[str]:
        return _compile(self.pattern)


@cache
def _compile(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _parse_rules(doc: dict[str, Any], origin: str, *, check_regex: bool = True) -> list[Rule]:
    raw = doc.get("rule")
    if not isinstance(raw, list) or not raw:
        raise TracekitError("category file has no [[rule]] entries", path=origin)
    rules: list[Rule] = []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, dict):
            raise TracekitError(f"rule {i} is not a table", path=origin)
        cat = item.get("category")
        pat = item.get("pattern")
        if cat not in CATEGORIES:
            raise TracekitError(f"rule {i}: category {cat!r} is not one of {', '.join(CATEGORIES)}", path=origin)
        if not isinstance(pat, str) or not pat:
            raise TracekitError(f"rule {i}: pattern must be a non-empty string", path=origin)
        if check_regex:
            try:
                re.compile(pat)
            except re.error as exc:
                raise TracekitError(f"rule {i}: bad regular expression {pat!r} ({exc})", path=origin) from None
        op = item.get("coll_op")
        if op is not None and op not in COLL_OPS:
            raise TracekitError(f"rule {i}: coll_op {op!r} is not one of {', '.join(COLL_OPS)}", path=origin)
        unknown = set(item) - {"category", "pattern", "coll_op", "note"}
        if unknown:
            raise TracekitError(f"rule {i}: unknown key(s) {', '.join(sorted(unknown))}", path=origin)
        rules.append(Rule(category=cat, pattern=pat, coll_op=op, note=str(item.get("note", "")), origin=origin))
    return rules


@cache
def default_rules() -> tuple[Rule, ...]:
    """The built-in ordered rule table."""
    text = resources.files("tracekit").joinpath("data/categories.toml").read_text(encoding="utf-8")
    # the built-in patterns are compiled by the tests; matching runs in polars' regex engine
    return tuple(_parse_rules(tomllib.loads(text), "built-in", check_regex=False))


def read_rules_file(path: str | os.PathLike[str]) -> list[Rule]:
    """Rules from a user TOML file (same format as the built-in table)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TracekitError(f"cannot read category file ({exc.strerror})", path=str(p)) from None
    except UnicodeDecodeError:
        raise TracekitError("category file is not UTF-8 text", path=str(p)) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TracekitError(f"not valid TOML ({exc})", path=str(p)) from None
    return _parse_rules(doc, str(p))


def load_rules(extra: str | os.PathLike[str] | None = None) -> list[Rule]:
    """The user's rules (if any) followed by the built-in table: user rules win."""
    return ([*read_rules_file(extra)] if extra is not None else []) + list(default_rules())


def match_name(name: str, rules: list[Rule] | tuple[Rule, ...] | None = None) -> Rule | None:
    """The first rule matching ``name`` (or None)."""
    for rule in rules if rules is not None else default_rules():
        if rule.regex.search(name):
            return rule
    return None


def _rule_mask(names: pl.Series, rule: Rule) -> pl.Series:
    """Which ``names`` the rule matches: polars' (Rust) regex engine, Python's ``re`` for the
    rare pattern it does not accept (look-arounds, back-references)."""
    try:
        return names.str.contains(rule.pattern).fill_null(False)
    except pl.exceptions.PolarsError:
        rx = rule.regex
        return pl.Series([rx.search(n) is not None for n in names.to_list()], dtype=pl.Boolean)


def _first_match(names: list[str], rules: tuple[Rule, ...]) -> list[int]:
    """Index of the first rule matching each name, -1 for none: one polars query over every rule
    (a chain of when/then: first match wins); rule by rule (``_rule_mask``) when polars refuses
    a pattern."""
    if not rules:
        return [-1] * len(names)
    s = pl.Series("name", names, dtype=pl.String)
    try:
        name = pl.col("name")
        chain: Any = pl.when(name.str.contains(rules[0].pattern)).then(0)
        for i, rule in enumerate(rules[1:], 1):
            chain = chain.when(name.str.contains(rule.pattern)).then(i)
        out: list[int] = s.to_frame().select(chain.otherwise(-1).alias("i")).to_series().to_list()
        return out
    except pl.exceptions.PolarsError:
        pass
    first = pl.Series([-1] * len(names), dtype=pl.Int64)
    open_ = pl.Series([True] * len(names), dtype=pl.Boolean)
    for i, rule in enumerate(rules):
        if not open_.any():
            break
        hit = _rule_mask(s, rule) & open_
        if hit.any():
            first = first.set(hit, i)
            open_ = open_ & ~hit
    return first.to_list()


# rules -> {kernel name: index of its first matching rule, -1 for none}: each distinct name is
# matched once per process and rule table (categorize, annotate_collectives and comm_mask ask
# for the same names; rules are frozen, so a table of other rules has an entry of its own)
_MATCHED: dict[tuple[Rule, ...], dict[str, int]] = {}
_MATCHED_MAX = 1 << 18  # names remembered over all tables; then it starts again


def _first_rules(names: list[str], rules: tuple[Rule, ...]) -> list[int]:
    memo = _MATCHED.get(rules)
    if memo is None:
        memo = _MATCHED[rules] = {}
    new = [n for n in dict.fromkeys(names) if n not in memo]
    if new:
        if sum(map(len, _MATCHED.values())) + len(new) > _MATCHED_MAX:
            _MATCHED.clear()
            memo = _MATCHED[rules] = {}
        memo.update(zip(new, _first_match(new, rules), strict=True))
    return [memo[n] for n in names]


def _outcomes(first: list[int], use: tuple[Rule, ...]) -> tuple[list[str], list[str | None]]:
    """(category, coll_op) of each name from the index of its first matching rule (-1: none matched:
    "other", no op): the one reading of a match, for rule_table and categorize."""
    return ([use[i].category if i >= 0 else OTHER for i in first],
            [use[i].coll_op if i >= 0 else None for i in first])


def rule_table(names: list[str], rules: list[Rule] | tuple[Rule, ...] | None = None) -> pl.DataFrame:
    """The rule table applied to distinct kernel ``names``: columns name, ``_cat`` (category, "other"
    when no rule matches), ``_op`` (the rule's ``coll_op``: the one name -> collective-op mapping) and
    ``_matched``; first matching rule wins. Each name is matched once per process and rule table."""
    use = tuple(rules) if rules is not None else default_rules()
    first = _first_rules(names, use)
    cats, ops = _outcomes(first, use)
    return pl.DataFrame(
        {
            "name": names,
            "_cat": cats,
            "_op": ops,
            "_matched": [i >= 0 for i in first],
        },
        schema={"name": pl.String(), "_cat": pl.String(), "_op": pl.String(), "_matched": pl.Boolean()},
    )


def categorize(events: pl.DataFrame, rules: list[Rule] | tuple[Rule, ...] | None = None) -> pl.DataFrame:
    """Fill ``category`` on kernel / memcpy / memset rows that have none (a category already set is
    kept); set ``coll_op`` on collectives recognised by name where the trace gave none. Host rows keep
    a null category. Pure: returns a new frame."""
    use = tuple(rules) if rules is not None else default_rules()
    kind = pl.col("kind")
    is_kernel = kind == schema.KERNEL
    name = pl.col("name")
    kernel_names: list[str] = events.select(name.filter(is_kernel).unique().drop_nulls()).to_series().to_list()
    first = _first_rules(kernel_names, use)  # the rule table's match (rule_table), without its frame
    cats, ops = _outcomes(first, use)
    cat_map = dict(zip(kernel_names, cats, strict=True))
    op_map = {n: op for n, op in zip(kernel_names, ops, strict=True) if op is not None}
    category = (
        pl.when(pl.col("category").is_not_null()).then(pl.col("category"))  # set by the writer: kept
        .when(is_kernel).then(name.replace_strict(cat_map, default=OTHER, return_dtype=pl.String))
        .when(kind.is_in([schema.MEMCPY, schema.MEMSET])).then(pl.lit(MEMORY))
        .otherwise(pl.col("category"))
    )
    if events.schema.get("category") == schema.CATEGORY_DTYPE:  # a conformed table stays conformed
        category = category.cast(schema.CATEGORY_DTYPE)  # every rule's category is in the vocabulary
    cols = [category.alias("category")]
    if op_map:
        cols.append(
            pl.when(is_kernel & pl.col("coll_op").is_null())
            .then(name.replace_strict(op_map, default=None, return_dtype=pl.String))
            .otherwise(pl.col("coll_op")).alias("coll_op")
        )
    return events.with_columns(cols)


def unmatched_kernels(events: pl.DataFrame, rules: list[Rule] | tuple[Rule, ...] | None = None) -> pl.DataFrame:
    """Kernels no rule matches: name, normalised name, count and total duration (ns), longest first."""
    use = rules if rules is not None else default_rules()
    k = events.filter(pl.col("kind") == schema.KERNEL)
    if "category" in k.columns:
        k = k.filter(pl.col("category").is_null() | (pl.col("category") == OTHER))
    names = k.get_column("name").unique().drop_nulls().to_list()
    table = rule_table(names, use).filter(~pl.col("_matched")).select("name")
    hit = k.join(table, on="name", how="semi")
    agg = hit.group_by("name").agg(pl.len().alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
    return agg.with_columns(normalize_names(agg.get_column("name")).alias("normalized")).select(
        "name", "normalized", "count", "total_ns"
    ).sort(["total_ns", "name"], descending=[True, False])


__all__ = [
    "CATEGORIES",
    "COLL_OPS",
    "COMM_CATEGORIES",
    "Rule",
    "categorize",
    "default_rules",
    "load_rules",
    "match_name",
    "read_rules_file",
    "rule_table",
    "unmatched_kernels",
]
