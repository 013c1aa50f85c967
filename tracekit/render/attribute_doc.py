"""``tracekit attribute``'s report in each mode (``analyzers.reports.Mode``), as text or as the ``--json``
document: the one place that picks the renderer of a mode (the command and the HTML report use it)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rich.console import Console

from tracekit.analyzers.reports import AttributionReport, Mode
from tracekit.render.rank_fold import ALL, RankView


def document(report: AttributionReport, by: str, run: str | None, view: RankView = ALL) -> dict[str, Any]:
    """The ``tracekit attribute --json`` document of ``report``: every rank's items, or with ``view.ranks``
    (``--ranks``) those ranks' ``phases`` / ``cycles`` items, their ``rank_summary`` and ``ranks_selected``."""
    from tracekit.render import attribute_json
    from tracekit.render import timing as render_timing
    from tracekit.render.capture import profile_line

    if report.mode is Mode.TIMING:
        return render_timing.to_json(report, by, run)
    doc = attribute_json.to_json(report, by, run)
    doc["profile"] = profile_line(dict(report.manifest))
    if view.ranks is not None:
        import polars as pl

        from tracekit.ranklist import format_rank_list

        doc["phases"] = [p for p in doc["phases"] if view.shows(p["rank"])]
        if "cycles" in doc:
            doc["cycles"] = [c for c in doc["cycles"] if view.shows(c["rank"])]
        sel = replace(report, by_rank=report.by_rank.filter(pl.col("rank").is_in(list(view.ranks))))
        doc["rank_summary"] = {ph: rs.to_dict() for ph, rs in attribute_json.rank_summaries(sel).items()}
        doc["ranks_selected"] = format_rank_list(view.ranks)
    return doc


def render(report: AttributionReport, by: str, view: RankView = ALL) -> None:
    """Print ``report`` (tables, facts, summary) for ``by`` (rank / cycle / seq); ``view``: ``--ranks`` /
    ``--all-ranks`` (render.rank_fold)."""
    from tracekit.render import attribute as render_attribute

    if report.mode is Mode.TIMING:  # no profiler ran: phase times per instance, no buckets
        from tracekit.render import timing as render_timing

        render_timing.render(report, by, render_attribute.make_console(150))
        return
    from tracekit.render.capture import profile_line

    mode_line = profile_line(dict(report.manifest))
    console: Console = render_attribute.make_console(150 if by != "rank" else 120)
    if mode_line:
        console.print(mode_line, highlight=False, markup=False, soft_wrap=True)
    if report.mode is Mode.HOST:
        from tracekit.render import host_attribute as render_host

        console.print(render_host.host_mode_line(None if report.ranks is None else list(report.ranks)), soft_wrap=True)
    render_attribute.render(report, by, console, view)


__all__ = ["document", "render"]
