"""The rows the log analyses read, with their operating point.

- :func:`intervals`: one row per stats interval — SGLang ``Decode batch`` lines, vLLM ``Engine``
  lines (with the ``SpecDecoding`` / ``Speculative metrics`` line printed after them in the same
  file attached), metrics intervals. Columns: ``file``, ``line``, ``time_ns``, ``interval_ns``,
  ``engine``, ``source`` (log / metrics), ``dp``, ``tp``, ``running_req`` (batch size),
  ``tokens_per_req`` (``#token / #running-req``: the mean KV length per request), ``graph``,
  ``gen_throughput`` (tok/s of all requests over the interval), ``per_req_tps``
  (``gen_throughput / running_req``), ``accept_length``, ``accept_rate``,
  ``draft_tokens_per_verify``, ``verify_ns`` / ``draft_ns`` (metrics: target-verify / draft +
  draft-extend device time per verify call).
- :func:`user_rows`: the user-pattern rows, each with the operating point (``running_req``,
  ``tokens_per_req``, ``graph``) of the last interval row before it in the same file (a line
  printed between two stats lines ran at the batch the earlier one reported); null when none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import polars as pl

INTERVAL_COLUMNS: Final = ("file", "line", "time_ns", "interval_ns", "engine", "source", "dp", "tp", "running_req",
                           "tokens_per_req", "graph", "gen_throughput", "per_req_tps", "accept_length", "accept_rate",
                           "draft_tokens_per_verify", "verify_ns", "draft_ns")
CONTEXT: Final = ("running_req", "tokens_per_req", "graph")
_SPEC: Final = ("accept_length", "accept_rate", "draft_tokens_per_verify")


def intervals(rows: pl.DataFrame) -> pl.DataFrame:
    dec = rows.filter(pl.col("record").is_in(["decode", "engine_stats", "metrics_interval"]))
    spec = rows.filter(pl.col("record") == "spec_stats").select("file", "line", *[pl.col(c).alias(f"_s_{c}") for c in _SPEC])
    if spec.height and dec.height:
        eng = dec.filter(pl.col("record") == "engine_stats").select("file", "line").sort("file", "line")
        owner = spec.sort("file", "line").join_asof(eng.rename({"line": "_owner"}).with_columns(
            pl.col("_owner").alias("line")), on="line", by="file", strategy="backward", check_sortedness=False)
        owner = owner.filter(pl.col("_owner").is_not_null()).unique(["file", "_owner"], keep="first")
        dec = dec.join(owner.drop("line").rename({"_owner": "line"}), on=["file", "line"], how="left")
        dec = dec.with_columns([pl.coalesce(pl.col(c), pl.col(f"_s_{c}")).alias(c) for c in _SPEC])
    calls = pl.col("verify_calls")
    verify_ns = pl.when(calls > 0).then((pl.col("verify_time_s") * 1e9 / calls).round(0).cast(pl.Int64))
    draft_s = pl.col("draft_time_s") + pl.col("draft_extend_time_s").fill_null(0.0)
    draft_ns = pl.when(calls > 0).then((draft_s * 1e9 / calls).round(0).cast(pl.Int64))
    return dec.select(
        "file", "line", "time_ns", "interval_ns", "engine",
        pl.when(pl.col("record") == "metrics_interval").then(pl.lit("metrics")).otherwise(pl.lit("log")).alias("source"),
        "dp", "tp", "running_req", "tokens_per_req", "graph", "gen_throughput",
        pl.when(pl.col("running_req") > 0).then(pl.col("gen_throughput") / pl.col("running_req")).alias("per_req_tps"),
        "accept_length", "accept_rate", "draft_tokens_per_verify", verify_ns.alias("verify_ns"),
        draft_ns.alias("draft_ns"),
    ).sort("file", "line")


def user_fields(manifest: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, kind) of the numeric user-pattern fields of a log run."""
    from tracekit.logs.patterns import compile_pattern

    out: list[tuple[str, str]] = []
    for text in manifest.get("patterns", []):
        for name, kind in compile_pattern(str(text)).fields:
            if kind in ("int", "float") and all(n != name for n, _k in out):
                out.append((name, kind))
    return out


def user_rows(rows: pl.DataFrame, fields: list[str]) -> pl.DataFrame:
    users = rows.filter(pl.col("record") == "user").select("file", "line", "time_ns", *fields).sort("file", "line")
    ctx = intervals(rows).filter(pl.col("source") == "log").select("file", "line", *CONTEXT)
    if ctx.height == 0:
        return users.with_columns(pl.lit(None, pl.Int64).alias("running_req"),
                                  pl.lit(None, pl.Float64).alias("tokens_per_req"),
                                  pl.lit(None, pl.Boolean).alias("graph"))
    ctx = ctx.rename({"line": "_ctx_line"}).with_columns(pl.col("_ctx_line").alias("line"))
    return users.join_asof(ctx, on="line", by="file", strategy="backward", check_sortedness=False).drop("_ctx_line")


__all__ = ["CONTEXT", "INTERVAL_COLUMNS", "intervals", "user_fields", "user_rows"]
