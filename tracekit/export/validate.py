"""Check an exported trace (.pftrace or Chrome JSON) the way a viewer would read it.

Perfetto: the file is parsed back packet by packet with Perfetto's own schema
(``perfetto_trace_pb2``) and checked for: every track uuid described before use
(parents first); slices BEGIN/END balanced per track, END >= BEGIN, timestamps
not going backwards on a track (so nothing partially overlaps); interned ids
defined on their sequence after an incremental-state-cleared packet, and packets
using them flagged SEQ_NEEDS_INCREMENTAL_STATE; flow ids with exactly two ends;
counter values only on counter tracks and slices only on the others; one
process per rank.

Chrome JSON: complete (``X``) slices nest per (pid, tid), ``B``/``E`` balanced,
flows (``s``/``f``) with two ends, counters numeric, one process per rank.
Timestamps are read as exact decimals (never floats).
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from tracekit.errors import BadTraceError, TracekitError
from tracekit.exporters import FORMATS, format_of_bytes

MAX_LINES: Final = 40
_RANK = re.compile(r"\brank (\d+)\b")


@dataclass
class Slice:
    process: str
    track: str
    name: str
    category: str
    ts: int
    dur: int
    args: dict[str, Any]


@dataclass
class TraceCheck:
    """What a validation found. ``slices`` is filled only with ``collect=True``."""

    path: str
    format: str
    problems: list[str] = field(default_factory=list)
    n_problems: int = 0
    packets: int = 0
    n_slices: int = 0
    n_counters: int = 0
    n_flows: int = 0
    processes: dict[int, str] = field(default_factory=dict)
    slices: list[Slice] = field(default_factory=list)

    def problem(self, msg: str) -> None:
        self.n_problems += 1
        if len(self.problems) < MAX_LINES:
            self.problems.append(msg)

    @property
    def ok(self) -> bool:
        return self.n_problems == 0

    def summary(self) -> str:
        return (f"{self.path}: {self.format}, {len(self.processes)} processes, {self.n_slices} slices, "
                f"{self.n_counters} counter values, {self.n_flows} flows")


def _flows_check(chk: TraceCheck, starts: dict[int, int], ends: dict[int, int]) -> None:
    ids = set(starts) | set(ends)
    chk.n_flows = len(ids)
    bad = sorted(i for i in ids if starts.get(i, 0) != 1 or ends.get(i, 0) != 1)
    for i in bad[:10]:
        chk.problem(f"flow {i}: {starts.get(i, 0)} start(s), {ends.get(i, 0)} end(s) (needs exactly one of each)")
    if len(bad) > 10:
        chk.problem(f"... {len(bad) - 10} more flows without exactly two ends")


def _ranks_check(chk: TraceCheck) -> None:
    seen: dict[int, list[str]] = defaultdict(list)
    for name in chk.processes.values():
        m = _RANK.search(name)
        if m:
            seen[int(m.group(1))].append(name)
        else:
            chk.problem(f"process {name!r} does not name its rank")
    for r, names in sorted(seen.items()):
        if len(names) > 1:
            chk.problem(f"rank {r} appears as {len(names)} processes: {names}")


# ---- Perfetto ----------------------------------------------------------------


def _read_varint(buf: bytes | memoryview, i: int) -> tuple[int, int]:
    shift = v = 0
    while True:
        if i >= len(buf):
            raise IndexError
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if b < 0x80:
            return v, i
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def iter_packet_bytes(path: Path, chunk: int = 1 << 24) -> Iterator[bytes]:
    """The raw TracePacket messages of a trace file, streamed."""
    with open(path, "rb") as f:
        buf = b""
        off = 0
        while True:
            more = f.read(chunk)
            buf = buf[off:] + more
            off = 0
            while off < len(buf):
                try:
                    tag, j = _read_varint(buf, off)
                    n, j = _read_varint(buf, j)
                except IndexError:
                    break
                if tag != 0x0A:
                    raise BadTraceError(f"byte {off}: not a Trace.packet field (tag {tag})", path=str(path))
                if j + n > len(buf):
                    break
                yield buf[j:j + n]
                off = j + n
            if not more:
                if off < len(buf):
                    raise BadTraceError(f"truncated: {len(buf) - off} trailing bytes", path=str(path))
                return


def _pb2() -> Any:
    try:
        from perfetto.protos.perfetto.trace import perfetto_trace_pb2
    except ImportError:
        raise TracekitError("checking .pftrace files needs the perfetto package (pip install 'tracekit[export]')") from None
    return perfetto_trace_pb2


def validate_perfetto(path: str | Path, *, collect: bool = False) -> TraceCheck:
    pb = _pb2()
    p = Path(path)
    chk = TraceCheck(path=str(p), format="perfetto")
    TE = pb.TrackEvent
    T_BEGIN, T_END, T_INSTANT, T_COUNTER = TE.TYPE_SLICE_BEGIN, TE.TYPE_SLICE_END, TE.TYPE_INSTANT, TE.TYPE_COUNTER
    cleared: set[int] = set()
    tables: dict[int, dict[str, dict[int, Any]]] = {}
    tracks: dict[int, Any] = {}
    track_info: dict[int, tuple[str, bool]] = {}
    track_proc: dict[int, str] = {}
    stacks: dict[int, list[tuple[int, str, str, dict[str, Any]]]] = defaultdict(list)
    last_ts: dict[int, int] = {}
    fstart: dict[int, int] = defaultdict(int)
    fend: dict[int, int] = defaultdict(int)
    pids: dict[int, int] = {}
    for raw in iter_packet_bytes(p):
        chk.packets += 1
        n = chk.packets
        try:
            pkt = pb.TracePacket.FromString(raw)
        except Exception as exc:
            raise BadTraceError(f"packet {n} does not parse as a TracePacket ({exc})", path=str(p)) from None
        seq = pkt.trusted_packet_sequence_id
        if pkt.sequence_flags & 1 or pkt.incremental_state_cleared:
            cleared.add(seq)
            tables[seq] = {"names": {}, "cats": {}, "ann": {}, "str": {}}
        if pkt.HasField("interned_data"):
            if seq not in cleared:
                chk.problem(f"packet {n}: interned data on sequence {seq} before its incremental state was cleared")
                tables.setdefault(seq, {"names": {}, "cats": {}, "ann": {}, "str": {}})
            tab = tables[seq]
            idata = pkt.interned_data
            for e in idata.event_names:
                tab["names"][e.iid] = e.name
            for e in idata.event_categories:
                tab["cats"][e.iid] = e.name
            for e in idata.debug_annotation_names:
                tab["ann"][e.iid] = e.name
            for e in idata.debug_annotation_string_values:
                tab["str"][e.iid] = e.str.decode("utf-8", "replace")
        if pkt.HasField("track_descriptor"):
            td = pkt.track_descriptor
            if td.uuid == 0:
                chk.problem(f"packet {n}: track descriptor without uuid")
            if td.uuid in tracks:
                chk.problem(f"packet {n}: track {td.uuid} described twice")
            if td.parent_uuid and td.parent_uuid not in tracks:
                chk.problem(f"packet {n}: track {td.uuid} names parent {td.parent_uuid} before it is described")
            tracks[td.uuid] = td
            track_info[td.uuid] = (td.name, td.HasField("counter"))
            if td.HasField("process"):
                pid = td.process.pid
                if pid in pids:
                    chk.problem(f"packet {n}: pid {pid} used by two process tracks")
                pids[pid] = td.uuid
                chk.processes[pid] = td.process.process_name
                track_proc[td.uuid] = td.process.process_name
            else:
                track_proc[td.uuid] = track_proc.get(td.parent_uuid, "")
        if not pkt.HasField("track_event"):
            continue
        ev = pkt.track_event
        t: dict[str, dict[int, Any]] | None = tables.get(seq)
        if t is None:
            t = {"names": {}, "cats": {}, "ann": {}, "str": {}}
        names_t, cats_t, ann_t, str_t = t["names"], t["cats"], t["ann"], t["str"]
        tu = ev.track_uuid
        info = track_info.get(tu)
        if info is None:
            chk.problem(f"packet {n}: event on track {tu} before the track is described")
            continue
        tname, is_counter_track = info
        ts = pkt.timestamp
        if ts < last_ts.get(tu, 0):
            chk.problem(f"packet {n}: timestamp {ts} goes backwards on track {tu} ({tname})")
        last_ts[tu] = ts
        etype = ev.type
        if etype == T_COUNTER:
            chk.n_counters += 1
            if not is_counter_track:
                chk.problem(f"packet {n}: counter value on non-counter track {tu} ({tname})")
            if not (ev.HasField("counter_value") or ev.HasField("double_counter_value")):
                chk.problem(f"packet {n}: counter event without a value")
            continue
        if is_counter_track:
            chk.problem(f"packet {n}: slice event on counter track {tu} ({tname})")
        uses_iids = False
        name = ev.name
        if ev.HasField("name_iid"):
            uses_iids = True
            name = names_t.get(ev.name_iid)
            if name is None:
                chk.problem(f"packet {n}: event name iid {ev.name_iid} not interned on sequence {seq}")
                name = ""
        cat_iids = ev.category_iids
        cat = ""
        if cat_iids:
            uses_iids = True
            for c in cat_iids:
                if c not in cats_t:
                    chk.problem(f"packet {n}: category iid {c} not interned on sequence {seq}")
            if collect:
                cat = ",".join(cats_t.get(c, "") for c in cat_iids)
        elif collect:
            cat = ",".join(ev.categories)
        args: dict[str, Any] = {}
        for a in ev.debug_annotations:
            if a.HasField("name"):
                k: str = a.name
            else:
                uses_iids = True
                found = ann_t.get(a.name_iid)
                if found is None:
                    chk.problem(f"packet {n}: debug annotation name iid {a.name_iid} not interned")
                    continue
                k = found
            kind = a.WhichOneof("value")
            if kind == "string_value_iid":
                uses_iids = True
                val: Any = str_t.get(a.string_value_iid)
                if val is None:
                    chk.problem(f"packet {n}: string value iid {a.string_value_iid} not interned")
            elif collect:
                val = getattr(a, kind) if kind else None
            if collect:
                args[k] = val
        if uses_iids:
            if seq not in cleared:
                chk.problem(f"packet {n}: interned ids used on sequence {seq} before incremental state was cleared")
            if not pkt.sequence_flags & 2:
                chk.problem(f"packet {n}: uses interned ids without SEQ_NEEDS_INCREMENTAL_STATE")
        for fid in ev.flow_ids:
            fstart[fid] += 1
        for fid in ev.flow_ids_old:
            fstart[fid] += 1
        for fid in ev.terminating_flow_ids:
            fend[fid] += 1
        for fid in ev.terminating_flow_ids_old:
            fend[fid] += 1
        if etype == T_BEGIN:
            stacks[tu].append((ts, name, cat, args))
        elif etype == T_END:
            st = stacks[tu]
            if not st:
                chk.problem(f"packet {n}: slice END without BEGIN on track {tu} ({tname})")
                continue
            b_ts, b_name, b_cat, b_args = st.pop()
            chk.n_slices += 1
            if collect:
                chk.slices.append(Slice(track_proc.get(tu, ""), tname, b_name, b_cat, b_ts, ts - b_ts, b_args))
        elif etype == T_INSTANT:
            chk.n_slices += 1
            if collect:
                chk.slices.append(Slice(track_proc.get(tu, ""), tname, name, cat, ts, 0, args))
        else:
            chk.problem(f"packet {n}: track event of unknown type {etype}")
    for tu, st in stacks.items():
        if st:
            chk.problem(f"track {tu} ({tracks[tu].name}): {len(st)} slice(s) never ended")
    if chk.packets == 0:
        chk.problem("no packets")
    _flows_check(chk, fstart, fend)
    _ranks_check(chk)
    return chk


# ---- Chrome JSON ---------------------------------------------------------------


def _load_json(p: Path) -> Any:
    try:
        with open(p, "rb") as f:
            magic = f.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(p, "rt", encoding="utf-8") as fh:
            return json.load(fh, parse_float=Decimal)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadTraceError(f"not a readable JSON trace ({exc.__class__.__name__}: {exc})", path=str(p)) from None


def _ns(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | Decimal | str):
        return None
    try:
        d = Decimal(v) * 1000
    except ArithmeticError:
        return None
    return int(d) if d == d.to_integral_value() else None


def validate_chrome(path: str | Path, *, collect: bool = False) -> TraceCheck:
    p = Path(path)
    chk = TraceCheck(path=str(p), format="chrome-json")
    doc = _load_json(p)
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise BadTraceError("no traceEvents list", path=str(p))
    base = int(doc.get("baseTimeNanoseconds", 0)) if isinstance(doc, dict) else 0
    threads: dict[tuple[Any, Any], str] = {}
    spans: dict[tuple[Any, Any], list[tuple[int, int, str, str, dict[str, Any]]]] = defaultdict(list)
    open_b: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    fstart: dict[int, int] = defaultdict(int)
    fend: dict[int, int] = defaultdict(int)
    for n, e in enumerate(events):
        chk.packets += 1
        if not isinstance(e, dict) or "ph" not in e:
            chk.problem(f"event {n}: not an object with 'ph'")
            continue
        ph = e["ph"]
        key = (e.get("pid"), e.get("tid"))
        if ph == "M":
            if e.get("name") == "process_name":
                name = str((e.get("args") or {}).get("name", ""))
                if e.get("pid") in chk.processes and chk.processes[e["pid"]] != name:
                    chk.problem(f"event {n}: pid {e.get('pid')} named twice")
                chk.processes[e.get("pid")] = name  # type: ignore[index]
            elif e.get("name") == "thread_name":
                threads[key] = str((e.get("args") or {}).get("name", ""))
            continue
        ts = _ns(e.get("ts"))
        if ts is None:
            chk.problem(f"event {n}: ts {e.get('ts')!r} is not a number of µs with at most 3 decimals")
            continue
        ts += base
        if ph == "X":
            dur = _ns(e.get("dur", 0))
            if dur is None or dur < 0:
                chk.problem(f"event {n}: bad dur {e.get('dur')!r}")
                continue
            spans[key].append((ts, dur, str(e.get("name", "")), str(e.get("cat", "")), e.get("args") or {}))
        elif ph == "B":
            open_b[key].append(ts)
        elif ph == "E":
            if not open_b[key]:
                chk.problem(f"event {n}: E without B on pid {key[0]} tid {key[1]}")
            elif open_b[key].pop() > ts:
                chk.problem(f"event {n}: E before its B on pid {key[0]} tid {key[1]}")
            else:
                chk.n_slices += 1
        elif ph == "C":
            chk.n_counters += 1
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(
                isinstance(v, int | Decimal) and not isinstance(v, bool) for v in args.values()
            ):
                chk.problem(f"event {n}: counter without numeric args")
        elif ph in ("s", "t", "f"):
            fid = e.get("id")
            if not isinstance(fid, int):
                chk.problem(f"event {n}: flow without integer id")
            elif ph == "s":
                fstart[fid] += 1
            elif ph == "f":
                fend[fid] += 1
    for key, st in open_b.items():
        if st:
            chk.problem(f"pid {key[0]} tid {key[1]}: {len(st)} B event(s) never ended")
    for key, lst in spans.items():
        lst.sort(key=lambda s: (s[0], -s[1]))
        stack: list[int] = []
        tname = threads.get(key, str(key[1]))
        for ts, dur, name, cat, args in lst:
            while stack and stack[-1] <= ts:
                stack.pop()
            if stack and ts + dur > stack[-1]:
                chk.problem(f"pid {key[0]} thread {tname}: slice {name!r} at {ts} partially overlaps an enclosing slice")
            stack.append(ts + dur)
            chk.n_slices += 1
            if collect:
                chk.slices.append(Slice(chk.processes.get(key[0], ""), tname, name, cat, ts, dur, args))  # type: ignore[arg-type]
    _flows_check(chk, fstart, fend)
    _ranks_check(chk)
    return chk


def validate_trace(path: str | Path, *, collect: bool = False) -> TraceCheck:
    """Validate a file of any registered export format (``tracekit.exporters``), told
    by its first bytes."""
    p = Path(path)
    if not p.exists():
        raise BadTraceError("no such file", path=str(p))
    if p.is_dir():
        raise BadTraceError("is a directory, not a trace file", path=str(p))
    with open(p, "rb") as f:
        head = f.read(16)
    form = format_of_bytes(head)
    if form is None:
        titles = " trace nor ".join(f.title for f in FORMATS)
        raise BadTraceError(f"neither a {titles}", path=str(p))
    return form.check(p, collect=collect)


__all__ = ["Slice", "TraceCheck", "iter_packet_bytes", "validate_chrome", "validate_perfetto", "validate_trace"]
