"""Perfetto protobuf writer: a Layout as a stream of TracePackets, encoded directly.

Field numbers follow ``perfetto_trace_pb2`` (perfetto 0.59). All packets of a layout are
on one trusted_packet_sequence_id (``seq``); the first sets SEQ_INCREMENTAL_STATE_CLEARED and
interns the categories and debug-annotation names; every later packet sets
SEQ_NEEDS_INCREMENTAL_STATE. Track descriptors come before any event. Events
are written in time order in batches; each batch is preceded by one packet that
interns the event names and string values it uses for the first time. Slice
BEGIN/END, instants (zero-length slices) and counter values are encoded with
``pbenc`` (numpy, no per-event Python). The output is deterministic.

A trace of many ranks is the concatenation of one such stream per rank (``tracekit.export.ranked``):
each on its own sequence, with its own interning state; track uuids and flow ids are made unique
across the streams by the caller. A flow end with slice index -1 is in another stream: only the
end in this layout is written (``flow_ids`` on the source, ``terminating_flow_ids`` on the
destination, the ids global in the trace).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Final

import numpy as np
import numpy.typing as npt

from tracekit._native import core
from tracekit.errors import AnalysisError
from tracekit.export import pbenc as pe
from tracekit.export.buckets import ArgSets
from tracekit.export.layout import INT_ARGS, ArgValue, Layout, Track
from tracekit.exporters import WriteContext

I64 = npt.NDArray[np.int64]

SEQ_ID: Final = 1
SEQ_CLEARED: Final = 1
SEQ_NEEDS: Final = 2
T_BEGIN, T_END, T_INSTANT, T_COUNTER = 1, 2, 3, 4
BATCH: Final = 1 << 16

# TracePacket
P_TIMESTAMP, P_SEQ_ID, P_TRACK_EVENT, P_INTERNED, P_FLAGS, P_TRACK_DESC = 8, 10, 11, 12, 13, 60
# TrackEvent
E_CATEGORY_IIDS, E_DEBUG, E_TYPE, E_NAME_IID, E_TRACK_UUID = 3, 4, 9, 10, 11
E_COUNTER_INT, E_COUNTER_DOUBLE, E_FLOW_IDS, E_TERM_FLOW_IDS = 30, 44, 47, 48
# DebugAnnotation
A_NAME_IID, A_BOOL, A_INT, A_DOUBLE, A_STRING_IID = 1, 2, 4, 5, 17
# InternedData
I_CATEGORIES, I_NAMES, I_ANN_NAMES, I_STRINGS = 1, 2, 3, 29


def _head(ts: int, flags: int, seq: int = SEQ_ID) -> bytes:
    return pe.field_varint(P_TIMESTAMP, ts) + pe.field_varint(P_SEQ_ID, seq) + pe.field_varint(P_FLAGS, flags)


def _seq_flags(seq: int) -> bytes:
    """The sequence id and SEQ_NEEDS_INCREMENTAL_STATE fields every event packet of ``seq`` carries."""
    return pe.field_varint(P_SEQ_ID, seq) + pe.field_varint(P_FLAGS, SEQ_NEEDS)


def track_descriptor(t: Track) -> bytes:
    body = pe.field_varint(1, t.uuid)
    if t.parent:
        body += pe.field_varint(5, t.parent)
    if t.kind == "process":
        proc = pe.field_varint(1, t.pid) + pe.field_str(6, t.name)
        for lab in t.labels:
            proc += pe.field_str(8, lab)
        body += pe.field_bytes(3, proc) + pe.field_varint(11, 3)  # child_ordering = EXPLICIT
    else:
        body += pe.field_str(2, t.name)
    if t.kind == "counter":
        body += pe.field_bytes(8, pe.field_varint(3, 1) if t.unit_ns else b"")
    body += pe.field_varint(12, t.order)  # sibling_order_rank
    return pe.field_bytes(P_TRACK_DESC, body)


def _interned(entries: list[tuple[int, list[bytes]]]) -> bytes:
    body = b"".join(pe.field_bytes(f, e) for f, es in entries for e in es)
    return pe.field_bytes(P_INTERNED, body) if body else b""


def _iid_entry(iid: int, field_no: int, s: str) -> bytes:
    return pe.field_varint(1, iid) + pe.field_str(field_no, s)


class _Strings:
    """Debug-annotation string values interned on demand (iid = index + 1)."""

    def __init__(self) -> None:
        self.iid: dict[str, int] = {}

    def get(self, s: str) -> int:
        i = self.iid.get(s)
        if i is None:
            i = self.iid[s] = len(self.iid) + 1
        return i


Deps = tuple[I64, I64, I64]  # per arg set: count and offset of its string ids in the flat array


def _deps_arrays(deps: list[list[int]]) -> Deps:
    counts = np.array([len(d) for d in deps], dtype=np.int64)
    return counts, np.cumsum(counts) - counts, np.array([s for d in deps for s in d], dtype=np.int64)


def annotation_names(lay: Layout) -> list[str]:
    """Debug-annotation names: the integer args, then the arg-set keys in order of first appearance."""
    names = list(INT_ARGS)
    sets = lay.argsets
    keys = sets.keys_in_order() if isinstance(sets, ArgSets) else [k for argset in sets for k, _ in argset]
    for k in keys:
        if k not in names:
            names.append(k)
    return names


def _encode_argsets(lay: Layout, ann_iid: dict[str, int], strings: _Strings) -> tuple[pe.BlobTable, Deps]:
    sets = lay.argsets
    if core is not None:
        base = sets.base if isinstance(sets, ArgSets) else sets
        try:
            flat, sizes, counts, ids = core.encode_argsets(base if isinstance(base, list) else list(base), ann_iid, strings.iid)
        except OverflowError:  # an integer annotation outside int64/uint64: the reference path says so
            pass
        else:
            fl = np.frombuffer(flat, dtype=np.uint8)
            sz = np.frombuffer(sizes, dtype=np.int64)
            c = np.frombuffer(counts, dtype=np.int64)
            d_off = np.cumsum(c) - c
            d_flat = np.frombuffer(ids, dtype=np.int64)
            if isinstance(sets, ArgSets) and sets.ext_row.size:
                # the sets with buckets: their base set's bytes and strings, then the bucket values
                t = sets.table
                iids = np.array([ann_iid.get(f"bucket.{n}", 0) for n in t.names], dtype=np.int64)
                eflat, esz = core.encode_bucket_sets(fl, np.cumsum(sz) - sz, sz, sets.ext_base, sets.ext_row, t.ns, iids)
                fl = np.concatenate([fl, np.frombuffer(eflat, dtype=np.uint8)])
                sz = np.concatenate([sz, np.frombuffer(esz, dtype=np.int64)])
                c, d_off = np.concatenate([c, c[sets.ext_base]]), np.concatenate([d_off, d_off[sets.ext_base]])
            return pe.BlobTable(flat=fl, offsets=np.cumsum(sz) - sz, sizes=sz), (c, d_off, d_flat)
    return _encode_argsets_reference(lay, ann_iid, strings)


def _encode_argsets_reference(lay: Layout, ann_iid: dict[str, int], strings: _Strings) -> tuple[pe.BlobTable, Deps]:
    blobs: list[bytes] = []
    deps: list[list[int]] = []
    # one encoding per distinct (name, type, value): arg sets repeat most of their pairs
    memo: dict[tuple[str, type, ArgValue], tuple[bytes, int]] = {}
    for aset in lay.argsets:
        parts: list[bytes] = []
        dep: list[int] = []
        for k, v in aset:
            mk = (k, type(v), v)
            hit = memo.get(mk)
            if hit is None:
                sid = 0
                body = pe.field_varint(A_NAME_IID, ann_iid[k])
                if isinstance(v, bool):
                    body += pe.field_varint(A_BOOL, int(v))
                elif isinstance(v, int):
                    body += pe.field_varint(A_INT, v)
                elif isinstance(v, float):
                    body += pe.field_double(A_DOUBLE, v)
                else:
                    sid = strings.get(str(v))
                    body += pe.field_varint(A_STRING_IID, sid)
                hit = (pe.field_bytes(E_DEBUG, body), sid)
                if not isinstance(v, float):  # 0.0 == -0.0 and nan != nan: floats are not memoised
                    memo[mk] = hit
            parts.append(hit[0])
            if hit[1]:
                dep.append(hit[1])
        blobs.append(b"".join(parts))
        deps.append(dep)
    return pe.BlobTable.build(blobs), _deps_arrays(deps)


def _csr(keys: I64, vals: I64, n: int) -> tuple[I64, I64, I64]:
    """Group ``vals`` by ``keys`` (0..n-1): counts, offsets, values (stable)."""
    order = np.argsort(keys, kind="stable")
    counts = np.bincount(keys, minlength=n).astype(np.int64)
    offsets = np.cumsum(counts) - counts
    return counts, offsets, vals[order]


def _gather(counts: I64, offsets: I64, flat: I64, rows: I64) -> tuple[I64, I64]:
    c = counts[rows]
    r, ramp = pe.ragged_ramp(c)
    return c, flat[offsets[rows][r] + ramp]


def records(lay: Layout) -> tuple[I64, I64, I64]:
    """All events in write order: (ts, type, index into slices or counters)."""
    if core is not None and _nondecreasing(lay.start) and _nondecreasing(lay.c_ts):
        # compiled: a merge of three sorted streams (slice ends sorted here, by end then latest
        # opened first; counter samples and slice opens are already in order)
        nz = np.flatnonzero(lay.dur != 0)
        rev = nz[::-1]
        end_idx = np.ascontiguousarray(rev[np.argsort((lay.start[rev] + lay.dur[rev]), kind="stable")])
        total = lay.n_slices + end_idx.size + lay.n_counters
        ts, typ, idx = (np.empty(total, dtype=np.int64) for _ in range(3))
        core.merge_records(np.ascontiguousarray(lay.start), np.ascontiguousarray(lay.dur), end_idx,
                           np.ascontiguousarray(lay.c_ts), ts, typ, idx)
        return ts, typ, idx
    return records_reference(lay)


def _nondecreasing(a: I64) -> bool:
    return a.size < 2 or bool((a[1:] >= a[:-1]).all())


def records_reference(lay: Layout) -> tuple[I64, I64, I64]:
    """``records`` with one numpy lexsort (the reference of the compiled merge)."""
    n = lay.n_slices
    i = np.arange(n, dtype=np.int64)
    zero = lay.dur == 0
    b_type = np.where(zero, T_INSTANT, T_BEGIN)
    nz = np.flatnonzero(~zero)
    ts = np.concatenate([lay.start, lay.start[nz] + lay.dur[nz], lay.c_ts])
    typ = np.concatenate([b_type, np.full(nz.size, T_END), np.full(lay.n_counters, T_COUNTER)]).astype(np.int64)
    idx = np.concatenate([i, nz, np.arange(lay.n_counters, dtype=np.int64)])
    # at one timestamp: slice ends (latest opened first), counters, then opens in open order
    cls = np.where(typ == T_END, 0, np.where(typ == T_COUNTER, 1, 2))
    sub = np.where(typ == T_END, -idx, idx)
    order = np.lexsort((sub, cls, ts))
    return ts[order], typ[order], idx[order]


def _flow_ends(keys: I64, ids: I64, n: int) -> tuple[I64, I64, I64]:
    """``_csr`` of the flow ends in this layout (an end of -1 is in another stream)."""
    here = keys >= 0
    if here.all():
        return _csr(keys, ids, n)
    return _csr(keys[here], ids[here], n)


def iter_packets(lay: Layout, batch: int = BATCH, seq: int = SEQ_ID) -> Iterator[bytes]:
    """The trace as byte chunks (each a whole number of framed packets), on sequence ``seq``."""
    ts, typ, idx = records(lay)
    t0 = int(ts[0]) if ts.size else 0
    if ts.size and int(ts[0]) < 0:
        raise AnalysisError("negative timestamps cannot be written to a Perfetto trace (align the run's clocks first)")
    ann_names = annotation_names(lay)
    ann_iid = {k: i + 1 for i, k in enumerate(ann_names)}
    strings = _Strings()
    blob_tab, (dep_counts, dep_off, dep_flat) = _encode_argsets(lay, ann_iid, strings)
    str_list = sorted(strings.iid, key=strings.iid.__getitem__)
    # first packet: incremental state cleared, categories and annotation names interned
    first = _head(t0, SEQ_CLEARED, seq) + _interned([
        (I_CATEGORIES, [_iid_entry(i + 1, 2, c) for i, c in enumerate(lay.cats)]),
        (I_ANN_NAMES, [_iid_entry(i + 1, 2, k) for i, k in enumerate(ann_names)]),
    ])
    head = [pe.packet(first)]
    head += [pe.packet(_head(t0, SEQ_NEEDS, seq) + track_descriptor(t)) for t in lay.tracks]
    yield b"".join(head)
    out_c, out_o, out_f = _flow_ends(lay.flow_src, lay.flow_id, lay.n_slices)
    in_c, in_o, in_f = _flow_ends(lay.flow_dst, lay.flow_id, lay.n_slices)
    ann_tag = {k: pe.field_varint(A_NAME_IID, ann_iid[k]) for k in INT_ARGS}
    if core is not None:
        yield from _core_batches(lay, (ts, typ, idx), batch, blob_tab, (dep_counts, dep_off, dep_flat), str_list,
                                 (out_c, out_o, out_f, in_c, in_o, in_f), ann_tag, seq)
        return
    name_done = np.zeros(len(lay.names), dtype=bool)
    str_done = np.zeros(len(str_list) + 1, dtype=bool)
    for lo in range(0, ts.size, batch):
        bts, btyp, bidx = ts[lo:lo + batch], typ[lo:lo + batch], idx[lo:lo + batch]
        n = bts.size
        opens = (btyp == T_BEGIN) | (btyp == T_INSTANT)
        is_ctr = btyp == T_COUNTER
        sl = np.where(is_ctr, 0, bidx)
        # interning of first uses
        used_names = np.unique(lay.name_id[sl[opens]])
        new_names = used_names[~name_done[used_names]]
        name_done[new_names] = True
        aset = np.where(opens, lay.argset[sl], -1)
        used_sets = np.unique(aset[aset >= 0])
        _, sids = _gather(dep_counts, dep_off, dep_flat, used_sets)
        sids = np.unique(sids)
        new_s = sids[~str_done[sids]]
        str_done[new_s] = True
        interned = _interned([
            (I_NAMES, [_iid_entry(int(i) + 1, 2, lay.names[int(i)]) for i in new_names]),
            (I_STRINGS, [pe.field_varint(1, int(s)) + pe.field_str(2, str_list[int(s) - 1]) for s in new_s]),
        ])
        chunk = pe.packet(_head(int(bts[0]), SEQ_NEEDS, seq) + interned) if interned else b""
        seq_flags = _seq_flags(seq)
        groups: list[tuple[I64, list[pe.Seg]]] = []
        # slice opens (BEGIN / INSTANT): everything a slice carries
        rows = np.flatnonzero(opens)
        if rows.size:
            s_i = bidx[rows]
            ev: list[pe.Seg] = [
                pe.Varint(E_TYPE, btyp[rows]),
                pe.Varint(E_TRACK_UUID, lay.track[s_i]),
                pe.Varint(E_NAME_IID, lay.name_id[s_i] + 1),
                pe.Varint(E_CATEGORY_IIDS, lay.cat_id[s_i] + 1),
                pe.Blob(blob_tab, lay.argset[s_i]),
            ]
            for k in INT_ARGS:
                vals, ok = lay.ints[k]
                m = ok[s_i]
                if m.any():
                    ev.append(pe.SmallMsgVarint(E_DEBUG, ann_tag[k], A_INT, vals[s_i], None if m.all() else m))
            for counts, offs, flat, fno in ((out_c, out_o, out_f, E_FLOW_IDS), (in_c, in_o, in_f, E_TERM_FLOW_IDS)):
                if flat.size:
                    c, vals = _gather(counts, offs, flat, s_i)
                    if vals.size:
                        ev.append(pe.RepFixed64(fno, c, vals.astype(np.uint64)))
            segs: list[pe.Seg] = [pe.Varint(P_TIMESTAMP, bts[rows]), pe.Const(seq_flags), pe.Msg(P_TRACK_EVENT, ev)]
            groups.append((rows, segs))
        # slice ends: type and track only
        rows = np.flatnonzero(btyp == T_END)
        if rows.size:
            ev = [pe.Const(pe.field_varint(E_TYPE, T_END)), pe.Varint(E_TRACK_UUID, lay.track[bidx[rows]])]
            segs = [pe.Varint(P_TIMESTAMP, bts[rows]), pe.Const(seq_flags), pe.Msg(P_TRACK_EVENT, ev)]
            groups.append((rows, segs))
        # counter values
        rows = np.flatnonzero(is_ctr)
        if rows.size:
            ci = bidx[rows]
            c_int = lay.c_is_int[ci]
            cval = lay.c_value[ci]
            ev = [pe.Const(pe.field_varint(E_TYPE, T_COUNTER)), pe.Varint(E_TRACK_UUID, lay.c_track[ci])]
            if c_int.any():
                ev.append(pe.Varint(E_COUNTER_INT, np.where(c_int, cval, 0).astype(np.int64), c_int))
            if not c_int.all():
                ev.append(pe.Fixed64(E_COUNTER_DOUBLE, cval, ~c_int))
            segs = [pe.Varint(P_TIMESTAMP, bts[rows]), pe.Const(seq_flags), pe.Msg(P_TRACK_EVENT, ev)]
            groups.append((rows, segs))
        yield chunk + pe.encode_groups(n, groups).tobytes()


def _core_batches(lay: Layout, rec: tuple[I64, I64, I64], batch: int, blob_tab: pe.BlobTable,
                  deps: tuple[I64, I64, I64], str_list: list[str], flows: tuple[I64, ...],
                  ann_tag: dict[str, bytes], seq: int) -> Iterator[bytes]:
    """The event batches of ``iter_packets`` encoded by the compiled core (same bytes)."""
    assert core is not None
    ts, typ, idx = rec
    ints = [np.ascontiguousarray(lay.ints[k][0], dtype=np.int64) for k in INT_ARGS] + \
        [np.ascontiguousarray(lay.ints[k][1], dtype=np.bool_) for k in INT_ARGS]
    prefixes = [ann_tag[k] + pe.key(A_INT, pe.WIRE_VARINT) for k in INT_ARGS]
    plen = np.array([len(p) for p in prefixes], dtype=np.int64)
    names = pe.BlobTable.build([pe.field_bytes(I_NAMES, _iid_entry(i + 1, 2, nm)) for i, nm in enumerate(lay.names)])
    strs = pe.BlobTable.build([b""] + [pe.field_bytes(I_STRINGS, pe.field_varint(1, s) + pe.field_str(2, str_list[s - 1]))
                                        for s in range(1, len(str_list) + 1)])
    name_done = np.zeros(len(lay.names), dtype=np.uint8)
    str_done = np.zeros(len(str_list) + 1, dtype=np.uint8)
    per_slice = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in (lay.track, lay.name_id, lay.cat_id, lay.argset))
    blobs = (np.ascontiguousarray(blob_tab.flat, dtype=np.uint8), np.ascontiguousarray(blob_tab.offsets, dtype=np.int64),
             np.ascontiguousarray(blob_tab.sizes, dtype=np.int64))
    fl = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in flows)
    ctr = (np.ascontiguousarray(lay.c_track, dtype=np.int64), np.ascontiguousarray(lay.c_value, dtype=np.float64),
           np.ascontiguousarray(lay.c_is_int, dtype=np.uint8))
    dep = tuple(np.ascontiguousarray(a, dtype=np.int64) for a in deps)
    prefix = b"".join(prefixes)
    seq_head = _seq_flags(seq)
    for lo in range(0, ts.size, batch):
        arrays = (ts[lo:lo + batch], typ[lo:lo + batch], idx[lo:lo + batch], *per_slice, *blobs, *ints, plen,
                  *fl, *ctr, names.flat, names.offsets, names.sizes, name_done, *dep, strs.flat, strs.offsets, strs.sizes,
                  str_done)
        yield core.encode_batch(arrays, prefix, seq_head)


def write_perfetto(lay: Layout, out: IO[bytes], batch: int = BATCH, seq: int = SEQ_ID) -> int:
    """Stream the trace to ``out`` (on sequence ``seq``); returns bytes written."""
    total = 0
    for chunk in iter_packets(lay, batch, seq):
        out.write(chunk)
        total += len(chunk)
    return total


def write(lay: Layout, out: IO[bytes], ctx: WriteContext) -> int:
    """The registry's writer (``tracekit.exporters``)."""
    return write_perfetto(lay, out)


def estimate_size(lay: Layout) -> int:
    """A quick upper-side estimate of the .pftrace size in bytes (before writing)."""
    return 60 * lay.n_slices + 26 * int((lay.dur > 0).sum()) + 30 * lay.n_counters + 20 * int(lay.flow_id.size)


__all__ = ["estimate_size", "iter_packets", "records", "track_descriptor", "write", "write_perfetto"]
