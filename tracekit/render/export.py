"""Text for the export commands: the summary of an export and the result of a trace check."""

from __future__ import annotations

from typing import Any

from tracekit.documents import VALIDATE_TRACE
from tracekit.export import ExportResult
from tracekit.export.validate import TraceCheck


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def export_summary(res: ExportResult) -> str:
    """One line: what was written and what it holds."""
    ranks = ",".join(map(str, res.ranks))
    what = "Perfetto trace" if res.format == "perfetto" else "Chrome JSON trace"
    size = _mb(res.bytes_written) + (" uncompressed" if res.path.lower().endswith(".gz") else "")
    return (
        f"wrote {res.path} ({what}, {size}): ranks {ranks}, {res.n_slices} slices "
        f"({res.n_gpu_slices} GPU), {res.n_counters} counter values, {res.n_flows} flows, "
        f"{res.n_tracks} tracks; selection: {res.selection}"
    )


def open_hint(res: ExportResult) -> str:
    if res.format == "perfetto":
        return "open it: drag the file into https://ui.perfetto.dev (or trace_processor for SQL)"
    return "open it: drag the file into https://ui.perfetto.dev or chrome://tracing"


def check_lines(chk: TraceCheck) -> list[str]:
    """Problems first (one per line), then the verdict."""
    lines = [f"{chk.path}: {p}" for p in chk.problems]
    if chk.n_problems > len(chk.problems):
        lines.append(f"{chk.path}: ... {chk.n_problems - len(chk.problems)} more problems")
    verdict = "OK" if chk.ok else f"{chk.n_problems} problem(s)"
    lines.append(f"{chk.summary()}: {verdict}")
    return lines


def check_doc(chk: TraceCheck) -> dict[str, Any]:
    """The ``validate-trace --json`` document."""
    return VALIDATE_TRACE.make({
        "path": chk.path,
        "format": chk.format,
        "ok": chk.ok,
        "problems": chk.problems,
        "n_problems": chk.n_problems,
        "processes": {str(k): v for k, v in sorted(chk.processes.items(), key=lambda kv: str(kv[0]))},
        "slices": chk.n_slices,
        "counter_values": chk.n_counters,
        "flows": chk.n_flows,
    })


__all__ = ["check_doc", "check_lines", "export_summary", "open_hint"]
