"""The one post-processing chain every event table goes through before it is written.

``finalize_events`` = categorize (kernel categories, collectives by name), then
``tracekit.collectives.annotate_collectives`` (communicator and order of every
collective), then ``tracekit.membership.annotate_phases`` (phase ranges and their
member events, with the trace-dependent span rules of ``tracekit.phases.trace_rules``). Ingest and capture both call it just before ``write_run``.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tracekit.categories import Rule, categorize
from tracekit.collectives import annotate_collectives
from tracekit.membership import annotate_phases
from tracekit.phases import trace_rules


def finalize_events(events: pl.DataFrame, *, rules: Sequence[Rule] | None = None) -> pl.DataFrame:
    """Categorize, annotate collectives, annotate phases. Pure: returns a new frame."""
    out = categorize(events, list(rules) if rules is not None else None)
    out = annotate_collectives(out)
    # trace-dependent span rules (SGLang 0.5.12 labels eager draft steps `step[DECODE]` in spec traces)
    names = out.lazy().filter(pl.col("kind") == "range").select(pl.col("name").unique()).collect().to_series()
    return annotate_phases(out, rules=trace_rules(names.drop_nulls().to_list()))


__all__ = ["finalize_events"]
