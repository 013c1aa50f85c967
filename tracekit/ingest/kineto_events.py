"""Kineto events in raw columns -> tracekit's event table: the one Kineto -> events converter.

Both ingest paths (the compiled scanner and the msgspec decoder of ``tracekit.ingest.kineto``) and
capture (torch's in-process events, ``collectors/session.py``) hand their columns here, in
``RAW_SCHEMA``: kinds from the Kineto category and the CUDA API name (rules run once per distinct
string, on integer codes), graph launches, GPU side (device / stream), collective args.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit import schema
from tracekit._native import series
from tracekit.ingest.fastscan import Codes

# Kineto categories (lowercased; old traces spell some differently) -> event kind.
_CAT_KIND: dict[str, str] = {
    "kernel": schema.KERNEL,
    "gpu_memcpy": schema.MEMCPY,
    "memcpy": schema.MEMCPY,
    "gpu_memset": schema.MEMSET,
    "memset": schema.MEMSET,
    "cuda_runtime": schema.RUNTIME,  # refined to launch / sync by name below
    "cuda_driver": schema.RUNTIME,
    "runtime": schema.RUNTIME,
    "cuda_sync": schema.SYNC,
    "user_annotation": schema.RANGE,
    "gpu_user_annotation": schema.GPU_RANGE,
    "cpu_op": schema.OP,
    "operator": schema.OP,
    "python_function": schema.PYTHON,
    "overhead": schema.RUNTIME,
    "cpu_instant_event": schema.INSTANT,
}
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "cuda_sync", "gpu_user_annotation"})
_API_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime"})
GPU_CATEGORIES = _GPU_CATS  # Kineto categories of GPU-side events (their pid / tid: device / stream)
RUNTIME_CATEGORIES = _API_CATS  # CUDA API calls (launch / sync / runtime by name)

# CUDA and HIP API calls that enqueue GPU work (kind "launch") and that block the host (kind "sync").
# HIP (ROCm's Kineto writes them under cat "cuda_runtime"): hipLaunchKernel, hipExtLaunchKernel,
# hipModuleLaunchKernel, hipExtModuleLaunchKernel (hipBLASLt / Tensile), hipHccModuleLaunchKernel,
# hipDrvLaunchKernelEx (aiter), hipLaunchCooperativeKernel(MultiDevice), hipExtLaunchMultiKernelMultiDevice,
# hipGraphLaunch, hipMemcpy* / hipMemset* (the kernel-launch API ids roctracer-based profilers
# subscribe to; real names: samples/rocm-mi300x).
_LAUNCH_RE = (r"^(cuda|cu)(Launch|GraphLaunch|Memcpy|Memset|MemcpyPeer|Memcpy2D|Memcpy3D)|^cu(MemcpyHtoD|MemcpyDtoH|MemcpyDtoD)"
              r"|^hip(Ext|Hcc|Drv)?(Module)?Launch|^hipGraphLaunch|^hip(Memcpy|Memset)")
_SYNC_RE = r"^(cuda|cu|hip)(StreamSynchronize|DeviceSynchronize|EventSynchronize|CtxSynchronize)$"
_GRAPH_LAUNCH = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "cudaGraphLaunch_v10000", "cuGraphLaunch_ptsz", "cudaGraphLaunch_ptsz",
                           "hipGraphLaunch", "hipGraphLaunch_spt"})

# c10d dtype names -> bytes per element.
_DTYPE_BYTES: dict[str, int] = {
    "Float": 4, "float": 4, "Float32": 4, "float32": 4,
    "Half": 2, "float16": 2, "BFloat16": 2, "bfloat16": 2,
    "Double": 8, "float64": 8,
    "Int": 4, "int32": 4, "Long": 8, "int64": 8, "Short": 2, "int16": 2,
    "Char": 1, "int8": 1, "Byte": 1, "uint8": 1, "Bool": 1, "bool": 1,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1,
    "ComplexFloat": 8, "ComplexDouble": 16, "UInt16": 2, "UInt32": 4, "UInt64": 8,
}


def nulls(n: int, dtype: pl.DataType) -> pl.Series:
    """A length-``n`` Series of nulls."""
    return pl.repeat(None, n, dtype=dtype, eager=True)


@dataclass
class ParsedTrace:
    """One trace file decoded: events (no rank column yet) and its top-level metadata."""

    events: pl.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    n_events: int = 0


def finish_columns(frame: pl.DataFrame, path: str, meta: dict[str, Any], n_all: int,
            codes: tuple[Codes, Codes] | None = None) -> ParsedTrace:
    """The kept events' columns (either path) -> a ParsedTrace (kinds, graph, collectives)."""
    skipped = n_all - frame.height
    parsed = _to_events(frame, path, meta, n_all, codes)
    if skipped:
        parsed.dropped["non-events (metadata, flows, counters)"] = skipped
    return parsed


