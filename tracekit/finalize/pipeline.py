"""The one post-processing chain every event table goes through before it is written.

``finalize_events`` = categorize (kernel categories, collectives by name), then
``tracekit.finalize.collectives.annotate_collectives`` (communicator and order of
every collective), then ``tracekit.finalize.membership.annotate_phases`` (phase
ranges and their member events, with the trace-dependent span rules of
``tracekit.finalize.phases.trace_rules``), which numbers the phase instances of the whole
table, so their ids are unique in the run (``version.unique_phase_ids`` is for shards
annotated rank by rank, merged later: store.load_run, merge). Every writer (capture, ingest, align, merge)
writes a finalized table and records ``FINALIZE_VERSION`` in the manifest
(``stamp``); ``tracekit upgrade`` (``upgrade.py``) finalizes again a run whose manifest
records an older version (or none); categories the writer set are kept
(``categorize`` only fills missing ones).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import polars as pl

from tracekit.finalize.categories import Rule, categorize
from tracekit.finalize.collectives import annotate_collectives
from tracekit.finalize.membership import Rule as SpanRule
from tracekit.finalize.membership import annotate_phases
from tracekit.finalize.phases import trace_rules
from tracekit.finalize.version import (
    FINALIZE_VERSION,
    MANIFEST_KEY,
    finalize_version,
    is_finalized,
    stamp,
)
from tracekit.schema import RANGE


def _range_names(events: pl.DataFrame) -> list[str]:
    names = events.lazy().filter(pl.col("kind") == RANGE).select(pl.col("name").unique()).collect().to_series()
    return [str(n) for n in names.drop_nulls().to_list()]


def span_rules(events: pl.DataFrame, extra: Iterable[SpanRule] = ()) -> list[SpanRule]:
    """The phase rules of this trace: ``extra`` first, then its trace-dependent rules
    (``phases.trace_rules``: SGLang 0.5.12 labels eager draft steps `step[DECODE]` in spec traces)."""
    return [*extra, *trace_rules(_range_names(events))]


def finalize_events(events: pl.DataFrame, *, rules: Sequence[Rule] | None = None) -> pl.DataFrame:
    """Categorize, annotate collectives, annotate phases (instance ids unique in the table: tests/
    test_membership.py::test_phase_ids_unique_across_ranks). Pure: returns a new frame."""
    out = categorize(events, list(rules) if rules is not None else None)
    out = annotate_collectives(out)
    return annotate_phases(out, rules=span_rules(out))


__all__ = [
    "FINALIZE_VERSION",
    "MANIFEST_KEY",
    "finalize_events",
    "finalize_version",
    "is_finalized",
    "span_rules",
    "stamp",
]
