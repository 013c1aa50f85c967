"""The dilation's two-block reference (collectors/timing.py) and lite's CUPTI trim tables (collectors/cupti.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.analyzers.unprofiled import phase_timers
from tracekit.collectors import cupti
from tracekit.collectors.cupti_cbids import DRIVER_KEEP, RUNTIME_KEEP
from tracekit.collectors.timing import (
    AFTER,
    BEFORE,
    REFERENCE,
    REFERENCE_POOL,
    PhaseTimer,
    reference_spread,
)
from tracekit.render.capture import dilation_lines, reference_note

ROOT = Path(__file__).resolve().parent.parent
HEADERS = Path("/usr/local/cuda-13.0/include")


def _timer(values: dict[str, list[int]]) -> PhaseTimer:
    t = PhaseTimer(cuda=False)
    for window, ns in values.items():
        t._records.extend((window, "verify", v, None, None) for v in ns)
    return t


def test_pooled_reference_is_the_median_over_both_blocks_and_the_spread_keeps_each() -> None:
    st = _timer({BEFORE: [10, 11, 12, 13], AFTER: [30, 31, 32, 33, 34, 35], "profiled": [20, 21]}).stats(REFERENCE_POOL)
    assert st[REFERENCE]["verify"]["count"] == 10 and st[REFERENCE]["verify"]["median_ns"] == 30
    assert st[BEFORE]["verify"]["median_ns"] == 11 and st["profiled"]["verify"]["count"] == 2
    assert reference_spread(st) == {"verify": {"before_ns": 11, "after_ns": 32, "before_count": 4, "after_count": 6}}
    assert reference_spread(_timer({BEFORE: [1, 2]}).stats(REFERENCE_POOL)) == {}


def test_dilation_line_prints_both_blocks_and_the_ratio_against_each() -> None:
    sec = {"unprofiled": {"verify": {"median_ns": 20_000_000, "clock": "cuda_event"}},
           "profiled": {"verify": {"median_ns": 30_000_000}},
           "reference": {"verify": {"before_ns": 10_000_000, "after_ns": 25_000_000}}}
    t = phase_timers({"ranks": {"0": sec}})["verify"]
    assert (t.before_ns, t.after_ns, t.ratio) == (10_000_000, 25_000_000, 1.5)
    line = dilation_lines({"ranks": {"0": sec}})[0]
    assert "x1.50; reference 10.000 ms before / 25.000 ms after the window: x1.20-x3.00 against either" in line
    old = {"ranks": {"0": {k: v for k, v in sec.items() if k != "reference"}}}
    assert "reference timed before the window only" in dilation_lines(old)[0]
    assert reference_note(None, 5.0) == "reference timed before the window only"


def test_cupti_keep_table_holds_launches_and_syncs_only() -> None:
    from tracekit.ingest.kineto_events import _api_kind

    assert RUNTIME_KEEP[211] == "cudaLaunchKernel_v7000" and DRIVER_KEEP[652] == "cuLaunchKernelEx"
    assert {_api_kind(cupti.api_name(n)) for n in [*RUNTIME_KEEP.values(), *DRIVER_KEEP.values()]} == {"launch", "sync"}
    rt, dr = cupti.lean_ids()
    assert 10 in rt and 211 not in rt and 652 not in dr  # cudaGetLastError off, the launches kept
    assert cupti.api_name("cudaStreamSynchronize_ptsz_v7000") == "cudaStreamSynchronize"


@pytest.mark.skipif(not (HEADERS / "cupti_runtime_cbid.h").exists(), reason="no CUDA 13 CUPTI headers here")
def test_cupti_keep_table_is_what_the_generator_derives_from_the_headers() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "gpukit" / "cupti_cbids.py"), str(HEADERS)],
                         capture_output=True, text=True, check=True).stdout
    assert out == (ROOT / "collectors" / "cupti_cbids.py").read_text()


def test_trim_without_libcupti_does_nothing_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cupti, "loaded_cupti", lambda: None)
    assert cupti.trim(cupti.KINETO_DROPPED_RUNTIME, ("driver",), lean=True) == {
        "error": "no libcupti loaded in this process"}


def test_bad_trim_word_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from tracekit.collectors.hooks import _Backend
    from tracekit.collectors.session import ProfilerSession

    monkeypatch.setenv("TRACEKIT_CUPTI_TRIM", "lean,kernels")
    s = ProfilerSession(0, cuda=True, mode="lite")
    with pytest.raises(ValueError, match=r"unknown word\(s\) \['kernels'\]"):
        s.start()
    assert s.prof is None and s.recorder is None and _Backend.recorder is None
