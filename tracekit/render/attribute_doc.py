"""``tracekit attribute``'s three modes, chosen once for every caller (the command, the report).

``timing``: a run captured with ``--profile timing`` (no profiler: phase times per instance);
``host``: the selected ranks have no GPU events (a CPU run: the phases' host time is
attributed to CPU ops); ``gpu``: exclusive GPU buckets. ``analysis`` runs the matching
analyzer, ``document`` builds the matching ``--json`` document.
"""

from __future__ import annotations

from typing import Any, Literal

import polars as pl

from tracekit.analyzers.buckets import DEFAULT_LAUNCH_LATENCY_NS

Mode = Literal["timing", "host", "gpu"]


def analysis(events: pl.DataFrame, manifest: dict[str, Any], phase: str | None = None, rank: int | None = None,
             launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> tuple[Mode, dict[str, pl.DataFrame]]:
    """(mode, the analyzer's report). Raises the analyzer's TracekitError."""
    from tracekit.analyzers.attribution import attribute_report
    from tracekit.analyzers.host_attribution import has_gpu_events, host_report
    from tracekit.analyzers.timing_view import is_timing_run, timing_report

    if is_timing_run(manifest):  # no profiler ran: phase times per instance, no buckets
        return "timing", timing_report(events, phase, rank)
    if not has_gpu_events(events, None if rank is None else [rank]):  # a CPU run: attribute host time
        return "host", host_report(events, phase, rank)
    return "gpu", attribute_report(events, phase, rank, launch_latency_ns=launch_latency_ns)


def document(mode: Mode, report: dict[str, pl.DataFrame], by: str, run: str | None,
             manifest: dict[str, Any]) -> dict[str, Any]:
    """The ``tracekit attribute --json`` document of ``analysis``' result."""
    from tracekit.render import attribute_json
    from tracekit.render import host_attribute as render_host
    from tracekit.render import timing as render_timing
    from tracekit.render.capture import profile_line

    if mode == "timing":
        return render_timing.to_json(report, by, run, manifest)
    doc = (render_host.host_to_json if mode == "host" else attribute_json.to_json)(report, by, run, manifest)
    doc["profile"] = profile_line(manifest)
    return doc


__all__ = ["Mode", "analysis", "document"]