_LAUNCH_PAT = re.compile(_LAUNCH_RE)
_SYNC_PAT = re.compile(_SYNC_RE)


def _api_kind(name: str) -> str:
    if _LAUNCH_PAT.search(name):
        return schema.LAUNCH
    if _SYNC_PAT.search(name):
        return schema.SYNC
    return schema.RUNTIME


# The raw event columns both sources give (``_columns`` from the JSON, the capture session from
# torch's in-process event objects), as Kineto names them: the one Kineto -> events converter
# (``kineto_events``) starts here.
RAW_SCHEMA: dict[str, pl.DataType] = {
    "cat": pl.String(), "instant": pl.Boolean(), "name": pl.String(), "pid_raw": pl.String(),
    "pid_int": pl.Int64(), "tid_raw": pl.Int64(), "start_ns": pl.Int64(), "dur_ns": pl.Int64(),
    "correlation": pl.Int64(), "external_id": pl.Int64(), "a_device": pl.Int64(), "a_stream": pl.Int64(),
    "bytes": pl.Int64(), "coll_name": pl.String(), "in_nelems": pl.Int64(), "out_nelems": pl.Int64(),
    "dtype": pl.String(), "pg_name": pl.String(), "group_size": pl.Int64(),
}


def kineto_events(raw: pl.DataFrame, path: str = "") -> ParsedTrace:
    """Kineto events in ``RAW_SCHEMA`` columns (``cat`` the Kineto category; ``pid_int`` / ``tid_raw``
    the trace's pid / tid: the device and stream for GPU events; ``a_device`` / ``a_stream`` the
    args' device / stream) -> the event table (no rank column yet). Used by ingest and capture."""
    return _to_events(raw, path, {}, raw.height)


def encode(s: pl.Series) -> Codes:
    """``s`` (String) as codes into its distinct values (the scanner gives these directly)."""
    uniq = s.drop_nulls().unique().to_list()
    if not uniq:
        return Codes(np.full(s.len(), -1, dtype=np.int64), [])
    codes = s.cast(pl.Enum(uniq)).to_physical().cast(pl.Int64).fill_null(-1).to_numpy()
    return Codes(codes, uniq)


_KIND_INDEX = {k: i for i, k in enumerate(schema.KINDS)}
_KIND_NAMES = pl.Series("kind", [*schema.KINDS, None], dtype=schema.KIND_DTYPE)  # code -1: null; Enum: no string column
_GPU_WORK = [_KIND_INDEX[k] for k in schema.GPU_KINDS]


def _per_code(c: Codes, rows: npt.NDArray[np.bool_] | None, fill: int, value: Any) -> npt.NDArray[np.int8]:
    """``value(string)`` (a small int) for each distinct code (of ``rows``), ``fill`` elsewhere and
    for null (code -1, the last slot): rules run once per distinct string, not per row."""
    out = np.full(len(c.strings) + 1, fill, dtype=np.int8)
    # the distinct codes present (+1: null's -1 counts in slot 0 and is left at ``fill``)
    seen = np.bincount((c.codes if rows is None else c.codes[rows]) + 1, minlength=len(c.strings) + 1)
    for code in np.flatnonzero(seen[1:]).tolist():
        out[code] = value(c.strings[code])
    return out


