"""Host-mode attribution: where phase time went on ranks with no GPU events (CPU runs).

Pure functions over polars frames (no printing). For every phase instance with a
host range (``analyzers.phase_rows.phase_instances``), the range [start, end) is
walked over the CPU ops (``kind == "op"``) recorded on the range's thread
(rank, pid, tid). At each instant the *outermost* op owns the time (ops nest:
``aten::linear`` owns the ``aten::mm`` it calls; an op that starts inside an
earlier one and outlives it owns only the part after the earlier one ended).
Every nanosecond of the range lands in exactly one bucket, in integer ns, so the
buckets sum to ``host_ns`` exactly.

An op's bucket comes from the ordered rule table ``tracekit/data/host_ops.toml``
(kept as data): the first name rule that matches (optionally only inside a module
scope of a given category), else the category of the innermost enclosing module
scope (a ``record_function`` range such as the workload's ``attention``/``moe``
scopes), else the table's default. Scopes marked ``whole`` (collective calls)
claim their whole span like an outermost op: gloo/NCCL waits are not recorded as
ops, and that time is the collective's. Time no op covers is ``host_overhead``
(Python / framework time between ops).

Instance columns mirror ``analyzers.attribution.attribute_instances``: phase,
rank, phase_id, the facts, source, host_start_ns, host_ns, window_start_ns,
window_end_ns and gpu_window_ns (0: no GPU events), ``<bucket>_ns`` for every
HOST_BUCKETS bucket (summing to host_ns), ops (op rows inside the range),
outer_ops (outermost ops that own time).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.buckets import CATEGORIES, HOST_BUCKETS
from tracekit.errors import AnalysisError, TracekitError
from tracekit.finalize.membership import innermost, range_parents
from tracekit.finalize.phases import FACT_COLUMNS
from tracekit.schema import GPU_KINDS, OP, RANGE

from .attribution_views import InstanceColumns, by_phase, by_rank, by_seq
from .phase_rows import instance_head, phase_instances
from .robust import outliers

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

I64 = npt.NDArray[np.int64]

HOST_BUCKET_COLUMNS: Final = tuple(f"{b}_ns" for b in HOST_BUCKETS)
OP_CATEGORIES: Final = tuple(b for b in HOST_BUCKETS if b in CATEGORIES)
OVERHEAD: Final = HOST_BUCKETS.index("host_overhead")
HOST_SUM_COLUMNS: Final = ("host_ns", "gpu_window_ns", *HOST_BUCKET_COLUMNS, "ops", "outer_ops")
_CODE: Final = {b: i for i, b in enumerate(HOST_BUCKETS)}


@dataclass(frozen=True)
class OpRule:
    category: str
    pattern: str
    scope: str | None = None  # only inside a module scope of this category


@dataclass(frozen=True)
class ScopeRule:
    category: str
    pattern: str
    whole: bool = False  # the scope claims its whole span (collective calls)


@dataclass(frozen=True)
class HostRules:
    rules: tuple[OpRule, ...]
    scopes: tuple[ScopeRule, ...]
    default: str


def _cat(value: Any, where: str, origin: str) -> str:
    if value not in OP_CATEGORIES:
        raise TracekitError(f"{where}: category {value!r} is not one of {', '.join(OP_CATEGORIES)}", path=origin)
    return str(value)


def _pattern(value: Any, where: str, origin: str) -> str:
    if not isinstance(value, str) or not value:
        raise TracekitError(f"{where}: pattern must be a non-empty string", path=origin)
    try:
        re.compile(value)
    except re.error as exc:
        raise TracekitError(f"{where}: bad regular expression {value!r} ({exc})", path=origin) from None
    return value


def parse_host_rules(doc: dict[str, Any], origin: str = "built-in") -> HostRules:
    """Rules from a parsed TOML document (format: ``tracekit/data/host_ops.toml``)."""
    rules = []
    for i, item in enumerate(doc.get("rule", []), 1):
        scope = item.get("scope")
        rules.append(
            OpRule(
                _cat(item.get("category"), f"rule {i}", origin),
                _pattern(item.get("pattern"), f"rule {i}", origin),
                None if scope is None else _cat(scope, f"rule {i} scope", origin),
            )
        )
    scopes = [
        ScopeRule(
            _cat(item.get("category"), f"scope {i}", origin),
            _pattern(item.get("pattern"), f"scope {i}", origin),
            bool(item.get("whole", False)),
        )
        for i, item in enumerate(doc.get("scope", []), 1)
    ]
    return HostRules(tuple(rules), tuple(scopes), _cat(doc.get("default", "elementwise"), "default", origin))


@cache
def default_host_rules() -> HostRules:
    """The built-in host-op table."""
    text = resources.files("tracekit").joinpath("data/host_ops.toml").read_text(encoding="utf-8")
    return parse_host_rules(tomllib.loads(text))


def has_gpu_events(events: pl.DataFrame, ranks: Sequence[int] | None = None) -> bool:
    """True when any of ``ranks`` (default: every rank) has a kernel, memcpy or memset row."""
    m = pl.col("kind").is_in(list(GPU_KINDS))
    if ranks is not None:
        m = m & pl.col("rank").is_in(list(ranks))
    return bool(events.select(m.any()).item())


# --- the walk ------------------------------------------------------------------------------------


def _first_match(names: list[str], rules: Sequence[OpRule | ScopeRule]) -> list[int]:
    """Index of the first rule whose pattern is found in each name, or -1."""
    compiled = [re.compile(r.pattern) for r in rules]
    out = []
    for n in names:
        out.append(next((i for i, rx in enumerate(compiled) if rx.search(n)), -1))
    return out


def exclusive_segments(starts: I64, ends: I64) -> tuple[I64, I64, I64]:
    """Outermost-wins coverage: (order, seg_start, seg_end) with disjoint, sorted segments.

    Intervals are taken in (start, longer-first) order; each owns the part of itself
    not covered by the intervals before it (a nested interval owns nothing).
    """
    order = np.lexsort((-(ends - starts), starts)).astype(np.int64)
    s, e = starts[order], ends[order]
    if s.size == 0:
        return order, s, e
    reach = np.maximum.accumulate(e)
    prev = np.concatenate([[np.iinfo(np.int64).min], reach[:-1]])
    seg_s = np.maximum(s, prev)
    seg_e = np.maximum(e, prev)
    return order, seg_s, seg_e


def _thread_codes(ops: pl.DataFrame, scopes: pl.DataFrame, hr: HostRules) -> tuple[I64, I64, I64]:
    """Claimers of one thread: (start, end, bucket code) for ops and whole scopes."""
    o_s = ops.get_column("start_ns").to_numpy().astype(np.int64)
    o_e = o_s + np.maximum(ops.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64), 0)
    s_s = scopes.get_column("start_ns").to_numpy().astype(np.int64)
    s_e = s_s + np.maximum(scopes.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64), 0)
    s_rule = scopes.get_column("_scope").to_numpy().astype(np.int64)
    # innermost enclosing scope of each op (scopes sorted by start, longer first)
    so = np.lexsort((-(s_e - s_s), s_s))
    s_s, s_e, s_rule = s_s[so], s_e[so], s_rule[so]
    if s_s.size:
        enc = innermost(s_s, s_e, range_parents(s_s, s_e), o_s)
    else:
        enc = np.full(o_s.size, -1, dtype=np.int64)
    scope_cat = [hr.scopes[int(s_rule[i])].category if i >= 0 else None for i in enc.tolist()]
    names = ops.get_column("name").fill_null("").to_list()
    codes = np.empty(o_s.size, dtype=np.int64)
    # name rules, first match whose scope condition holds; distinct (name, scope) pairs once
    memo: dict[tuple[str, str | None], int] = {}
    compiled = [(re.compile(r.pattern), r) for r in hr.rules]
    for i, (n, sc) in enumerate(zip(names, scope_cat, strict=True)):
        key = (n, sc)
        c = memo.get(key)
        if c is None:
            cat = next((r.category for rx, r in compiled if (r.scope is None or r.scope == sc) and rx.search(n)), None)
            c = _CODE[cat if cat is not None else (sc if sc is not None else hr.default)]
            memo[key] = c
        codes[i] = c
    whole = np.array([hr.scopes[int(k)].whole for k in s_rule.tolist()], dtype=bool)
    w_codes = np.array([_CODE[hr.scopes[int(k)].category] for k in s_rule.tolist()], dtype=np.int64)
    return (
        np.concatenate([o_s, s_s[whole]]),
        np.concatenate([o_e, s_e[whole]]),
        np.concatenate([codes, w_codes[whole]]),
    )


def host_instances(
    events: pl.DataFrame, phases: Sequence[str] | None = None, rules: HostRules | None = None
) -> pl.DataFrame:
    """One row per phase instance with a host range (module doc); ``phases`` filters.

    ``events`` must carry phase ids on its phase range rows (annotate_phases / prepare).
    """
    hr = rules or default_host_rules()
    inst = phase_instances(
        events.select("kind", "phase", "phase_id", "rank", "pid", "tid", "start_ns", "dur_ns", *FACT_COLUMNS)
    ).filter(pl.col("source") == "host")
    if phases is not None:
        inst = inst.filter(pl.col("phase").is_in(list(phases)))
    inst = inst.sort(["rank", "start_ns", "phase_id"])
    K = inst.height
    buckets = np.zeros((K, len(HOST_BUCKETS)), dtype=np.int64)
    n_ops = np.zeros(K, dtype=np.int64)
    n_outer = np.zeros(K, dtype=np.int64)
    keys = ["rank", "pid", "tid"]
    threads = inst.select(keys).unique(maintain_order=True)
    cols = ["kind", "name", *keys, "start_ns", "dur_ns"]
    host = events.select(cols).filter(pl.col("kind").is_in([OP, RANGE])).join(threads, on=keys, how="semi")
    ops_all = host.filter(pl.col("kind") == OP)
    rng = host.filter(pl.col("kind") == RANGE)
    rng_names = rng.get_column("name").fill_null("").unique().to_list()
    scope_tbl = pl.DataFrame(
        {"name": rng_names, "_scope": _first_match(rng_names, hr.scopes)},
        schema={"name": pl.String, "_scope": pl.Int64},
    ).filter(pl.col("_scope") >= 0)
    scopes_all = rng.join(scope_tbl, on="name", how="inner")
    ops_by = ops_all.partition_by(keys, as_dict=True, maintain_order=True)
    sc_by = scopes_all.partition_by(keys, as_dict=True, maintain_order=True)
    empty_ops = ops_all.clear()
    empty_sc = scopes_all.clear()
    i_s = inst.get_column("start_ns").to_numpy().astype(np.int64)
    i_e = inst.get_column("end_ns").to_numpy().astype(np.int64)
    for key, idx in _groups(inst, keys):
        c_s, c_e, c_code = _thread_codes(ops_by.get(key, empty_ops), sc_by.get(key, empty_sc), hr)
        n_op = ops_by[key].height if key in ops_by else 0
        order, seg_s, seg_e = exclusive_segments(c_s, c_e)
        code = c_code[order]
        is_op = order < n_op
        op_s = np.sort(c_s[:n_op])
        for k in idx:
            a, b = int(i_s[k]), int(i_e[k])
            lo = int(np.searchsorted(seg_e, a, side="right"))
            hi = int(np.searchsorted(seg_s, b, side="left"))
            ln = np.clip(seg_e[lo:hi], a, b) - np.clip(seg_s[lo:hi], a, b)
            # float weights are exact: integer ns summing far below 2**53
            row = np.rint(np.bincount(code[lo:hi], weights=ln, minlength=len(HOST_BUCKETS))).astype(np.int64)
            row[OVERHEAD] = (b - a) - int(ln.sum())
            buckets[k] = row
            n_outer[k] = int(np.count_nonzero((ln > 0) & is_op[lo:hi]))
            n_ops[k] = int(np.searchsorted(op_s, b, side="left") - np.searchsorted(op_s, a, side="left"))
    out = inst.with_columns(
        pl.col("start_ns").alias("host_start_ns"),
        pl.lit(0, pl.Int64).alias("window_start_ns"),
        pl.lit(0, pl.Int64).alias("window_end_ns"),
        pl.lit(0, pl.Int64).alias("gpu_window_ns"),
        *[pl.Series(c, buckets[:, j]) for j, c in enumerate(HOST_BUCKET_COLUMNS)],
        pl.Series("ops", n_ops),
        pl.Series("outer_ops", n_outer),
    )
    return out.select(
        *instance_head(),
        *HOST_BUCKET_COLUMNS,
        "ops",
        "outer_ops",
    )


def _groups(df: pl.DataFrame, keys: list[str]) -> list[tuple[tuple[Any, ...], list[int]]]:
    """(key tuple, row indices) per distinct key, in first-seen order."""
    idx: dict[tuple[Any, ...], list[int]] = {}
    for i, k in enumerate(df.select(keys).iter_rows()):
        idx.setdefault(k, []).append(i)
    return list(idx.items())


# --- views ---------------------------------------------------------------------------------------


HOST_COLUMNS: Final = InstanceColumns(HOST_SUM_COLUMNS, "host_ns", False)


def host_by_rank(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per (phase, rank): instance count and sums (means are sums / instances)."""
    return by_rank(instances, HOST_COLUMNS)


