"""Profiler dilation as reports print it: medians per instance, median over ranks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.analyzers.unprofiled import dilation_table as dilation
from tracekit.store import read_manifest

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-mainjob" / "eager.parquet"


def test_dilation_uses_medians_and_falls_back_to_means() -> None:
    man = {"ranks": {
        "0": {"unprofiled": {"verify": {"mean_ns": 30e6, "median_ns": 15e6}},
              "profiled": {"verify": {"mean_ns": 45e6, "median_ns": 30e6}}},
        "1": {"unprofiled": {"verify": {"mean_ns": 16e6}},  # an older capture: means only
              "profiled": {"verify": {"mean_ns": 32e6}}},
        "2": {"unprofiled": {"verify": {"median_ns": 17e6}}, "profiled": {}},  # no profiled: ignored
    }}
    d = dilation(man)["verify"]
    assert d["unprofiled_ns"] == pytest.approx(15.5e6) and d["profiled_ns"] == pytest.approx(31e6)
    assert d["ratio"] == pytest.approx(2.0)


def test_dilation_on_the_h200_sample_matches_capture_summary() -> None:
    d = dilation(read_manifest(SAMPLE))["verify"]
    # capture printed: verify 15.324 ms unprofiled, 28.528 ms profiled (x1.86) (samples/h200x2-mainjob/capture-eager.txt)
    assert round(d["unprofiled_ns"] / 1e6, 3) == 15.324 and round(d["profiled_ns"] / 1e6, 3) == 28.528
