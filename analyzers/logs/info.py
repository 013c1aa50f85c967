"""``tracekit info`` on a log run: what the logs cover, per file."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from tracekit.analyzers.logs.stats import Summary, summarize
from tracekit.analyzers.logs.views import intervals, user_fields


@dataclass(frozen=True)
class FileInfo:
    path: str
    kind: str  # log | metrics
    engine_version: str | None
    lines: int
    rows_by_grammar: dict[str, int]
    versions: dict[str, int]  # "grammar: version family" -> rows
    unmatched: int
    half_matched: int
    first_ns: int | None
    last_ns: int | None
    intervals: int
    interval_ns: Summary
    graph_intervals: dict[str, int]  # "True" / "False" / "unknown" -> intervals
    graph_modes: dict[str, int]  # vLLM cudagraph_mode set by a fallback warning -> lines
    graph_batches: dict[str, int]  # vLLM --cudagraph-metrics: runtime mode -> batches
    running_req: Summary
    tokens_per_req: Summary
    ranks: dict[str, list[int]]  # dp / tp values seen
    speculation: bool
    draft_tokens_per_verify: int | None
    draft_tokens_source: str | None
    server_args: dict[str, str]
    user_fields: dict[str, int]  # field -> rows


@dataclass(frozen=True)
class LogInfo:
    path: str
    clock: str
    files: tuple[FileInfo, ...]
    patterns: tuple[str, ...]


SERVER_KEYS = ("model_path", "tp_size", "dp_size", "ep_size", "speculative_algorithm", "speculative_num_steps",
               "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend", "cuda_graph_max_bs",
               "disable_cuda_graph", "decode_log_interval", "model", "tensor_parallel_size", "speculative_config")


def log_info(rows: pl.DataFrame, manifest: Mapping[str, Any], path: str) -> LogInfo:
    ivs = intervals(rows)
    out = []
    user = {name for name, _kind in user_fields(manifest)}
    for i, src in enumerate(manifest["sources"]):
        mine = rows.filter(pl.col("file") == i)
        iv = ivs.filter(pl.col("file") == i)
        times = mine.get_column("time_ns").drop_nulls()
        versions = mine.group_by("grammar", "version").len().sort("grammar", "version")
        graph = iv.group_by("graph").len()
        startup = src.get("startup", {})
        args = {**startup.get("server_args", {}), **startup.get("engine_config", {}).get("config", {})}
        k = src.get("draft_tokens_per_verify")
        out.append(FileInfo(
            path=src["path"], kind=src["kind"], engine_version=src.get("engine_version"), lines=src["lines"],
            rows_by_grammar=dict(src["matched"]),
            versions={f"{g}: {v}": n for g, v, n in versions.iter_rows()},
            unmatched=src["unmatched"], half_matched=src["half_matched"],
            first_ns=None if times.len() == 0 else int(times.min()),  # type: ignore[arg-type]
            last_ns=None if times.len() == 0 else int(times.max()),  # type: ignore[arg-type]
            intervals=iv.height, interval_ns=summarize(iv.get_column("interval_ns")),
            graph_intervals={"unknown" if g is None else str(g): n for g, n in graph.iter_rows()},
            graph_modes={str(m): int(n) for m, n in mine.filter(pl.col("record") == "graph_mode")
                         .group_by("graph_mode").len().sort("graph_mode").iter_rows()},
            graph_batches={str(m): int(n) for m, n in mine.filter(pl.col("record") == "graph_stats")
                           .group_by("graph_runtime_mode").agg(pl.col("graph_batches").sum())
                           .sort("graph_runtime_mode").iter_rows()},
            running_req=summarize(iv.get_column("running_req")),
            tokens_per_req=summarize(iv.get_column("tokens_per_req")),
            ranks={t: sorted(int(x) for x in mine.get_column(t).drop_nulls().unique()) for t in ("dp", "tp")},
            speculation=iv.get_column("accept_length").drop_nulls().len() > 0,
            draft_tokens_per_verify=None if k is None else int(k["k"]),
            draft_tokens_source=None if k is None else str(k["source"]),
            server_args={key: str(args[key]) for key in SERVER_KEYS if key in args},
            user_fields={c: int(mine.get_column(c).drop_nulls().len()) for c in sorted(user) if c in mine.columns},
        ))
    return LogInfo(path=path, clock=str(manifest["clock"]), files=tuple(out),
                   patterns=tuple(str(p) for p in manifest.get("patterns", [])))


__all__ = ["FileInfo", "LogInfo", "log_info"]