def _kinds(cat: Codes, name: Codes, instant: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.bool_]]:
    """Kind code per row (index into schema.KINDS, -1 = unknown category: dropped) and whether the
    row is a GPU-side event (its pid / tid are device / stream)."""
    kind = _per_code(cat, None, -1, lambda c: _KIND_INDEX.get(_CAT_KIND.get(c.lower(), ""), -1))[cat.codes]
    api = _per_code(cat, None, 0, lambda c: c.lower() in _API_CATS)[cat.codes].astype(bool)
    if api.any():  # CUDA API calls: launch / sync / runtime by name (no name: runtime)
        by_name = _per_code(name, api, _KIND_INDEX[schema.RUNTIME], lambda n: _KIND_INDEX[_api_kind(n)])
        by_name[-1] = _KIND_INDEX[schema.RUNTIME]
        kind = np.where(api, by_name[name.codes], kind)
    kind = np.where(instant, np.int8(_KIND_INDEX[schema.INSTANT]), kind).astype(np.int8)
    gpu = _per_code(cat, None, 0, lambda c: c.lower() in _GPU_CATS)[cat.codes].astype(bool)
    return kind, gpu


def _to_events(f: pl.DataFrame, path: str, meta: dict[str, Any], n_all: int,
               codes: tuple[Codes, Codes] | None = None) -> ParsedTrace:
    """Kinds, device/stream/pid/tid, graph flag, collective columns. ``codes``: the ``cat`` and
    ``name`` columns dictionary-encoded (the scanner's; else encoded here): the kind rules run
    once per distinct category / API name, and rows are classified by integer codes."""
    cat_c, name_c = codes if codes is not None else (encode(f.get_column("cat")), encode(f.get_column("name")))
    instant = f.get_column("instant")
    kind_code, gpu_np = _kinds(cat_c, name_c, (instant.fill_null(False) if instant.null_count() else instant).to_numpy())
    launch_np = kind_code == _KIND_INDEX[schema.LAUNCH]
    graph_name = _per_code(name_c, launch_np, 0, lambda n: n in _GRAPH_LAUNCH)
    has_coll = f.get_column("coll_name").null_count() < f.height
    has_bytes = f.get_column("bytes").null_count() < f.height
    f = f.with_columns(
        _KIND_NAMES.gather(series("", np.where(kind_code < 0, len(schema.KINDS), kind_code))).alias("kind"),
        series("_gpu", gpu_np),
        series("_launch", launch_np),
        series("_graph_launch", launch_np & graph_name[name_c.codes].astype(bool)),
        series("_gpu_work", np.isin(kind_code, _GPU_WORK)),
        series("_kernel", kind_code == _KIND_INDEX[schema.KERNEL]),
    )

    gpu = pl.col("_gpu")
    pid_int = pl.col("pid_int")
    is_launch = pl.col("_launch")
    is_graph_launch = pl.col("_graph_launch")
    graph_corr = pl.col("correlation").filter(is_graph_launch).implode()
    cols = [
        pl.when(gpu).then(pl.coalesce(pl.col("a_device"), pid_int)).otherwise(-1).alias("device"),
        pl.when(gpu).then(pl.coalesce(pl.col("a_stream"), pl.col("tid_raw"))).otherwise(None).alias("stream"),
        pl.when(gpu).then(None).otherwise(pid_int).alias("pid"),
        pl.when(gpu).then(None).otherwise(pl.col("tid_raw")).alias("tid"),
        pl.when(pl.col("_gpu_work")).then(pl.col("correlation").is_in(graph_corr).fill_null(False))
        .when(is_launch).then(is_graph_launch)
        .otherwise(None).alias("graph"),
    ]
    # collective names and dtypes: a handful of distinct values, mapped once each (no per-row Python);
    # with the rows that get an args JSON, from one query
    coll_names: list[str] = []
    dtypes: list[str] = []
    need: pl.Series | None = None
    if has_coll or has_bytes:
        facts = f.select(
            pl.col("coll_name").drop_nulls().unique().implode(),
            pl.col("dtype").drop_nulls().unique().implode(),
            (pl.col("coll_name").is_not_null() | pl.col("bytes").is_not_null()).arg_true().implode().alias("need"),
        )
        # the two short lists as Python values, the row numbers (every memcpy/memset row) kept a column
        coll_names, dtypes = facts["coll_name"][0].to_list(), facts["dtype"][0].to_list()
        need = facts["need"][0].cast(pl.UInt32).rename("need")
    if has_coll:
        dtype_bytes = pl.col("dtype").replace_strict(_DTYPE_BYTES, default=None, return_dtype=pl.Int64)
        # the op comes from the kernel name (categories.toml's coll_op, set at finalize), as for
        # capture, whose in-process events carry no args
        is_coll_kernel = pl.col("_kernel") & pl.col("coll_name").is_not_null()
        cols += [
            pl.when(is_coll_kernel).then(pl.col("in_nelems") * dtype_bytes).otherwise(None).alias("coll_bytes"),
            pl.when(is_coll_kernel).then(pl.col("pg_name")).otherwise(None).alias("group"),
        ]
    if need is not None:
        # the JSON is built for the few rows that have one, then placed (pl.format over every row
        # would cost more than the rest of this query)
        args = f.select(_ARGS_COLS)[need].select(_args_json(coll_names, dtypes)).to_series()
        f = f.with_columns(nulls(f.height, pl.String()).scatter(need, args).alias("args"))
    keep = [c for c in schema.COLUMNS if c != "rank" and (c in f.columns or c in (
        "kind", "device", "stream", "pid", "tid", "graph", "coll_bytes", "group", "args"))]
    keep = [c for c in keep if c not in ("coll_bytes", "group") or has_coll]
    keep = [c for c in keep if c != "args" or has_coll or has_bytes]
    known = kind_code >= 0
    lf = f.lazy().with_columns(cols)
    if not known.all():
        lf = lf.filter(series("", known))
    out = lf.select([*keep, "pid_raw"]).collect(engine="in-memory")  # ~20% less CPU than the streaming engine
    dropped: dict[str, int] = {}
    if out.height < f.height:  # events of unknown categories (kind null): counted by category
        u, k = np.unique(cat_c.codes[kind_code < 0], return_counts=True)
        for c, cnt in zip(u.tolist(), k.tolist(), strict=True):
            key = f"cat={cat_c.strings[c].lower() if c >= 0 else None}"
            dropped[key] = dropped.get(key, 0) + int(cnt)
    return ParsedTrace(events=out, meta=meta, dropped=dropped, n_events=n_all)


