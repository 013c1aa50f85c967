"""Units of the export: the vectorised protobuf encoder, lanes, the Perfetto validator on broken traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.export import pbenc as pe
from tracekit.export.lanes import assign_lanes, nesting_order
from tracekit.export.layout_reference import _first_seen_ids
from tracekit.export.validate import validate_trace

pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


@settings(max_examples=60, deadline=None)
@given(
    ts=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40),
    data=st.data(),
)
def test_encoder_decodes_with_pb2(ts: list[int], data: st.DataObject) -> None:
    n = len(ts)
    ivals = data.draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
    present = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    counts = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    flat = np.arange(1, int(counts.sum()) + 1, dtype=np.uint64) * np.uint64(2**40 + 7)
    blobs = [b"", pe.field_str(23, "kernel"), pe.field_str(23, "x" * 300)]
    bidx = np.array(data.draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n)), dtype=np.int64)
    segs: list[pe.Seg] = [
        pe.Varint(8, np.array(ts, dtype=np.uint64)),
        pe.Msg(11, [
            pe.Varint(30, np.array(ivals, dtype=np.int64), present),
            pe.Blob(pe.BlobTable.build(blobs), bidx),
            pe.Msg(4, [pe.Const(pe.field_varint(1, 5), present), pe.Fixed64(5, np.array(ivals, dtype=np.float64), present)], present),
            pe.RepFixed64(47, counts, flat),
        ]),
    ]
    trace = pb2.Trace.FromString(pe.encode_rows(n, segs))
    assert len(trace.packet) == n
    off = 0
    for i, p in enumerate(trace.packet):
        assert p.timestamp == ts[i]
        ev = p.track_event
        assert ev.HasField("counter_value") == bool(present[i])
        if present[i]:
            assert ev.counter_value == ivals[i]
            assert ev.debug_annotations[0].name_iid == 5
            assert ev.debug_annotations[0].double_value == float(ivals[i])
        assert ev.name == ("" if bidx[i] <= 0 else ("kernel" if bidx[i] == 1 else "x" * 300))
        assert list(ev.flow_ids) == flat[off:off + counts[i]].tolist()
        off += int(counts[i])


def _nests(s: np.ndarray, e: np.ndarray) -> bool:
    o = nesting_order(s, e)
    stack: list[int] = []
    for a, b in zip(s[o].tolist(), e[o].tolist(), strict=True):
        while stack and stack[-1] <= a:
            stack.pop()
        if stack and b > stack[-1]:
            return False
        stack.append(b)
    return True


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), min_size=1, max_size=40))
def test_lanes_nest_strictly(iv: list[tuple[int, int]]) -> None:
    s = np.array([a for a, _ in iv], dtype=np.int64)
    e = s + np.array([d for _, d in iv], dtype=np.int64)
    lanes = assign_lanes(s, e)
    for lane in np.unique(lanes):
        m = lanes == lane
        assert _nests(s[m], e[m])
    if _nests(s, e):
        assert not lanes.any()  # properly nested input stays on one track
    o = nesting_order(s, e)  # the layout's presorted path gives the same lanes
    assert assign_lanes(s[o], e[o], in_order=True).tolist() == lanes[o].tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "a", "b"]), st.sampled_from([None, 1, 2]),
                          st.sampled_from([None, True, False])), min_size=0, max_size=30))
def test_first_seen_ids_match_unique_join(rows: list[tuple[str | None, int | None, bool | None]]) -> None:
    df = pl.DataFrame(rows, schema={"s": pl.String(), "i": pl.Int64(), "b": pl.Boolean()}, orient="row")
    aid, uniq = _first_seen_ids(df)
    ref = df.unique(maintain_order=True)
    assert uniq.equals(ref)
    assert uniq[aid].equals(df)  # every row maps to its own distinct row


def test_lanes_pdl_chain_alternates() -> None:
    s = np.arange(0, 100, 10, dtype=np.int64)
    assert assign_lanes(s, s + 12).tolist() == [0, 1] * 5


def test_perfetto_validator_finds_problems(tmp_path: Path) -> None:
    T = pb2.TrackEvent
    tr = pb2.Trace()
    p = tr.packet.add(timestamp=1, trusted_packet_sequence_id=1)
    p.interned_data.event_names.add(iid=1, name="early")  # before incremental state was cleared
    p = tr.packet.add(timestamp=1, trusted_packet_sequence_id=1, sequence_flags=1)
    p.interned_data.event_names.add(iid=1, name="k")
    for uuid, name in ((1, "rank 0 · GPU 0"), (2, "rank 0 · GPU 1")):
        p = tr.packet.add(timestamp=1, trusted_packet_sequence_id=1)
        p.track_descriptor.uuid = uuid
        p.track_descriptor.process.pid = 10 + uuid
        p.track_descriptor.process.process_name = name
    p = tr.packet.add(timestamp=1, trusted_packet_sequence_id=1)
    p.track_descriptor.uuid = 3
    p.track_descriptor.parent_uuid = 1
    p.track_descriptor.name = "stream 7"
    p = tr.packet.add(timestamp=1, trusted_packet_sequence_id=1)
    p.track_descriptor.uuid = 4
    p.track_descriptor.parent_uuid = 1
    p.track_descriptor.name = "clock"
    p.track_descriptor.counter.SetInParent()
    events = [
        (5, dict(type=T.TYPE_SLICE_BEGIN, track_uuid=9, name="x"), 2),  # undescribed track
        (5, dict(type=T.TYPE_SLICE_END, track_uuid=3), 2),  # END without BEGIN
        (6, dict(type=T.TYPE_SLICE_BEGIN, track_uuid=3, name_iid=7), 2),  # iid never interned
        (7, dict(type=T.TYPE_SLICE_BEGIN, track_uuid=3, name_iid=1, flow_ids=[99]), 0),  # no NEEDS flag, 1-ended flow
        (8, dict(type=T.TYPE_COUNTER, track_uuid=3, counter_value=1), 2),  # counter on slice track
        (8, dict(type=T.TYPE_SLICE_BEGIN, track_uuid=4, name="s"), 2),  # slice on counter track
        (4, dict(type=T.TYPE_SLICE_END, track_uuid=3), 2),  # backwards
    ]
    for ts, fields, flags in events:
        p = tr.packet.add(timestamp=ts, trusted_packet_sequence_id=1, sequence_flags=flags)
        p.track_event.CopyFrom(T(**fields))
    path = tmp_path / "bad.pftrace"
    path.write_bytes(tr.SerializeToString())
    chk = validate_trace(path)
    text = "\n".join(chk.problems)
    for needle in (
        "interned data on sequence 1 before its incremental state was cleared",
        "event on track 9 before the track is described",
        "slice END without BEGIN",
        "event name iid 7 not interned",
        "without SEQ_NEEDS_INCREMENTAL_STATE",
        "counter value on non-counter track 3",
        "slice event on counter track 4",
        "goes backwards on track 3",
        "flow 99: 1 start(s), 0 end(s)",
        "never ended",
        "rank 0 appears as 2 processes",
    ):
        assert needle in text, (needle, text)


def test_truncated_pftrace_is_bad_trace(tmp_path: Path) -> None:
    from tracekit.errors import BadTraceError

    tr = pb2.Trace()
    tr.packet.add(timestamp=1, trusted_packet_sequence_id=1).track_descriptor.uuid = 1
    data = tr.SerializeToString()
    (tmp_path / "t.pftrace").write_bytes(data[:-2])
    with pytest.raises(BadTraceError, match="truncated"):
        validate_trace(tmp_path / "t.pftrace")