def host_by_phase(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per phase over all ranks."""
    return by_phase(instances, HOST_COLUMNS)


def host_by_seq(instances: pl.DataFrame) -> pl.DataFrame:
    """One row per (phase, power-of-two sequence-length bucket) over all ranks."""
    return by_seq(instances, HOST_COLUMNS)


def check_host_sums(instances: pl.DataFrame) -> None:
    """Raise AssertionError when an instance's buckets do not sum to its host range."""
    bad = instances.filter(pl.sum_horizontal(list(HOST_BUCKET_COLUMNS)) != pl.col("host_ns"))
    if bad.height:
        raise AssertionError(f"{bad.height} instances whose host buckets do not sum to the host range")


def host_report(
    events: pl.DataFrame, phase: str | None = None, rank: int | None = None, rules: HostRules | None = None
) -> dict[str, pl.DataFrame]:
    """Everything ``tracekit attribute`` shows in host mode, as frames.

    Keys: instances, by_rank, by_phase, by_seq, outliers (``analyzers.robust.outliers``
    of host_ns, per (phase, rank)). Phase selection as
    ``analyzers.attribution.prepare``.
    """
    from .attribution import prepare

    ev, phases = prepare(events, phase)
    inst = host_instances(ev, phases, rules)
    if rank is not None:
        ranks = sorted(inst.get_column("rank").unique().to_list())
        if rank not in ranks:
            raise AnalysisError(f"no {'/'.join(phases)} instances on this rank (ranks with instances: {ranks})", rank=rank)
        inst = inst.filter(pl.col("rank") == rank)
    return {
        "instances": inst,
        "by_rank": host_by_rank(inst),
        "by_phase": host_by_phase(inst),
        "by_seq": host_by_seq(inst),
        "outliers": outliers(inst, "host_ns", "host_start_ns"),
    }


__all__ = [
    "HOST_BUCKETS",
    "HOST_BUCKET_COLUMNS",
    "HostRules",
    "OpRule",
    "ScopeRule",
    "check_host_sums",
    "default_host_rules",
    "exclusive_segments",
    "has_gpu_events",
    "host_by_phase",
    "host_by_rank",
    "host_by_seq",
    "host_instances",
    "host_report",
    "parse_host_rules",
]
