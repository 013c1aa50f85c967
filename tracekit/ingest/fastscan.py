"""The compiled Kineto scanner (``tracekit._kineto``): one pass from JSON bytes to the columns
that :func:`tracekit.ingest.kineto.parse_kineto` builds with msgspec, for files of Kineto's
usual shape.

The scanner checks every byte as JSON and every kept field's type; anything it does not
recognise (an unusual type, a ts with an exponent or more than three decimals, an escaped
key, a repeated key, invalid UTF-8, malformed JSON, ...) makes it return None and the file
goes through the msgspec path, which also words the errors. Times are converted to exact
integer ns from the literal text. Names, categories and the other strings are interned
during the pass: each string column is a dictionary gather over one table. The pass runs
without the GIL, so rank files scanned in threads use every core.

Both paths give identical tables (tests/test_ingest_fastscan.py, on the real traces under
samples/ and on generated ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import polars as pl

from tracekit._native import kineto as kineto_ext
from tracekit._native import series

# the top-level keys the decoder keeps (msgspec.Raw fields of kineto._Trace)
TOP_KEYS = ("schemaVersion", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "cuda_driver_version",
            "cuda_runtime_version", "cupti_version", "trace_id", "traceName", "displayTimeUnit",
            "hip_runtime_version", "hip_driver_version", "roctracer_version")  # the last three: ROCm's Kineto


scanner: ModuleType | None = kineto_ext


@dataclass(frozen=True)
class Codes:
    """A string column dictionary-encoded: ``codes[i]`` (int64, -1 = null) indexes ``strings``."""

    codes: np.ndarray[Any, np.dtype[np.int64]]
    strings: list[str]


def _i64(raw: bytes) -> np.ndarray[Any, np.dtype[np.int64]]:
    return np.frombuffer(raw, dtype=np.int64)


def _u8(raw: bytes) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(raw, dtype=np.uint8)


_INT_COLS = ("correlation", "external_id", "a_device", "a_stream", "bytes")


Scanned = tuple[dict[str, msgspec.Raw], tuple[Any, ...]]  # (top-level raw values by key, the scanner's result)


def scan_raw(data: bytes | memoryview) -> Scanned | None:
    """The scanner's pass (no Python object per event; the GIL released, so rank files are
    scanned in threads) and the top-level values it found, or None when the scanner is not
    built or declines the file. ``data`` is not needed after it: ``columns`` builds the frame."""
    if scanner is None:
        return None
    res: tuple[Any, ...] | None = scanner.scan(data)
    if res is None or not res[3][0]:  # no kept event: the decoder words what the file holds
        return None
    top: dict[str, msgspec.Raw] = {}
    if res[1] is not None:
        for key, lo, hi in res[1]:
            if key in TOP_KEYS:
                if key in top:  # a repeated key: leave it to the decoder
                    return None
                top[key] = msgspec.Raw(bytes(data[lo:hi]))  # a copy: no view keeps the JSON alive
    return top, res


def scan(data: bytes | memoryview) -> tuple[dict[str, msgspec.Raw], pl.DataFrame, int, tuple[Codes, Codes]] | None:
    """``columns(scan_raw(data))``."""
    return columns(scan_raw(data))


def columns(scanned: Scanned | None) -> tuple[dict[str, msgspec.Raw], pl.DataFrame, int, tuple[Codes, Codes]] | None:
    """(top-level raw values by key, columns frame, number of traceEvents elements, the ``cat``
    and ``name`` columns as codes into the interned strings) of ``scan_raw(data)``, or None when
    the scanner is not built or the file is not of the shape it takes.

    The frame has the columns of ``kineto._columns`` before ``_to_events`` but ``cat`` (only its
    codes are used), with ``start_ns`` relative to the file (the caller adds baseTimeNanoseconds)."""
    if scanned is None:
        return None
    top, (n_all, _spans, strings, cols, coll) = scanned
    ts, dur, pid, tid, corr, ext, dev, stream, nbytes, cat, name = (_i64(c) for c in cols[:11])
    instant, _dur_ok, pid_k, tid_k, corr_ok, ext_ok, dev_ok, stream_ok, bytes_ok = (_u8(c) for c in cols[11:])
    # one spare entry: a gather of a masked (null) row must stay in bounds when no string was met
    table = pl.Series("t", [*strings, ""], dtype=pl.String)
    # the few rows with a "Collective name": their values spread to full-length columns in numpy
    # (code -1 / flag 0 elsewhere), so that one query builds every column
    row, c_name, c_dtype, c_pg, c_in, c_out, c_gs, c_in_ok, c_out_ok, c_gs_ok = (_i64(c) for c in coll)
    n = ts.size

    def spread(v: np.ndarray[Any, np.dtype[np.int64]], fill: int) -> np.ndarray[Any, np.dtype[np.int64]]:
        out = np.full(n, fill, dtype=np.int64)
        out[row] = v
        return out

    # one frame of the raw numbers, then one query: masks to nulls, codes to strings (a gather
    # over the table: rows share its strings)
    arrays = {
        "name": name, "pid": pid, "pid_k": pid_k, "tid": tid, "tid_k": tid_k, "instant": instant,
        "start_ns": ts, "dur_ns": dur,
        **{c: v for c, v in zip(_INT_COLS, (corr, ext, dev, stream, nbytes), strict=True)},
        **{f"{c}_ok": v for c, v in zip(_INT_COLS, (corr_ok, ext_ok, dev_ok, stream_ok, bytes_ok), strict=True)},
        **({"c_name": spread(c_name, -1), "c_dtype": spread(c_dtype, -1), "c_pg": spread(c_pg, -1),
            "c_in": spread(c_in, 0), "c_out": spread(c_out, 0), "c_gs": spread(c_gs, 0),
            "c_in_ok": spread(c_in_ok, 0), "c_out_ok": spread(c_out_ok, 0), "c_gs_ok": spread(c_gs_ok, 0)}
           if row.size else {}),
    }
    raw = pl.DataFrame([series(k, v) for k, v in arrays.items()])
    tab = pl.lit(table)

    def text(code: pl.Expr) -> pl.Expr:
        return pl.when(code >= 0).then(tab.gather(code.clip(lower_bound=0))).otherwise(None)

    def masked(col: str, ok: str) -> pl.Expr:
        return pl.when(pl.col(ok) != 0).then(pl.col(col)).otherwise(None).alias(col)

    if row.size:
        coll_cols = [
            text(pl.col("c_name")).alias("coll_name"),
            masked("c_in", "c_in_ok").alias("in_nelems"),
            masked("c_out", "c_out_ok").alias("out_nelems"),
            text(pl.col("c_dtype")).alias("dtype"),
            text(pl.col("c_pg")).alias("pg_name"),
            masked("c_gs", "c_gs_ok").alias("group_size"),
        ]
    else:
        coll_cols = [pl.lit(None, dtype=dt).alias(c) for c, dt in (
            ("coll_name", pl.String()), ("in_nelems", pl.Int64()), ("out_nelems", pl.Int64()), ("dtype", pl.String()),
            ("pg_name", pl.String()), ("group_size", pl.Int64()))]
    frame = raw.select(
        (pl.col("instant") != 0).alias("instant"),
        text(pl.col("name")).alias("name"),
        text(pl.when(pl.col("pid_k") == 2).then(pl.col("pid")).otherwise(-1)).alias("pid_raw"),
        pl.when(pl.col("pid_k") == 1).then(pl.col("pid")).otherwise(None).alias("pid_int"),
        pl.when(pl.col("tid_k") == 1).then(pl.col("tid")).otherwise(None).alias("tid_raw"),
        "start_ns", "dur_ns",
        *[masked(c, f"{c}_ok") for c in _INT_COLS],
        *coll_cols,
    )
    return top, frame, int(n_all), (Codes(cat, strings), Codes(name, strings))


__all__ = ["TOP_KEYS", "Codes", "Scanned", "columns", "scan", "scan_raw", "scanner"]
