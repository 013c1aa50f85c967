"""The one data model: the event table of run.parquet (docs/schema.md).

One row per event, all ranks, int64 nanoseconds on one aligned timeline.
Bump SCHEMA_VERSION on any incompatible change and document it in docs/schema.md.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit import buckets

SCHEMA_VERSION: Final = 1

# Event kinds.
KERNEL: Final = "kernel"  # GPU kernel (pid=device, stream)
MEMCPY: Final = "memcpy"  # GPU memcpy
MEMSET: Final = "memset"  # GPU memset
LAUNCH: Final = "launch"  # host call that enqueues GPU work (cudaLaunchKernel, cuLaunchKernelEx, cudaGraphLaunch, cudaMemcpyAsync, ...)
RUNTIME: Final = "runtime"  # other CUDA runtime/driver calls (cudaEventRecord, cudaMalloc, ...)
SYNC: Final = "sync"  # host-side synchronisation (cudaStreamSynchronize, cudaDeviceSynchronize, cuda_sync events)
RANGE: Final = "range"  # host range: record_function / user_annotation (phase ranges are ranges)
GPU_RANGE: Final = "gpu_range"  # a range projected on a GPU stream (gpu_user_annotation)
OP: Final = "op"  # cpu_op (aten ops, record_param_comms)
PYTHON: Final = "python"  # python_function (with_stack)
COUNTER: Final = "counter"  # sampled value: name = counter name, value in `value`
INSTANT: Final = "instant"  # zero-length marker

GPU_KINDS: Final = (KERNEL, MEMCPY, MEMSET)
KINDS: Final = (KERNEL, MEMCPY, MEMSET, LAUNCH, RUNTIME, SYNC, RANGE, GPU_RANGE, OP, PYTHON, COUNTER, INSTANT)

# Kernel categories: the only values the category rules can give (tracekit.finalize.categories).
CATEGORIES: Final = buckets.CATEGORIES  # tracekit.buckets.VOCABULARY: the buckets that are not gaps

# kind and category are dictionary-encoded (polars Enum: one small integer code per row, the
# vocabulary in the schema): analyzers read the codes, no string is compared per row. The
# vocabularies are in lexical order, so an Enum column sorts and compares as the strings would
# (sort_events' order is unchanged). A run written before (String columns) is converted on read,
# in one place: tracekit.store.scan_run.
KIND_CODES: Final = tuple(sorted(KINDS))  # the Enum's categories: code i is KIND_CODES[i]
CATEGORY_CODES: Final = tuple(sorted(CATEGORIES))
KIND_DTYPE: Final = pl.Enum(list(KIND_CODES))
CATEGORY_DTYPE: Final = pl.Enum(list(CATEGORY_CODES))

# Phase names tracekit's collectors emit (docs/attribution.md section 1).
PHASES: Final = ("draft", "verify", "draft_extend", "decode", "prefill")

# Column name -> polars dtype, in file order.
COLUMNS: Final[dict[str, pl.DataType]] = {
    # identity
    "rank": pl.Int32(),
    "kind": KIND_DTYPE,  # one of KINDS
    "name": pl.String(),  # full name as recorded (never truncated)
    "category": CATEGORY_DTYPE,  # kernel category, one of CATEGORIES (categories.py); null for host events
    "device": pl.Int16(),  # GPU index for GPU events, -1 for host events
    "stream": pl.Int64(),  # CUDA stream for GPU events
    "pid": pl.Int64(),  # host process id
    "tid": pl.Int64(),  # host thread id (for GPU events: null)
    # time (aligned, ns)
    "start_ns": pl.Int64(),
    "dur_ns": pl.Int64(),
    # links
    "correlation": pl.Int64(),  # launch <-> GPU event
    "external_id": pl.Int64(),  # Kineto External id (op <-> launch)
    "graph": pl.Boolean(),  # kernel replayed from a CUDA graph / launch that is cudaGraphLaunch
    "phase": pl.String(),  # phase name: on phase range rows, and on events that belong to a phase
    "phase_id": pl.Int64(),  # phase instance id (unique in the run); on range rows and member events
    "cycle": pl.Int64(),  # speculative cycle index (collector-provided)
    # phase facts (on phase range rows)
    "batch_size": pl.Int64(),
    "num_tokens": pl.Int64(),
    "seq_len": pl.Int64(),  # mean context length of the batch at this phase
    "graphed": pl.Boolean(),  # the phase ran from a CUDA graph
    "accept_len": pl.Float64(),  # mean accepted draft tokens per request (verify rows)
    # collectives
    "coll_op": pl.String(),  # allreduce, allgather, reducescatter, broadcast, sendrecv, alltoall, dispatch, combine
    "coll_bytes": pl.Int64(),
    "coll_seq": pl.Int64(),  # order of the collective within (rank, group)
    "group": pl.String(),  # communicator / process-group name, or stream-derived key
    # counters and leftovers
    "value": pl.Float64(),  # counter value
    "args": pl.String(),  # JSON object of remaining args worth keeping (grid, block, bytes, ...)
}

SCHEMA: Final = pl.Schema(COLUMNS)


def empty_events() -> pl.DataFrame:
    """An event table with no rows and the full schema."""
    return pl.DataFrame(schema=SCHEMA)


def category_codes(col: pl.Expr) -> pl.Expr:
    """A category column as CATEGORY_DTYPE codes: a value outside CATEGORIES is ``other`` (what every
    analyzer made of it before the column was an Enum), null stays null."""
    cat = col.cast(pl.String)
    known = cat.is_in(list(CATEGORIES)) | cat.is_null()
    return pl.when(known).then(cat).otherwise(pl.lit("other")).cast(CATEGORY_DTYPE, strict=True).alias("category")


def conform(df: pl.DataFrame) -> pl.DataFrame:
    """Add missing columns as nulls, cast to the schema's dtypes, order columns.

    A category outside CATEGORIES becomes ``other`` (what every analyzer made of it before the
    column was an Enum); a kind outside KINDS cannot be cast.
    Raises ValueError naming the first column that cannot be cast.
    A frame that conforms already is returned as it is (a select would copy it into one chunk).
    """
    if df.schema == SCHEMA:
        return df
    exprs: list[pl.Expr] = []
    for name, dtype in COLUMNS.items():
        if name == "category" and name in df.columns and df.schema[name] != dtype:
            exprs.append(category_codes(pl.col(name)))
        elif name in df.columns:
            exprs.append(pl.col(name).cast(dtype, strict=True))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    extra = [c for c in df.columns if c not in COLUMNS]
    return df.select(exprs + [pl.col(c) for c in extra])


def owned(df: pl.DataFrame) -> pl.DataFrame:
    """A copy of ``df`` with buffers of its own: a filtered frame's strings still point into the whole
    table's buffers, which stay alive as long as it does (a small projection kept per rank would keep
    every rank's table: measured ~4 MB per rank of bench/scale.py)."""
    import io

    return pl.read_ipc(io.BytesIO(df.write_ipc(None).getvalue()))


def sort_events(df: pl.DataFrame) -> pl.DataFrame:
    """Canonical order: rank, start, longer first (so enclosing ranges precede children), kind, name."""
    return df.with_columns(pl.col("dur_ns").neg().alias("_neg_dur")).sort(
        ["rank", "start_ns", "_neg_dur", "kind", "name"], nulls_last=True, maintain_order=True
    ).drop("_neg_dur")
