"""Parse one Kineto / torch.profiler Chrome-trace JSON document into event columns.

Speed: the document is decoded by msgspec into small typed Structs (unknown
fields skipped, ``args`` reduced to the keys tracekit uses), then turned into
columns with one list comprehension per column; no dict is built per event.
Exactness: numbers that are not integers reach us as their literal text
(``float_hook=str``) and are converted to int64 ns by :mod:`tracekit.ingest.exact`.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import msgspec
import polars as pl

from tracekit.errors import BadTraceError, NotATraceError
from tracekit.ingest import fastscan
from tracekit.ingest.exact import us_text_to_ns
from tracekit.ingest.kineto_events import ParsedTrace, finish_columns, nulls
from tracekit.ingest.screen import shifted_start
from tracekit.inputs import too_deep


class _Args(msgspec.Struct, frozen=True, gc=False, rename={
    "external_id": "External id",
    "coll_name": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "pg_name": "Process Group Name",
    "group_size": "Group size",
}):
    # Field order follows Kineto's key order (msgspec checks the expected next field first).
    external_id: Any = None
    device: Any = None
    stream: Any = None
    correlation: Any = None
    bytes: Any = None  # memcpy / memset
    coll_name: Any = None  # c10d collectives (kernel and record_param_comms rows)
    in_nelems: Any = None
    out_nelems: Any = None
    group_size: Any = None
    dtype: Any = None
    pg_name: Any = None
    name: Any = None  # metadata events: process_name / thread_name


_NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args = _NO_ARGS


_EMPTY_RAW = msgspec.Raw(b"")


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None
    schemaVersion: msgspec.Raw = _EMPTY_RAW
    deviceProperties: msgspec.Raw = _EMPTY_RAW
    distributedInfo: msgspec.Raw = _EMPTY_RAW
    baseTimeNanoseconds: msgspec.Raw = _EMPTY_RAW
    cuda_driver_version: msgspec.Raw = _EMPTY_RAW
    cuda_runtime_version: msgspec.Raw = _EMPTY_RAW
    cupti_version: msgspec.Raw = _EMPTY_RAW
    trace_id: msgspec.Raw = _EMPTY_RAW
    traceName: msgspec.Raw = _EMPTY_RAW
    displayTimeUnit: msgspec.Raw = _EMPTY_RAW
    hip_runtime_version: msgspec.Raw = _EMPTY_RAW  # ROCm
    hip_driver_version: msgspec.Raw = _EMPTY_RAW
    roctracer_version: msgspec.Raw = _EMPTY_RAW


_TRACE_DECODER = msgspec.json.Decoder(_Trace, float_hook=str)
_LIST_DECODER = msgspec.json.Decoder(list[_Event], float_hook=str)


# The fast decoder: a union tagged by "ph". Complete events and instants decode to the fields
# tracekit uses; flows, metadata, counters etc. to an empty Struct (their fields are parsed but
# nothing is allocated for them). A ph value outside this list (or a missing ph) makes it fail,
# and the file is decoded again with the plain decoders above.
class _Kept(msgspec.Struct, tag_field="ph", gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args = _NO_ARGS


class _Complete(_Kept, tag="X"):
    pass


class _Instant(_Kept, tag="i"):
    pass


class _InstantOld(_Kept, tag="I"):
    pass


class _Other(msgspec.Struct, tag_field="ph", gc=False):
    pass


_OTHER_PH = ("s", "t", "f", "M", "C", "B", "E", "b", "n", "e", "P", "O", "N", "D", "R", "S", "T", "p", "c", "V", "v")
_OTHERS: list[Any] = [msgspec.defstruct(f"_Other_{t}", [], bases=(_Other,), tag=t, gc=False) for t in _OTHER_PH]
_TAGGED: Any = list[functools.reduce(operator.or_, [_Complete, _Instant, _InstantOld, *_OTHERS])]  # type: ignore[misc]
_TAGGED_TRACE: Any = msgspec.defstruct("_TaggedTrace", [("traceEvents", _TAGGED, None)], bases=(_Trace,))
_TAGGED_TRACE_DECODER = msgspec.json.Decoder(_TAGGED_TRACE, float_hook=str)
_TAGGED_LIST_DECODER = msgspec.json.Decoder(_TAGGED, float_hook=str)
_KEPT_TYPES = frozenset({_Complete, _Instant, _InstantOld})
_PLAIN = msgspec.json.Decoder()
_PLAIN_EXACT = msgspec.json.Decoder(float_hook=str)

def _raw(value: msgspec.Raw, exact: bool = False) -> Any:
    if not len(value):
        return None
    try:
        return (_PLAIN_EXACT if exact else _PLAIN).decode(value)
    except msgspec.DecodeError:
        return None


def _int_or_none(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            return None
    return None


def _decode(data: bytes | memoryview, path: str) -> tuple[_Trace, list[Any]]:
    """The top-level object and its events: ``_Kept``/``_Other`` Structs from the tagged decoder,
    or ``_Event`` Structs from the plain one when the tagged one cannot take the file."""
    bare = bytes(data[:4096]).lstrip()[:1] == b"["  # _check_head: whitespace beyond that is an empty file
    try:
        if bare:
            return _Trace(), _TAGGED_LIST_DECODER.decode(data)
        top = _TAGGED_TRACE_DECODER.decode(data)
    except msgspec.ValidationError:
        pass  # an unexpected ph (or a shape error the plain decoder will name): decode plainly
    else:
        if top.traceEvents is not None:
            tagged_events: list[Any] = top.traceEvents
            top.traceEvents = None
            return top, tagged_events
    try:
        if bare:
            return _Trace(), _LIST_DECODER.decode(data)
        top = _TRACE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise NotATraceError(f"valid JSON but not a Kineto trace ({exc})", path=path) from None
    if top.traceEvents is None:
        raise NotATraceError("valid JSON but not a trace (no traceEvents list)", path=path)
    events = top.traceEvents
    top.traceEvents = None
    return top, events


_UNSCANNED: Any = object()


def parse_kineto(data: bytes | memoryview, path: str, scanned: Any = _UNSCANNED) -> ParsedTrace:
    """Decode one Kineto JSON document. Raises BadTraceError (naming ``path``) if it is not a trace.
    ``scanned``: ``fastscan.scan_raw(data)`` when the caller ran it already (in a thread); when
    that is not None, ``data`` is not read (the caller may pass ``b""``)."""
    if scanned is _UNSCANNED:
        scanned = fastscan.scan_raw(data)  # the compiled one-pass scanner; None: not its shape
    meta: dict[str, Any] = {}
    cols = fastscan.columns(scanned)
    del scanned
    events: list[Any] = []
    if cols is not None:
        top = _Trace()
        for key, raw in cols[0].items():
            setattr(top, key, raw)
    else:
        _check_head(data, path)
        top, events = _decode_or_raise(data, path, meta)
    base_raw = _raw(top.baseTimeNanoseconds)
    base_ns = _int_or_none(base_raw)
    if base_raw is not None and base_ns is None:
        raise BadTraceError(f"baseTimeNanoseconds is not an integer: {base_raw!r}", path=path)
    if base_ns is not None and not -(2**63) <= base_ns < 2**63:
        raise BadTraceError(f"baseTimeNanoseconds is out of the int64 ns range: {base_ns}", path=path)
    meta["baseTimeNanoseconds"] = base_ns
    for key in fastscan.TOP_KEYS:
        if key == "baseTimeNanoseconds":
            continue
        val = _raw(getattr(top, key))
        if val is not None:
            meta[key] = val
    if cols is not None:
        _, frame, n_all, codes = cols
        return finish_columns(frame.with_columns(shifted_start(pl.col("start_ns"), base_ns)), path, meta, n_all, codes)
    return _columns(events, base_ns or 0, path, meta)


def _check_head(data: bytes | memoryview, path: str) -> None:
    head = bytes(data[:4096]).lstrip()
    if not head:
        raise BadTraceError("empty file", path=path)
    if head[:1] not in (b"{", b"["):
        raise BadTraceError("not JSON (does not start with '{' or '[')", path=path)


def _decode_or_raise(data: bytes | memoryview, path: str, meta: dict[str, Any]) -> tuple[_Trace, list[Any]]:
    """``_decode``, with non-UTF-8 bytes replaced (noted in ``meta``) and errors as BadTraceError."""
    try:
        return _decode(data, path)
    except RecursionError:
        raise too_deep("the JSON", path, BadTraceError) from None
    except msgspec.DecodeError as exc:
        if "UTF-8" not in str(exc):
            raise BadTraceError(f"truncated or malformed JSON ({exc})", path=path) from None
        # names with non-UTF-8 bytes: keep the event, replace the bad bytes (U+FFFD)
        meta["non_utf8_replaced"] = True
        try:
            return _decode(bytes(data).decode("utf-8", "replace").encode("utf-8"), path)
        except msgspec.DecodeError as exc2:
            raise BadTraceError(f"truncated or malformed JSON ({exc2})", path=path) from None


_KEEP_PH = frozenset({"X", "i", "I"})  # flows (s/f/t), counters (C), metadata (M) are not events


def _sparse(values: list[Any], idx: list[int], n: int, dtype: pl.DataType) -> pl.Series:
    """A length-``n`` Series that holds ``values`` at positions ``idx`` and nulls elsewhere."""
    if not idx:
        return nulls(n, dtype)
    return nulls(n, dtype).scatter(idx, pl.Series(values, dtype=dtype, strict=False))


def _series(values: list[Any], dtype: pl.DataType) -> pl.Series:
    """A Series of ``dtype``; the fast strict path first, values of other types become null."""
    if values and values[0] is None and values.count(None) == len(values):  # polars would scan in Python
        return nulls(len(values), dtype)
    try:
        return pl.Series(values, dtype=dtype, strict=True)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        if dtype == pl.Int64:
            _drop_non_int(values)
            return pl.Series(values, dtype=dtype, strict=True)
        return pl.Series(values, dtype=dtype, strict=False)


_STR_TYPES = frozenset({str, type(None)})


def _dedup_str_series(values: list[Any]) -> pl.Series:
    """A String Series of ``values`` (str or None) whose rows are views into one copy of each
    distinct string: kernel names repeat thousands of times, and polars would otherwise copy
    every occurrence (a third of the event table's memory). Other value types: ``_series``."""
    index = dict.fromkeys(values)
    if not set(map(type, index)) <= _STR_TYPES:
        return _series(values, pl.String())
    for i, k in enumerate(index):
        index[k] = i
    codes = pl.Series(list(map(index.__getitem__, values)), dtype=pl.UInt32)
    return pl.Series(list(index), dtype=pl.String).gather(codes)


def _drop_non_int(values: list[Any]) -> list[int]:
    """Set every value that is neither an int of the int64 range nor None to None, in place (a
    list this module built); returns their positions. One Python pass, then only the few odd values."""
    bad = [i for i, v in enumerate(values) if (type(v) is not int and v is not None)
           or (type(v) is int and not -(2**63) <= v < 2**63)]
    for i in bad:
        values[i] = None
    return bad


_CHUNK = 2048  # events per transposition step: a step's Structs stay in cache across its ~15 passes


_INT_TYPES = frozenset({int, type(None)})


def _odd_positions(values: list[Any], base: int, into: list[int]) -> bool:
    """Append ``base + j`` for every value that is neither an int nor None (bools included);
    True if one of them is not a bool. One C-level type scan; the Python loop only runs on a
    chunk that has such a value."""
    types = set(map(type, values))
    if types <= _INT_TYPES:
        return False
    into.extend(base + j for j, v in enumerate(values) if type(v) is not int and v is not None)
    return bool(types - _INT_TYPES - {bool})


def _transpose(events: list[Any]) -> tuple[dict[str, list[Any]], list[int], list[_Args]]:
    """Kept events (ph X / i / I) as one Python list per field, built a chunk at a time: every
    field of a chunk is read while its Structs are still in the CPU cache (one pass per field
    over the whole list costs a cache miss per event per field). Also the positions and args
    of the few events with a ``Collective name``. Positions of pids / tids that are not ints are
    under ``"_odd_pid"`` / ``"_odd_tid"`` (empty when only bools: polars takes those as ints)."""
    keep = _KEEP_PH
    kept_types = _KEPT_TYPES
    tagged = bool(events) and not isinstance(events[0], _Event)
    names = ("instant", "cat", "name", "pid", "tid", "ts", "dur",
             "correlation", "external_id", "device", "stream", "bytes")
    out: dict[str, list[Any]] = {k: [] for k in names}
    ph, cat, name, pid, tid, ts, dur = (out[k] for k in names[:7])
    corr, ext, dev, stream, nbytes = (out[k] for k in names[7:])
    cidx: list[int] = []
    cargs: list[_Args] = []
    odd_pid: list[int] = []
    odd_tid: list[int] = []
    pid_str = tid_str = False
    for lo in range(0, len(events), _CHUNK):
        if tagged:
            ch = [e for e in events[lo:lo + _CHUNK] if type(e) in kept_types]
            inst = [type(e) is not _Complete for e in ch]
        else:
            ch = [e for e in events[lo:lo + _CHUNK] if e.ph in keep]
            inst = [e.ph != "X" for e in ch]
        base = len(ph)
        ph += inst
        cat += [e.cat for e in ch]
        name += [e.name for e in ch]
        pc = [e.pid for e in ch]
        tc = [e.tid for e in ch]
        pid_str |= _odd_positions(pc, base, odd_pid)
        tid_str |= _odd_positions(tc, base, odd_tid)
        pid += pc
        tid += tc
        ts += [e.ts for e in ch]
        dur += [e.dur for e in ch]
        args = [e.args for e in ch]
        corr += [a.correlation for a in args]
        ext += [a.external_id for a in args]
        dev += [a.device for a in args]
        stream += [a.stream for a in args]
        nbytes += [a.bytes for a in args]
        colls = [a.coll_name for a in args]
        if colls.count(None) != len(colls):
            for j, c in enumerate(colls):
                if c is not None:
                    cidx.append(base + j)
                    cargs.append(args[j])
    out["_odd_pid"] = odd_pid if pid_str else []
    out["_odd_tid"] = odd_tid if tid_str else []
    return out, cidx, cargs


def _columns(events: list[Any], base_ns: int, path: str, meta: dict[str, Any]) -> ParsedTrace:
    n_all = len(events)
    cols, cidx, cargs = _transpose(events)
    del events
    n = len(cols["instant"])
    ts = us_text_to_ns(_series(cols.pop("ts"), pl.String()))
    if ts.null_count():
        raise BadTraceError(f"{ts.null_count()} event(s) with a missing or non-numeric ts", path=path)
    dur_text = _series(cols.pop("dur"), pl.String())
    # no dur (instants): 0; a dur that is no finite number in the int64 ns range (1e400): null, screened
    # out and reported by ingest (tracekit.ingest.screen), never 0
    dur = pl.select(pl.when(dur_text.is_null()).then(0).otherwise(us_text_to_ns(dur_text))).to_series()
    del dur_text
    # string pids: Kineto's own "Spans"/"Traces" rows, or every row of a merged trace; they go
    # to pid_raw, and pid_int is null there (tid likewise null)
    pids = cols.pop("pid")
    sidx = cols.pop("_odd_pid")
    pid_raw = _sparse([str(pids[i]) for i in sidx], sidx, n, pl.String())
    for i in sidx:
        pids[i] = None
    pid_int = _series(pids, pl.Int64())
    del pids
    tids = cols.pop("tid")
    for i in cols.pop("_odd_tid"):
        tids[i] = None
    frame = pl.DataFrame(
        {
            "cat": _series(cols.pop("cat"), pl.String()),
            "instant": pl.Series(cols.pop("instant"), dtype=pl.Boolean),
            "name": _dedup_str_series(cols.pop("name")),
            "pid_raw": pid_raw,
            "pid_int": pid_int,
            "tid_raw": _series(tids, pl.Int64()),
            "start_ns": ts,
            "dur_ns": dur,
            "correlation": _series(cols.pop("correlation"), pl.Int64()),
            "external_id": _series(cols.pop("external_id"), pl.Int64()),
            "a_device": _series(cols.pop("device"), pl.Int64()),
            "a_stream": _series(cols.pop("stream"), pl.Int64()),
            "bytes": _series(cols.pop("bytes"), pl.Int64()),
            "coll_name": _sparse([a.coll_name for a in cargs], cidx, n, pl.String()),
            "in_nelems": _sparse([a.in_nelems for a in cargs], cidx, n, pl.Int64()),
            "out_nelems": _sparse([a.out_nelems for a in cargs], cidx, n, pl.Int64()),
            "dtype": _sparse([a.dtype for a in cargs], cidx, n, pl.String()),
            "pg_name": _sparse([a.pg_name for a in cargs], cidx, n, pl.String()),
            "group_size": _sparse([a.group_size for a in cargs], cidx, n, pl.Int64()),
        }
    )
    del cols, cargs, tids
    return finish_columns(frame.with_columns(shifted_start(pl.col("start_ns"), base_ns)), path, meta, n_all)


