from __future__ import annotations

import numpy as np

from tracekit.finalize.phases import format_facts, format_label, parse_label, phase_of_span
from tracekit.intervals import merge, union_ns


def test_label_roundtrip() -> None:
    name = format_label("verify", cycle=3, bs=4, tok=16, seq=1024, graphed=False)
    lab = parse_label(name)
    assert lab is not None and lab.phase == "verify" and not lab.is_facts
    assert lab.facts == {"cycle": 3, "batch_size": 4, "num_tokens": 16, "seq_len": 1024, "graphed": False}
    f = parse_label(format_facts("verify", 3, accept=2.5))
    assert f is not None and f.is_facts and f.phase == "verify" and f.facts == {"cycle": 3, "accept_len": 2.5}


def test_sglang_spans_map_to_phases() -> None:
    assert phase_of_span("step[TARGET_VERIFY bs=4]") == ("verify", {"batch_size": 4})
    assert phase_of_span("step[DECODE bs=8]") == ("decode", {"batch_size": 8})
    assert phase_of_span("step[DRAFT_EXTEND bs=1]") == ("draft_extend", {"batch_size": 1})
    assert phase_of_span("draft") == ("draft", {})
    assert phase_of_span("aten::mm") is None
    assert phase_of_span(format_facts("verify", 1, accept=1.0)) is None


def test_union_of_overlapping_intervals() -> None:
    s = np.array([0, 5, 20, 21], dtype=np.int64)
    e = np.array([10, 8, 25, 22], dtype=np.int64)
    assert union_ns(s, e) == 15
    ms, me = merge(s, e)
    assert ms.tolist() == [0, 20] and me.tolist() == [10, 25]
    assert union_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0
