"""Reference Perfetto writer: the same packets as ``perfetto.write_perfetto``, built one
``perfetto_trace_pb2.TracePacket`` object at a time (the way Perfetto's own
``StreamingTraceProtoBuilder`` works).

It exists to check the vectorised encoder (tests compare the decoded packets)
and to measure it against (bench/export.py). Needs the ``perfetto`` package.
"""

from __future__ import annotations

from typing import IO, Any

from tracekit.export.layout import INT_ARGS, Layout
from tracekit.export.perfetto import (
    BATCH,
    SEQ_CLEARED,
    SEQ_ID,
    SEQ_NEEDS,
    T_BEGIN,
    T_COUNTER,
    T_END,
    T_INSTANT,
    records,
)


def _pb2() -> Any:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2

    return perfetto_trace_pb2


def write_reference(lay: Layout, out: IO[bytes], batch: int = BATCH) -> int:
    """Write ``lay`` with pb2 objects; returns bytes written."""
    pb = _pb2()
    total = 0

    def emit(p: Any) -> None:
        nonlocal total
        t = pb.Trace()
        t.packet.append(p)
        data = t.SerializeToString()
        out.write(data)
        total += len(data)

    ts, typ, idx = records(lay)
    t0 = int(ts[0]) if ts.size else 0
    ann_names = list(INT_ARGS)
    for argset in lay.argsets:
        for k, _ in argset:
            if k not in ann_names:
                ann_names.append(k)
    ann_iid = {k: i + 1 for i, k in enumerate(ann_names)}
    str_iid: dict[str, int] = {}
    for argset in lay.argsets:
        for _, v in argset:
            if isinstance(v, str) and v not in str_iid:
                str_iid[v] = len(str_iid) + 1

    p = pb.TracePacket(timestamp=t0, trusted_packet_sequence_id=SEQ_ID, sequence_flags=SEQ_CLEARED)
    for i, c in enumerate(lay.cats):
        p.interned_data.event_categories.add(iid=i + 1, name=c)
    for k, i in ann_iid.items():
        p.interned_data.debug_annotation_names.add(iid=i, name=k)
    emit(p)
    for t in lay.tracks:
        p = pb.TracePacket(timestamp=t0, trusted_packet_sequence_id=SEQ_ID, sequence_flags=SEQ_NEEDS)
        td = p.track_descriptor
        td.uuid = t.uuid
        if t.parent:
            td.parent_uuid = t.parent
        if t.kind == "process":
            td.process.pid = t.pid
            td.process.process_name = t.name
            td.process.process_labels.extend(t.labels)
            td.child_ordering = pb.TrackDescriptor.EXPLICIT
        else:
            td.name = t.name
        if t.kind == "counter":
            td.counter.SetInParent()
            if t.unit_ns:
                td.counter.unit = pb.CounterDescriptor.UNIT_TIME_NS
        td.sibling_order_rank = t.order
        emit(p)

    flows_out: dict[int, list[int]] = {}
    flows_in: dict[int, list[int]] = {}
    for s, d, f in zip(lay.flow_src.tolist(), lay.flow_dst.tolist(), lay.flow_id.tolist(), strict=True):
        flows_out.setdefault(s, []).append(f)
        flows_in.setdefault(d, []).append(f)
    for lst in (*flows_out.values(), *flows_in.values()):
        lst.sort()
    names_done: set[int] = set()
    strs_done: set[str] = set()
    int_vals = {k: (lay.ints[k][0].tolist(), lay.ints[k][1].tolist()) for k in INT_ARGS}
    for lo in range(0, ts.size, batch):
        rows = range(lo, min(lo + batch, ts.size))
        new_names: list[int] = []
        new_strs: list[str] = []
        for j in rows:
            if typ[j] in (T_BEGIN, T_INSTANT):
                s = int(idx[j])
                nid = int(lay.name_id[s])
                if nid not in names_done:
                    names_done.add(nid)
                    new_names.append(nid)
                a = int(lay.argset[s])
                if a >= 0:
                    for _, v in lay.argsets[a]:
                        if isinstance(v, str) and v not in strs_done:
                            strs_done.add(v)
                            new_strs.append(v)
        if new_names or new_strs:
            p = pb.TracePacket(timestamp=int(ts[lo]), trusted_packet_sequence_id=SEQ_ID, sequence_flags=SEQ_NEEDS)
            for nid in sorted(new_names):
                p.interned_data.event_names.add(iid=nid + 1, name=lay.names[nid])
            for v in sorted(new_strs, key=str_iid.__getitem__):
                p.interned_data.debug_annotation_string_values.add(iid=str_iid[v], str=v.encode("utf-8", "surrogatepass"))
            emit(p)
        for j in rows:
            p = pb.TracePacket(timestamp=int(ts[j]), trusted_packet_sequence_id=SEQ_ID, sequence_flags=SEQ_NEEDS)
            ev = p.track_event
            kind = int(typ[j])
            i = int(idx[j])
            ev.type = kind
            if kind == T_COUNTER:
                ev.track_uuid = int(lay.c_track[i])
                if lay.c_is_int[i]:
                    ev.counter_value = int(lay.c_value[i])
                else:
                    ev.double_counter_value = float(lay.c_value[i])
                emit(p)
                continue
            ev.track_uuid = int(lay.track[i])
            if kind == T_END:
                emit(p)
                continue
            ev.name_iid = int(lay.name_id[i]) + 1
            ev.category_iids.append(int(lay.cat_id[i]) + 1)
            a = int(lay.argset[i])
            if a >= 0:
                for key, v in lay.argsets[a]:
                    da = ev.debug_annotations.add(name_iid=ann_iid[key])
                    if isinstance(v, bool):
                        da.bool_value = v
                    elif isinstance(v, int):
                        da.int_value = v
                    elif isinstance(v, float):
                        da.double_value = v
                    else:
                        da.string_value_iid = str_iid[str(v)]
            for key in INT_ARGS:
                vals, ok = int_vals[key]
                if ok[i]:
                    ev.debug_annotations.add(name_iid=ann_iid[key], int_value=vals[i])
            ev.flow_ids.extend(flows_out.get(i, []))
            ev.terminating_flow_ids.extend(flows_in.get(i, []))
            emit(p)
    return total


def packets_equal(a: bytes, b: bytes) -> bool:
    """Whether two traces decode to the same packet messages, in order."""
    pb = _pb2()
    return bool(pb.Trace.FromString(a) == pb.Trace.FromString(b))


__all__ = ["packets_equal", "write_reference"]
