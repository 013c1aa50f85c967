"""One Kineto -> events converter: capture (torch's in-process event objects) and ingest (the
trace file) go through ``tracekit.ingest.kineto_events.kineto_events`` and give the same table.

The committed raw Kineto JSON of a real 2x H200 capture (samples/h200x2-builtin, kept with
``--keep-json``) is turned into event objects with the ``_KinetoEvent`` API (what torch hands
the capture session) by an independent reader (stdlib json, Decimal times); the session's
converter must give, column by column, what ingest gives for the file itself. Only what
in-process events cannot carry differs: args (collective sizes, communicator, memcpy bytes).
"""

from __future__ import annotations

import gzip
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from kineto_reference import load, ns
from polars.testing import assert_frame_equal

from tracekit.collectors.session import kineto_to_frame
from tracekit.ingest.kineto import parse_kineto
from tracekit.ingest.kineto_events import GPU_CATEGORIES
from tracekit.schema import conform, sort_events

H200 = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"
FROM_ARGS = ("args", "coll_bytes", "group")  # in-process events carry no args


class FakeEvent:
    """One trace event as torch's ``_KinetoEvent`` (torch 2.13 API: activity_type, external_id)."""

    def __init__(self, doc: dict[str, Any], e: dict[str, Any]) -> None:
        self.e, self.args = e, e.get("args") or {}
        self.cat = str(e["cat"]).lower()
        self.start = ns(doc, e["ts"])
        self.dur = int(Decimal(e.get("dur", 0)) * 1000)

    def name(self) -> str:
        return str(self.e["name"])

    def activity_type(self) -> str:
        return self.cat

    def start_ns(self) -> int:
        return self.start

    def duration_ns(self) -> int:
        return self.dur

    def device_index(self) -> int:
        return int(self.e["pid"])  # GPU events: the device

    def device_resource_id(self) -> int:
        return int(self.e["tid"])  # thread, or the stream of a GPU event

    def correlation_id(self) -> int:
        return int(self.args.get("correlation", 0))

    def external_id(self) -> int:
        return int(self.args.get("External id", 0))


def fake_events(doc: dict[str, Any]) -> list[FakeEvent]:
    """The file's events as the profiler holds them in process (Kineto's own "Trace" span, with a
    string pid, is written to the file only)."""
    evs = [e for e in doc["traceEvents"] if e.get("ph") in ("X", "i", "I") and isinstance(e.get("pid"), int)]
    assert {str(e["cat"]).lower() for e in evs} & GPU_CATEGORIES
    return [FakeEvent(doc, e) for e in evs]


@pytest.mark.parametrize("path", sorted(H200.glob("*-rank-*.trace.json.gz")), ids=lambda p: p.name)
def test_capture_and_ingest_give_the_same_table(path: Path) -> None:
    doc = load(path)
    own, base = kineto_to_frame(fake_events(doc), 0)
    assert base == "absolute"
    parsed = parse_kineto(gzip.decompress(path.read_bytes()), str(path)).events
    # rows with a string pid are the JSON writer's own (its "Trace" span, a window marker)
    ing = parsed.filter(pl.col("pid_raw").is_null()).drop("pid_raw").with_columns(pl.lit(0, pl.Int32).alias("rank"))
    assert parsed.height - ing.height <= 2
    a, b = sort_events(conform(own)), sort_events(conform(ing))
    assert a.height == b.height > 5_000
    assert a.filter(pl.col("kind") == "kernel").height > 500 and a.get_column("graph").any()
    assert_frame_equal(a.drop(FROM_ARGS), b.drop(FROM_ARGS))
    # what differs is only what the file's args add
    assert a.select(FROM_ARGS).null_count().row(0) == (a.height,) * len(FROM_ARGS)
