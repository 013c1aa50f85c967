"""The ``--json`` documents tracekit prints: one declared type per document, each versioned.

Every ``--json`` output is a JSON object whose first two keys are ``"document"`` (its name
below) and ``"schema_version"`` (its version). A document type declares the top-level keys it
always has (``keys``) and those present only with some options (``optional``);
``tests/test_documents.py`` runs every command and checks the output against its type.

Change a document (add, remove or rename a key, change a value's meaning or unit) -> bump its
``version`` here and in ``docs/documents.md`` (the page lists every document and its keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DocumentType:
    name: str
    version: int
    command: str
    keys: tuple[str, ...]
    optional: tuple[str, ...] = ()

    def make(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The document: ``document`` and ``schema_version`` first, then ``body``'s keys."""
        return {"document": self.name, "schema_version": self.version, **body}

    def problems(self, doc: Mapping[str, Any]) -> list[str]:
        """What makes ``doc`` not a document of this type (empty when it is one)."""
        out = []
        if doc.get("document") != self.name:
            out.append(f"document is {doc.get('document')!r}, not {self.name!r}")
        if doc.get("schema_version") != self.version:
            out.append(f"schema_version is {doc.get('schema_version')!r}, not {self.version}")
        have = set(doc) - {"document", "schema_version"}
        missing = [k for k in self.keys if k not in have]
        extra = sorted(have - set(self.keys) - set(self.optional))
        if missing:
            out.append(f"missing keys {missing}")
        if extra:
            out.append(f"undeclared keys {extra}")
        return out


INFO = DocumentType(
    "info", 4, "tracekit info --json",
    keys=("run_schema_version", "tracekit_version", "source", "world_size", "ranks_present",
          "missing_ranks", "start_ns", "end_ns", "span_ns", "events", "events_by_kind", "ranks", "rank_summary",
          "versions", "unmatched_kernels", "differences", "nccl", "environment", "notes", "skipped"),
    optional=("ranks_selected",),
)
ATTRIBUTE = DocumentType(
    "attribute", 7, "tracekit attribute --json",
    keys=("run", "mode", "by", "units", "bucket_order", "phases", "all_ranks", "stragglers",
          "issues", "whole_trace", "definitions", "rank_summary"),
    optional=("cycles", "seq", "dilation", "profile", "unprofiled_estimate", "notes", "sol", "sol_why",
              "ranks_selected"),
)
ATTRIBUTE_TIMING = DocumentType(
    "attribute-timing", 2, "tracekit attribute --json (a run captured with --profile timing)",
    keys=("run", "mode", "timing_source", "cannot", "by", "units", "phases", "definitions"),
    optional=("cycles", "profile"),
)
GAP = DocumentType(
    "gap", 6, "tracekit gap --json",
    keys=("units", "statistic", "a", "b", "buckets", "total_delta_ns", "explanations", "kernels", "seq",
          "warnings", "timing_source", "unprofiled"),
    optional=("by_rank", "rank_summary", "ranks_selected", "mode", "definitions", "sol", "sol_why", "unprofiled_estimate"),
)
RANKS = DocumentType(
    "ranks", 4, "tracekit ranks --json",
    keys=("ranks", "kernels", "collectives", "state", "summary", "rank_summary"),
    optional=("ranks_selected",),
)
SPEC = DocumentType(
    "spec", 3, "tracekit spec --json",
    keys=("rank", "rank_choice", "decode_source", "timing", "target_tps", "cycles_by_rank", "conventions",
          "buckets", "summary", "sol", "sol_why"),
)
DIFF = DocumentType(
    "diff", 6, "tracekit diff --json",
    keys=("old", "new", "statistic", "phase", "phases", "presence", "buckets", "buckets_by_phase",
          "seq_buckets", "kernels", "manifest_diff", "explanation", "timing_source", "unprofiled",
          "unprofiled_estimate", "nccl", "sol", "sol_why"),
)
VALIDATE_TRACE = DocumentType(
    "validate-trace", 1, "tracekit validate-trace --json",
    keys=("path", "format", "ok", "problems", "n_problems", "processes", "slices",
          "counter_values", "flows"),
)

SOL = DocumentType(
    "sol", 1, "tracekit sol --json",
    keys=("run", "estimate", "model", "gpu", "layout", "allreduce_model", "phases", "floor_beaten", "notes",
          "definitions"),
)

LOGS = DocumentType(
    "logs", 1, "tracekit logs --json",
    keys=("output", "rows", "clock", "sources", "grammars", "patterns"),
)

LOG_INFO = DocumentType(
    "log-info", 2, "tracekit info LOG --json (a log run or log file)",
    keys=("path", "clock", "patterns", "files"),
)
LOG_SPEC = DocumentType(
    "log-spec", 1, "tracekit spec LOG --json (a log run or log file)",
    keys=("path", "statistic", "intervals", "accept_length", "accept_rate", "draft_tokens_per_verify",
          "gen_throughput", "per_req_tps", "running_req", "timings", "timing_source", "economics", "notes", "units"),
)
LOG_GAP = DocumentType(
    "log-gap", 1, "tracekit gap LOG --json (a log run or log file)",
    keys=("a_path", "b_path", "a", "b", "statistic", "delta_ns", "ratio", "timing_source", "units"),
)
LOG_TRACE_DIFF = DocumentType(
    "log-trace-diff", 1, "tracekit diff LOG RUN --json (an engine log against a captured run)",
    keys=("old", "new", "log_side", "statistic", "tokens_width", "no_common_bin", "common", "only_log", "only_trace",
          "log_clock", "trace_clock", "left_out"),
)
LOG_DIFF = DocumentType(
    "log-diff", 1, "tracekit diff OLD NEW --json (log runs or log files)",
    keys=("old", "new", "statistic", "tokens_width", "no_common_bin", "common", "only_old", "only_new", "left_out",
          "user_fields", "timing_source"),
)

DOCUMENTS: tuple[DocumentType, ...] = (INFO, ATTRIBUTE, ATTRIBUTE_TIMING, GAP, RANKS, SPEC, DIFF, VALIDATE_TRACE, SOL,
                                       LOGS, LOG_INFO, LOG_SPEC, LOG_GAP, LOG_DIFF,
                                       LOG_TRACE_DIFF)


def document_type(doc: Mapping[str, Any]) -> DocumentType:
    """The declared type of a printed document (KeyError for an unknown name)."""
    return {d.name: d for d in DOCUMENTS}[str(doc.get("document"))]


__all__ = ["ATTRIBUTE", "ATTRIBUTE_TIMING", "DIFF", "DOCUMENTS", "GAP", "INFO", "LOGS", "LOG_DIFF", "LOG_GAP", "LOG_INFO", "LOG_SPEC",
           "LOG_TRACE_DIFF", "RANKS", "SOL", "SPEC",
           "VALIDATE_TRACE",
           "DocumentType", "document_type"]
