"""The compiled Kineto scanner (tracekit.ingest.fastscan) against the msgspec path: identical
tables on real traces, on generated traces of every value shape, and on mutated files (where
the scanner declines, the msgspec path decides, errors included)."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kineto_synth import _NUM, gpu_rank

from tracekit.errors import BadTraceError
from tracekit.ingest import fastscan, kineto

ROOT = Path(__file__).resolve().parent.parent
REAL = sorted((ROOT / "samples" / "h200x2-builtin").glob("*.trace.json.gz")) + sorted(
    (ROOT / "samples" / "sglang-shapes-h200x2").glob("*.trace.json.gz")) + [
    ROOT / "samples" / "rocm-mi300x" / "mi300x-bert-small.json.gz"]  # ROCm: HIP launches, roctracer's shape

needs_scanner = pytest.mark.skipif(fastscan.scanner is None, reason="tracekit._kineto is not built (pip install -e .)")


def test_scanner_is_built_in_ci() -> None:
    if os.environ.get("CI") == "true" and os.environ.get("TRACEKIT_PURE") != "1":
        assert fastscan.scanner is not None, "tracekit._kineto was not built by pip install"


def _msgspec_path(data: bytes) -> kineto.ParsedTrace | str:
    saved = fastscan.scanner
    fastscan.scanner = None
    try:
        return kineto.parse_kineto(data, "t.json")
    except BadTraceError as exc:
        return f"error: {exc}"
    finally:
        fastscan.scanner = saved


def _scanned_path(data: bytes) -> kineto.ParsedTrace | str:
    try:
        return kineto.parse_kineto(data, "t.json")
    except BadTraceError as exc:
        return f"error: {exc}"


def _same(data: bytes) -> bool:
    """Both paths give the same table (or the same error); True if the scanner took the file."""
    took = fastscan.scan(data) is not None
    a, b = _scanned_path(data), _msgspec_path(data)
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return took
    assert a.events.schema == b.events.schema
    assert a.events.equals(b.events, null_equal=True)
    assert (a.meta, a.dropped, a.n_events) == (b.meta, b.dropped, b.n_events)
    return took


@needs_scanner
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_traces_identical(path: Path) -> None:
    assert _same(gzip.decompress(path.read_bytes())), "the scanner declined a real Kineto trace"


@needs_scanner
def test_generated_rank_identical() -> None:
    for integer_us in (False, True):
        text = json.dumps(gpu_rank(1, integer_us=integer_us).doc(), indent=1)
        assert _same(kineto_text(text).encode())


def kineto_text(text: str) -> str:
    return _NUM.sub(r"\1", text)


# ---- generated documents: every shape a field can take ----------------------------------------

_names = st.one_of(
    st.sampled_from(["aten::mm", "cudaLaunchKernel", "cudaGraphLaunch", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                     "void flash::fwd<\"x\">(P)", "tracekit:verify|cycle=0", "Memcpy DtoH", "é 名", "\\", "tab\there"]),
    st.text(max_size=6), st.none(), st.integers(0, 3),
)
_time = st.one_of(
    st.integers(-10**6, 10**13).map(str),
    st.tuples(st.integers(0, 10**13), st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]:03d}"),
    st.tuples(st.integers(-10**6, 10**6), st.integers(1, 9)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(st.integers(0, 10**6), st.integers(0, 99)).map(lambda t: f"{t[0]}.{t[1]:02d}"),
    st.sampled_from(["1.2345", "1e3", "-0.5", "-0.000", "0", "null", "\"12.5\"", "9223372036854775.807",
                     "99999999999999999999", "1.5E-2"]),
)
_ints = st.one_of(st.integers(-5, 2**63 - 1), st.none(), st.sampled_from([True, 1.5, "7", 2**64]))
_ids = st.one_of(st.integers(0, 5000), st.sampled_from(["Spans", "Traces", "GPU 0", None, True, 1.0]))


@st.composite
def _event(draw: Any) -> str:
    ph = draw(st.sampled_from(["X", "X", "X", "i", "I", "M", "s", "f", "C", "Z", None]))
    ev: dict[str, Any] = {}
    if ph is not None:
        ev["ph"] = ph
    ev["cat"] = draw(st.sampled_from(["kernel", "cuda_runtime", "cuda_driver", "cpu_op", "user_annotation", "Kernel",
                                      "gpu_memcpy", "gpu_user_annotation", "python_function", "odd", None, 5]))
    ev["name"] = draw(_names)
    if draw(st.booleans()):
        ev["pid"] = draw(_ids)
    if draw(st.booleans()):
        ev["tid"] = draw(_ids)
    if draw(st.integers(0, 9)):
        ev["ts"] = f"__T{draw(_time)}__"
    if draw(st.booleans()):
        ev["dur"] = f"__T{draw(_time)}__"
    if draw(st.booleans()):
        args = {}
        for k in draw(st.lists(st.sampled_from(["External id", "device", "stream", "correlation", "bytes", "cbid",
                                                "Collective name", "In msg nelems", "Out msg nelems", "Group size",
                                                "dtype", "Process Group Name", "grid", "name"]), max_size=6)):
            if k in ("Collective name", "dtype", "Process Group Name", "name"):
                args[k] = draw(st.one_of(st.sampled_from(["allreduce", "BFloat16", "0", "all_gather"]), st.none(),
                                         st.integers(0, 3)))
            elif k == "grid":
                args[k] = [1, 2, {"a": [None, 1.5e3]}]
            else:
                args[k] = draw(_ints)
        ev["args"] = args if draw(st.integers(0, 9)) else draw(st.sampled_from([None, [], 3]))
    return _fix(json.dumps(ev, ensure_ascii=draw(st.booleans())))


def _fix(text: str) -> str:
    """Times are written as raw number literals (``"__T1.5__"`` -> ``1.5``)."""
    return re.sub(r'"__T(.*?)__"', lambda m: m.group(1).replace('\\"', '"'), text)


@st.composite
def _document(draw: Any) -> bytes:
    events = draw(st.lists(_event(), min_size=0, max_size=25))
    head = {"schemaVersion": 1, "distributedInfo": {"rank": draw(st.integers(0, 7)), "world_size": 8}}
    if draw(st.booleans()):
        head["baseTimeNanoseconds"] = draw(st.sampled_from([1_790_857_026_000_000_000, 0, "x"]))
    body = "[" + ",\n".join(events) + "]"
    if draw(st.integers(0, 5)) == 0:
        return body.encode()
    text = json.dumps(head)[:-1] + ', "traceEvents": ' + body + ', "traceName": "t"}'
    return text.encode()


@needs_scanner
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_document())
def test_generated_documents_identical(doc: bytes) -> None:
    _same(doc)


@needs_scanner
def test_generated_documents_mostly_taken() -> None:
    """Ordinary generated documents (usual types only) go through the scanner, not around it."""
    from tracekit.ingest.fastscan import scan

    docs = [gpu_rank(r).doc() for r in range(3)]
    assert all(scan(kineto_text(json.dumps(d)).encode()) is not None for d in docs)


@needs_scanner
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_real_bytes(data: st.DataObject) -> None:
    src = kineto_text(json.dumps(gpu_rank(0).doc(), indent=1)).encode()
    b = bytearray(src)
    for _ in range(data.draw(st.integers(1, 4))):
        if not b:
            b = bytearray(b"[")
        op = data.draw(st.sampled_from(["flip", "cut", "dup", "del"]))
        i = data.draw(st.integers(0, len(b) - 1))
        if op == "flip":
            b[i] = data.draw(st.sampled_from(list(b'{}[]",:.-0123456789eE\\ \x00\xff\xc3atnf')))
        elif op == "cut":
            del b[i:]
        elif op == "dup":
            j = min(len(b), i + data.draw(st.integers(1, 40)))
            b[i:i] = b[i:j]
        else:
            del b[i:i + data.draw(st.integers(1, 5))]
    _same(bytes(b))


# keys: the scanner reads a plain ASCII key ending within 16 bytes without the full string check;
# anything else (escapes, non-ASCII, control bytes, long keys, a key near the end) takes that check
_KEYS = ['"ph"', '"p\\u0068"', '"n\\u0061me"', '"\\u0063at"', '"na\\"me"', '"nam\\\\e"', '"name\u00e9"', '"é"',
         '"名前"', '"a\\/b"', '"ts\\t"', '"x\x01"', '"x\x7f"', '"x\xff"', '"a_very_long_key_beyond_sixteen_bytes"',
         '"exactly_fifteen"', '"sixteen_chars__"', '"seventeen_chars__"', '"Collective n\\u0061me"', '"Ev Idx"']


@needs_scanner
@pytest.mark.parametrize("key", _KEYS)
@pytest.mark.parametrize("where", ["event", "args", "top", "end"])
def test_odd_keys_identical(key: str, where: str) -> None:
    ev = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 7, "ts": 1.5, "dur": 2.25'
    args = '"args": {"External id": 3, "correlation": 9}'
    if where == "event":
        doc = f'{{"traceEvents": [{ev}, {key}: 1, {args}}}]}}'
    elif where == "args":
        doc = f'{{"traceEvents": [{ev}, "args": {{"device": 0, {key}: "allreduce"}}}}]}}'
    elif where == "top":
        doc = f'{{{key}: 1, "traceEvents": [{ev}, {args}}}]}}'
    else:  # the key within the last 16 bytes of the buffer
        doc = f'{{"traceEvents": [{ev}, {args}}}], {key}: 0}}'
    # a raw invalid UTF-8 byte inside the key (latin-1 keeps \xff one byte); the rest as UTF-8
    data = doc.encode("latin-1") if "\xff" in key else doc.encode("utf-8")
    _same(data)
    plain = ('"Ev Idx"', '"exactly_fifteen"', '"sixteen_chars__"', '"a_very_long_key_beyond_sixteen_bytes"')
    if key in plain:  # plain keys: the scanner takes the file
        assert fastscan.scan(data) is not None
