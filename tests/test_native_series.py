"""``tracekit._native.series``: numpy -> polars through the Arrow C data interface (``_kineto.arrow_array``)
gives the Series polars' numpy constructor gives, and a short ingest then never imports numpy.ma."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_series_equal

from tracekit import _native

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
needs_ext = pytest.mark.skipif(_native.kineto is None, reason="tracekit._kineto not built (or TRACEKIT_PURE=1)")


@needs_ext
@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "int8", "uint8", "uint32", "uint64", "float64", "bool"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 100_003])
def test_series_equals_polars_numpy_constructor(dtype: str, n: int) -> None:
    rng = np.random.default_rng(n)
    a = rng.integers(0, 2, n).astype(bool) if dtype == "bool" else rng.integers(-100, 100, n).astype(dtype)
    if dtype == "float64" and n:
        a[0] = np.nan  # kept as NaN, as pl.Series keeps it
    got = _native.series("col", a)
    assert_series_equal(got, pl.Series("col", a))
    assert got.null_count() == 0


@needs_ext
def test_series_of_a_strided_view_and_after_the_array_is_gone() -> None:
    a = np.arange(40, dtype=np.int64)
    got = _native.series("x", a[::3])
    assert got.to_list() == list(range(0, 40, 3))
    b = np.arange(1_000_000, dtype=np.int64)
    s = _native.series("y", b)
    del b
    gc.collect()
    assert s.sum() == 499_999_500_000  # the Series holds the buffer (zero copy)


@needs_ext
def test_series_released_on_polars_threads() -> None:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(100):
                s = _native.series("w", np.arange(5_000, dtype=np.int64))
                out = s.to_frame().lazy().select(pl.col("w") * 2).collect()
                assert out.item(4_999, 0) == 9_998
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_series_falls_back_for_other_arrays() -> None:
    a = np.array(["a", "b"], dtype=object)
    assert _native.series("s", a).to_list() == ["a", "b"]
    f = np.array([1.5, 2.5], dtype=np.float32)
    assert_series_equal(_native.series("f", f), pl.Series("f", f))
    big_endian = np.array([1, 2, 300], dtype=">i8")
    assert _native.series("b", big_endian).to_list() == [1, 2, 300]


@needs_ext
def test_ingest_imports_no_numpy_ma() -> None:
    code = ("import sys, glob\nimport tracekit.finalize.pipeline\nfrom tracekit.ingest import ingest_traces\n"
            "run = ingest_traces(sorted(glob.glob(sys.argv[1])))\nassert run.events.height > 1000\n"
            "print('numpy.ma' in sys.modules)\n")
    for pattern in ("h200x2-builtin/graphed-rank-*.trace.json.gz", "sglang-shapes-h200x2/*.trace.json.gz"):
        out = subprocess.run([sys.executable, "-c", code, str(SAMPLES / pattern)], capture_output=True, text=True,
                             check=True).stdout.split()
        assert out == ["False"], pattern
