"""Vectorised protobuf encoding: many messages of one shape at once, with numpy.

A message shape is a list of segments (constant bytes, varint fields, fixed64
fields, pre-encoded blobs looked up by index, repeated fixed64 fields and
nested messages). ``encode_rows`` lays out N messages of that shape, each
wrapped as field 1 of ``Trace`` (a ``TracePacket``), into one byte string:
lengths are computed per row for every segment, then every segment scatters
its bytes into the output buffer at per-row cursors. Nothing loops over rows
in Python.

Scalar helpers (``varint``, ``key``, ``field_*``) build the few one-off messages
(track descriptors, interned data) directly.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]
I64 = npt.NDArray[np.int64]
BoolA = npt.NDArray[np.bool_]

WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LEN = 2

_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # 0, 7, ..., 63


# ---- scalar helpers -------------------------------------------------------


def _varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_ONE = [bytes((i,)) for i in range(128)]


def varint(v: int) -> bytes:
    """Base-128 varint of a non-negative int (negative ints as 64-bit two's complement)."""
    return _ONE[v] if 0 <= v < 128 else _varint(v)


@functools.lru_cache(maxsize=1024)
def key(field_no: int, wire: int) -> bytes:
    return varint((field_no << 3) | wire)


def field_varint(field_no: int, v: int) -> bytes:
    return key(field_no, WIRE_VARINT) + varint(v)


def field_bytes(field_no: int, data: bytes) -> bytes:
    return key(field_no, WIRE_LEN) + varint(len(data)) + data


def field_str(field_no: int, s: str) -> bytes:
    return field_bytes(field_no, s.encode("utf-8", "surrogatepass"))


def field_double(field_no: int, v: float) -> bytes:
    return key(field_no, WIRE_FIXED64) + struct.pack("<d", v)


def packet(body: bytes) -> bytes:
    """Wrap an encoded TracePacket as ``Trace.packet`` (field 1)."""
    return field_bytes(1, body)


# ---- vectorised helpers ---------------------------------------------------


def _vlen(x: int) -> int:
    return max(1, (x.bit_length() + 6) // 7)


def varint_len(v: U64) -> I64:
    """Bytes of the varint encoding of each value (only the thresholds between min and max are tested)."""
    if v.size == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = _vlen(int(v.min())), _vlen(int(v.max()))
    n = np.full(v.shape, lo, dtype=np.int64)
    for k in range(lo, hi):
        n += v >= np.uint64(1 << (7 * k))
    return n


def ragged_ramp(lengths: I64) -> tuple[I64, I64]:
    """For ragged rows of ``lengths``: (row index of each item, position of each item in its row)."""
    total = int(lengths.sum())
    row = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    first = np.cumsum(lengths) - lengths
    ramp = np.arange(total, dtype=np.int64) - np.repeat(first, lengths)
    return row, ramp


class Seg:
    """One segment of a message shape; ``lengths`` is computed once and cached, so a
    segment object serves exactly one ``encode_array`` call."""

    _len: I64 | None = None

    def lengths(self, n: int) -> I64:
        if self._len is None:
            self._len = self._compute(n)
        return self._len

    def _compute(self, n: int) -> I64:
        raise NotImplementedError

    def write(self, out: U8, pos: I64) -> None:
        """Write every row's bytes at ``pos`` and advance ``pos`` by the row's length."""
        raise NotImplementedError


def _mask(present: BoolA | None, n: int) -> BoolA:
    return np.ones(n, dtype=bool) if present is None else present


def _put_const(out: U8, pos: I64, data: bytes) -> None:
    if not data or pos.size == 0:
        return
    out[pos] = data[0]
    for j in range(1, len(data)):
        out[pos + j] = data[j]


def _put_varints(out: U8, pos: I64, v: U64, nb: I64 | None = None) -> I64:
    """Write varints of ``v`` at ``pos``; returns their lengths (``nb`` if already known)."""
    if nb is None:
        nb = varint_len(v)
    if v.size == 0:
        return nb
    lo, hi = int(nb.min()), int(nb.max())
    if lo == hi:  # one width for every row: one 2D write, no masks
        b = ((v[:, None] >> _SHIFTS[:hi]) & np.uint64(0x7F)).astype(np.uint8)
        b[:, : hi - 1] |= np.uint8(0x80)
        out[pos[:, None] + np.arange(hi, dtype=np.int64)] = b
        return nb
    for k in range(hi):
        if k < lo:
            b = ((v >> _SHIFTS[k]) & np.uint64(0x7F)).astype(np.uint8)
            b |= (nb > k + 1).astype(np.uint8) << np.uint8(7)
            out[pos + k] = b
            continue
        sel = nb > k
        b = ((v[sel] >> _SHIFTS[k]) & np.uint64(0x7F)).astype(np.uint8)
        b |= (nb[sel] > k + 1).astype(np.uint8) << np.uint8(7)
        out[pos[sel] + k] = b
    return nb


@dataclass(eq=False)
class Const(Seg):
    """The same bytes on every (present) row."""

    data: bytes
    present: BoolA | None = None

    def _compute(self, n: int) -> I64:
        return _mask(self.present, n).astype(np.int64) * len(self.data)

    def write(self, out: U8, pos: I64) -> None:
        m = _mask(self.present, pos.size)
        _put_const(out, pos[m], self.data)
        pos += self.lengths(pos.size)


@dataclass(eq=False)
class Varint(Seg):
    """A varint field (uint64, or int64 as two's complement) per row."""

    field_no: int
    values: npt.NDArray[np.integer]
    present: BoolA | None = None
    _tag: bytes = field(init=False, default=b"")
    _u: U64 = field(init=False)
    _nb: I64 = field(init=False)

    def __post_init__(self) -> None:
        self._tag = key(self.field_no, WIRE_VARINT)
        self._u = np.ascontiguousarray(self.values).astype(np.int64).view(np.uint64)

    def _compute(self, n: int) -> I64:
        if self.present is None:
            self._nb = varint_len(self._u)
            return len(self._tag) + self._nb
        self._nb = varint_len(self._u[self.present])
        out = np.zeros(n, dtype=np.int64)
        out[self.present] = len(self._tag) + self._nb
        return out

    def write(self, out: U8, pos: I64) -> None:
        ln = self.lengths(pos.size)
        if self.present is None:
            _put_const(out, pos, self._tag)
            _put_varints(out, pos + len(self._tag), self._u, self._nb)
        else:
            p = pos[self.present]
            _put_const(out, p, self._tag)
            _put_varints(out, p + len(self._tag), self._u[self.present], self._nb)
        pos += ln


@dataclass(eq=False)
class Fixed64(Seg):
    """A fixed64/double field per row (values as uint64 or float64)."""

    field_no: int
    values: npt.NDArray[np.generic]
    present: BoolA | None = None
    _tag: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        self._tag = key(self.field_no, WIRE_FIXED64)

    def _compute(self, n: int) -> I64:
        return _mask(self.present, n).astype(np.int64) * (len(self._tag) + 8)

    def write(self, out: U8, pos: I64) -> None:
        m = _mask(self.present, pos.size)
        p = pos[m]
        _put_const(out, p, self._tag)
        raw = np.ascontiguousarray(self.values[m]).astype(self.values.dtype.newbyteorder("<"))
        if p.size:
            out[(p + len(self._tag))[:, None] + np.arange(8, dtype=np.int64)] = raw.view(np.uint8).reshape(-1, 8)
        pos += self.lengths(pos.size)


@dataclass(eq=False)
class BlobTable:
    """Pre-encoded byte strings addressed by index (flat buffer + offsets)."""

    flat: U8
    offsets: I64
    sizes: I64

    @classmethod
    def build(cls, blobs: Sequence[bytes]) -> BlobTable:
        sizes = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        offsets = np.cumsum(sizes) - sizes
        flat = np.frombuffer(b"".join(blobs), dtype=np.uint8) if blobs else np.zeros(0, np.uint8)
        return cls(flat=flat, offsets=offsets, sizes=sizes)


@dataclass(eq=False)
class Blob(Seg):
    """Pre-encoded bytes per row: ``table[idx]``; idx < 0 writes nothing."""

    table: BlobTable
    idx: I64

    def _compute(self, n: int) -> I64:
        ok = self.idx >= 0
        return np.where(ok, self.table.sizes[np.where(ok, self.idx, 0)], 0) if self.table.sizes.size else np.zeros(n, np.int64)

    def write(self, out: U8, pos: I64) -> None:
        ln = self.lengths(pos.size)
        total = int(ln.sum())
        if total:
            first = np.cumsum(ln) - ln
            ramp = np.arange(total, dtype=np.int64)
            src = np.repeat(self.table.offsets[np.maximum(self.idx, 0)] - first, ln)
            src += ramp
            dst = np.repeat(pos - first, ln)
            dst += ramp
            out[dst] = self.table.flat[src]
        pos += ln


@dataclass(eq=False)
class RepFixed64(Seg):
    """A repeated (unpacked) fixed64 field: ``counts[i]`` values per row, ``flat`` in row order."""

    field_no: int
    counts: I64
    flat: U64
    _tag: bytes = field(init=False, default=b"")

    def __post_init__(self) -> None:
        self._tag = key(self.field_no, WIRE_FIXED64)

    def _compute(self, n: int) -> I64:
        return self.counts * (len(self._tag) + 8)

    def write(self, out: U8, pos: I64) -> None:
        ln = self.lengths(pos.size)
        if self.flat.size:
            item = len(self._tag) + 8
            items = np.empty((self.flat.size, item), dtype=np.uint8)
            items[:, : len(self._tag)] = np.frombuffer(self._tag, dtype=np.uint8)
            items[:, len(self._tag):] = self.flat.astype("<u8").view(np.uint8).reshape(-1, 8)
            rows, ramp = ragged_ramp(ln)
            out[pos[rows] + ramp] = items.reshape(-1)
        pos += ln


@dataclass(eq=False)
class SmallMsgVarint(Seg):
    """A nested message made of constant bytes and one varint field, under 128 bytes
    (e.g. a DebugAnnotation ``{name_iid, int_value}``): written without the generic
    nested-message machinery. Rows where ``present`` is False write nothing."""

    field_no: int
    prefix: bytes  # encoded inner fields before the varint
    inner_field: int
    values: npt.NDArray[np.integer]
    present: BoolA | None = None
    _tag: bytes = field(init=False, default=b"")
    _u: U64 = field(init=False)
    _nb: I64 = field(init=False)

    def __post_init__(self) -> None:
        self._tag = key(self.field_no, WIRE_LEN)
        self.prefix = self.prefix + key(self.inner_field, WIRE_VARINT)
        if len(self.prefix) + 10 >= 128 or len(self._tag) != 1:
            raise ValueError("SmallMsgVarint is for messages under 128 bytes with a one-byte tag")
        u = np.ascontiguousarray(self.values).astype(np.int64).view(np.uint64)
        self._u = u if self.present is None else u[self.present]

    def _compute(self, n: int) -> I64:
        self._nb = varint_len(self._u)
        ln = 2 + len(self.prefix) + self._nb
        if self.present is None:
            return ln
        out = np.zeros(n, dtype=np.int64)
        out[self.present] = ln
        return out

    def write(self, out: U8, pos: I64) -> None:
        ln = self.lengths(pos.size)
        p = pos if self.present is None else pos[self.present]
        if p.size:
            out[p] = self._tag[0]
            out[p + 1] = (len(self.prefix) + self._nb).astype(np.uint8)
            _put_const(out, p + 2, self.prefix)
            _put_varints(out, p + 2 + len(self.prefix), self._u, self._nb)
        pos += ln


@dataclass(eq=False)
class Msg(Seg):
    """A nested message field: tag, varint length, then the child segments."""

    field_no: int
    children: list[Seg]
    present: BoolA | None = None
    _tag: bytes = field(init=False, default=b"")
    _inner: I64 | None = field(init=False, default=None)
    _nb: I64 = field(init=False)

    def __post_init__(self) -> None:
        self._tag = key(self.field_no, WIRE_LEN)

    def _compute(self, n: int) -> I64:
        inner = np.zeros(n, dtype=np.int64)
        for c in self.children:
            inner += c.lengths(n)
        self._inner = inner
        if self.present is None:
            self._nb = varint_len(inner.view(np.uint64))
            return len(self._tag) + self._nb + inner
        if bool((inner[~self.present] != 0).any()):
            raise ValueError(f"field {self.field_no}: children write on rows where the message is absent")
        self._nb = varint_len(inner[self.present].view(np.uint64))
        out = np.zeros(n, dtype=np.int64)
        out[self.present] = len(self._tag) + self._nb + inner[self.present]
        return out

    def write(self, out: U8, pos: I64) -> None:
        ln = self.lengths(pos.size)
        assert self._inner is not None
        m = _mask(self.present, pos.size)
        if self.present is None:
            _put_const(out, pos, self._tag)
            cur = pos + len(self._tag)
            cur += _put_varints(out, cur, self._inner.view(np.uint64), self._nb)
            for c in self.children:
                c.write(out, cur)
        elif m.any():
            idx = np.flatnonzero(m)
            p = pos[idx]
            _put_const(out, p, self._tag)
            cur = p + len(self._tag)
            cur += _put_varints(out, cur, self._inner[idx].view(np.uint64), self._nb)
            # children of absent rows have zero length by construction of the caller
            full = np.zeros(pos.size, dtype=np.int64)
            full[idx] = cur
            for c in self.children:
                c.write(out, full)
        pos += ln


def encode_array(n: int, children: list[Seg]) -> tuple[U8, I64]:
    """Encode ``n`` TracePackets of one shape (framed as ``Trace.packet``): bytes and per-row lengths."""
    if n == 0:
        return np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64)
    top = Msg(1, children)
    ln = top.lengths(n)
    out = np.empty(int(ln.sum()), dtype=np.uint8)
    pos = np.cumsum(ln) - ln
    top.write(out, pos)
    return out, ln


def encode_groups(n: int, groups: Sequence[tuple[I64, list[Seg]]]) -> U8:
    """Encode ``n`` TracePackets given as groups of rows of one shape each, in row order.

    ``groups``: (row numbers in 0..n-1, segments for those rows in that order). Every
    group writes straight to the rows' final places in one buffer.
    """
    tops = [(rows, Msg(1, children)) for rows, children in groups]
    lens = np.zeros(n, dtype=np.int64)
    for rows, top in tops:
        lens[rows] = top.lengths(rows.size)
    dst = np.cumsum(lens) - lens
    out = np.empty(int(lens.sum()), dtype=np.uint8)
    covered = sum(int(rows.size) for rows, _ in tops)
    if covered != n:
        raise ValueError(f"groups cover {covered} of {n} rows")
    for rows, top in tops:
        if rows.size:
            top.write(out, dst[rows])
    return out


def encode_rows(n: int, children: list[Seg]) -> bytes:
    """Encode ``n`` TracePackets of one shape, each framed as ``Trace.packet``."""
    return encode_array(n, children)[0].tobytes()


__all__ = [
    "Blob",
    "BlobTable",
    "Const",
    "Fixed64",
    "Msg",
    "RepFixed64",
    "Seg",
    "SmallMsgVarint",
    "Varint",
    "encode_array",
    "encode_groups",
    "encode_rows",
    "field_bytes",
    "field_double",
    "field_str",
    "field_varint",
    "key",
    "packet",
    "varint",
    "varint_len",
]