_ARGS_COLS = ("coll_name", "in_nelems", "out_nelems", "dtype", "group_size", "bytes")


def _args_json(coll_names: list[str], dtypes: list[str]) -> pl.Expr:
    """A small JSON object of kept args (memcpy bytes, collective sizes); null when there is none.
    ``coll_names`` / ``dtypes``: the distinct values of those columns (JSON-quoted once each)."""
    bytes_ = pl.col("bytes")
    coll = pl.col("coll_name")
    return (
        pl.when(coll.is_not_null())
        .then(
            pl.format(
                '{{"collective":{},"in_nelems":{},"out_nelems":{},"dtype":{},"group_size":{}}}',
                coll.replace_strict({c: _json_str(c) for c in coll_names}, default=None, return_dtype=pl.String),
                pl.col("in_nelems").cast(pl.String).fill_null("null"),
                pl.col("out_nelems").cast(pl.String).fill_null("null"),
                pl.col("dtype").replace_strict({d: _json_str(d) for d in dtypes}, default=None, return_dtype=pl.String)
                .fill_null("null"),
                pl.col("group_size").cast(pl.String).fill_null("null"),
            )
        )
        .when(bytes_.is_not_null())
        .then(pl.format('{{"bytes":{}}}', bytes_))
        .otherwise(None)
    )


def _json_str(s: str) -> str:
    return msgspec.json.encode(s).decode()

