"""The log run: one Parquet file, one row per matched line (or metrics interval), and a manifest.

The manifest is JSON in the file's key-value metadata under ``tracekit_logs`` (a trace run's is
under ``tracekit``: the two are never mistaken for each other). Columns (docs/logs.md):

- where: ``file`` (index into the manifest's ``sources``), ``line`` (1-based; for a metrics
  interval the index of its second snapshot), ``time_ns`` (the interval's end: the line's
  timestamp, server wall clock read as UTC, ns since the epoch; null when the line has none),
  ``interval_ns`` (since the previous row of the same file, record and rank tags);
- what: ``engine``, ``grammar``, ``version`` (the grammar's version family the line matched),
  ``record`` (decode, prefill, finish, engine_stats, spec_stats, graph_mode, graph_stats,
  metrics_interval, user);
- tags: ``proc``, ``pid``, ``dp``, ``tp``, ``ep``, ``pp``, ``engine_index``, ``iter``;
- every grammar field as a typed column (:func:`tracekit.logs.grammars.column_kinds`), metrics
  columns (:data:`METRIC_COLUMNS`) and the user patterns' fields;
- derived, one definition each: ``tokens_per_req`` (``#token / #running-req``),
  ``accept_length``, ``accept_rate``, ``draft_tokens_per_verify``, ``accept_pos_cond``
  (:mod:`tracekit.logs.accept`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit.errors import RunError
from tracekit.inputs import decode_json
from tracekit.logs.grammars import KIND_DTYPES, Kind, column_kinds

LOG_SCHEMA_VERSION: Final = 1
MANIFEST_KEY: Final = "tracekit_logs"

_DTYPES: Final[dict[str, pl.DataType]] = {
    "Int64": pl.Int64(), "Float64": pl.Float64(), "Boolean": pl.Boolean(), "String": pl.String(),
    "List(Float64)": pl.List(pl.Float64()), "Int32": pl.Int32(),
}

BASE_COLUMNS: Final[dict[str, str]] = {
    "file": "Int32", "line": "Int64", "time_ns": "Int64", "engine": "String", "grammar": "String",
    "version": "String", "record": "String", "proc": "String", "pid": "Int64", "dp": "Int32", "tp": "Int32",
    "ep": "Int32", "pp": "Int32", "engine_index": "Int32", "iter": "Int64", "graph_backend": "String",
}
# metrics intervals (tracekit.logs.prometheus): counters' deltas over the interval
METRIC_COLUMNS: Final[dict[str, str]] = {
    "drafts": "Int64", "generation_tokens": "Int64", "verify_calls": "Int64",
    "verify_time_s": "Float64", "decode_time_s": "Float64", "extend_time_s": "Float64",
    "draft_time_s": "Float64", "draft_extend_time_s": "Float64",
}
DERIVED_COLUMNS: Final[dict[str, str]] = {
    "interval_ns": "Int64", "tokens_per_req": "Float64", "draft_tokens_per_verify": "Int64",
    "accept_length": "Float64", "accept_rate": "Float64", "accept_pos_cond": "List(Float64)",
}
RECORDS: Final = ("decode", "prefill", "finish", "engine_stats", "spec_stats", "graph_mode", "graph_stats",
                  "metrics_interval", "user")


def parsed_schema(user: Mapping[str, Kind]) -> pl.Schema:
    """The columns the parser fills (before :func:`tracekit.logs.accept.unify`)."""
    cols: dict[str, pl.DataType] = {k: _DTYPES[v] for k, v in BASE_COLUMNS.items()}
    for name, kind in {**column_kinds(), **user}.items():
        cols.setdefault(name, _DTYPES[KIND_DTYPES[kind]])
    for name, dt in METRIC_COLUMNS.items():
        cols.setdefault(name, _DTYPES[dt])
    cols["interval_ns"] = pl.Int64()
    cols["tokens_per_req"] = pl.Float64()
    return pl.Schema(cols)


def reserved_columns() -> set[str]:
    return {*BASE_COLUMNS, *column_kinds(), *METRIC_COLUMNS, *DERIVED_COLUMNS}


def head_bytes(path: str | os.PathLike[str], n: int) -> bytes | None:
    """The first ``n`` bytes of a regular file; None for anything else or an unreadable file."""
    p = Path(path)
    if not p.is_file():
        return None
    try:
        with open(p, "rb") as fh:
            return fh.read(n)
    except OSError:
        return None


def read_log_manifest(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of a log run, or None when ``path`` is not one (any other file)."""
    p = Path(path)
    if head_bytes(p, 4) != b"PAR1":
        return None
    try:
        meta = pl.read_parquet_metadata(p)
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    raw = meta.get(MANIFEST_KEY)
    if raw is None:
        return None
    man = decode_json(raw, what="log-run manifest", path=str(p), error=RunError)
    if not isinstance(man, dict) or man.get("schema_version") != LOG_SCHEMA_VERSION:
        got = man.get("schema_version") if isinstance(man, dict) else None
        raise RunError(f"log run schema version {got} is not supported (this tracekit reads "
                       f"{LOG_SCHEMA_VERSION})", path=str(p))
    return man


def is_log_run(path: str | os.PathLike[str]) -> bool:
    return read_log_manifest(path) is not None


def read_log_rows(path: str | os.PathLike[str]) -> pl.DataFrame:
    try:
        return pl.read_parquet(Path(path))
    except (OSError, pl.exceptions.PolarsError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RunError(f"cannot read the log run ({exc.__class__.__name__}: {first})", path=str(path)) from None


__all__ = ["BASE_COLUMNS", "DERIVED_COLUMNS", "LOG_SCHEMA_VERSION", "MANIFEST_KEY", "METRIC_COLUMNS", "RECORDS", "head_bytes",
           "is_log_run", "parsed_schema", "read_log_manifest", "read_log_rows", "reserved_columns"]
