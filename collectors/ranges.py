"""Phase ranges recorded by tracekit's own hooks (profile modes ``lite`` and ``timing``).

In ``lite`` the profiler records CUDA activity only, so ``record_function``
ranges are gone; in ``timing`` no profiler runs at all. In both, the hooks
(``tracekit.collectors.hooks``) record each phase range themselves into a
``RangeRecorder``: ``time.time_ns()`` at open and close (Unix-epoch ns, the
clock Kineto stamps its events with: docs/capture.md), the native thread id
(what Kineto reports as a host event's ``device_resource_id``), the label.
Facts markers (``format_facts``) become zero-length ranges, as with
``record_function``.

With ``cuda_events=True`` (timing mode on a GPU) a CUDA event is also recorded
on the current stream at open and close of every ``events_every``-th range of each
phase name (the first, then every N-th: a sample of the instances; the others keep
their host time only, ``args`` null); the GPU time between the two
(``elapsed_time``, the queue ahead of the phase included, like
``collectors/timing.py``) goes into the range row's ``args`` as
``{"cuda_event_ns": N}``. The events come from a pool and go back to it once read: a range
that needs one takes a free event; when none is free, the ranges whose end event has completed
(``query()``, oldest first) are read and their events freed, and only when none has completed are
new events made (``POOL_GROW`` at a time). A long timing window thus reuses a few hundred events
instead of creating (and holding) two per range (bench/timing_cost.py measures the cost per range).

``frame(rank, pid)`` gives ``range`` rows in the schema's columns: the same
rows a ``record_function`` range gives, so ``tracekit.finalize.membership`` joins host
launches to them by (rank, pid, tid) and time unchanged.

Thread ids (measured on H200, torch 2.11): with CPU activity on, Kineto maps
CUPTI's thread key of each CUDA API event to the native thread id; with CUDA
activity only (lite) it cannot (the map is filled by CPU-side events), and the
launches carry Kineto's raw key, the low 32 bits of ``pthread_self()`` as a
signed int32 (``kineto_thread_key``). ``thread_map`` gives key -> native id for
every Python thread alive and every thread that opened a range;
``remap_threads`` rewrites the host rows of a lite window with it, so launches
and ranges share one thread id again. ``lite_thread_map`` adds one inference
for keys the map does not know (a thread already gone, or a key computed
differently by another torch build): when exactly one unknown key issued
launches and exactly one thread holding phase ranges issued none, they are the
same thread.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import polars as pl

from tracekit import schema
from tracekit.errors import ConfigError
from tracekit.finalize.phases import CUDA_EVENT_ARG, check_facts, format_facts, format_label

# a range's label: its text, or (phase, facts) / (phase, facts, cycle) formatted when the frame is built
Label = str | tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], int]
Token = tuple[Label, int, int, Any]
POOL_GROW = 64  # CUDA events made at once when the pool is empty and no range has completed


class RangeRecorder:
    """Collects phase ranges (label, thread, start, end, optional CUDA events); appends are thread-safe."""

    def __init__(self, cuda_events: bool = False, events_every: int = 1) -> None:
        if events_every < 1:
            raise ConfigError(f"events_every must be >= 1, not {events_every}")
        self.cuda_events = cuda_events
        self.events_every = events_every
        self._opened: dict[str, int] = {}  # phase name -> ranges opened
        self._rows: list[tuple[Label, int, int, int, Any, Any]] = []
        self._threads: dict[int, int] = {}  # pthread ident -> native id of every thread that opened a range
        self._free: list[Any] = []  # CUDA events ready for reuse
        self._gpu: dict[int, int] = {}  # row index -> GPU ns of the rows already read
        self._read = 0  # rows before this index have been read (or have no events)
        self._pool_lock = threading.Lock()  # the event pool and the read position, shared by every thread
        self._event: Any = None
        if cuda_events:
            import torch

            self._event = torch.cuda.Event

    def open(self, label: str) -> Token:
        """Open a range named ``label`` (any text)."""
        return self._open(label, label.split("|", 1)[0])

    def open_phase(self, phase: str, facts: dict[str, Any]) -> Token:
        """Open phase ``phase``'s range: its label is ``format_label(phase, **facts)``, formatted when the
        frame is built, not on the hot path (keys checked now: a bad one raises here, as formatting would)."""
        check_facts(facts)
        return self._open((phase, facts), phase)

    def _open(self, label: Label, key: str) -> Token:
        tid = threading.get_native_id()
        self._threads[threading.get_ident()] = tid
        t0 = time.time_ns()
        ev = None
        if self._event is not None:
            n = self._opened.get(key, 0)
            self._opened[key] = n + 1
            if n % self.events_every == 0:
                ev = self._take()
                ev.record()
        return (label, tid, t0, ev)

    def close(self, token: Token) -> None:
        label, tid, t0, ev0 = token
        ev1 = None
        if ev0 is not None:
            ev1 = self._take()
            ev1.record()
        self._rows.append((label, tid, t0, time.time_ns(), ev0, ev1))

    @staticmethod
    def _sync() -> None:
        import torch

        torch.cuda.synchronize()

    def _take(self) -> Any:
        with self._pool_lock:
            if not self._free:
                self._harvest()
                if not self._free:
                    self._free = [self._event(enable_timing=True) for _ in range(POOL_GROW)]
            return self._free.pop()

    def _harvest(self, wait: bool = False) -> None:
        """(Called with ``_pool_lock`` held.) Read the GPU time of the recorded ranges in order, up to the first whose end event has not completed
        (``wait``: all of them, after a device sync), and free their events."""
        rows = self._rows
        i = self._read
        while i < len(rows):
            label, tid, t0, t1, e0, e1 = rows[i]
            if e0 is not None:
                if not wait and not e1.query():
                    break
                self._gpu[i] = round(e0.elapsed_time(e1) * 1e6)
                self._free += (e0, e1)
                rows[i] = (label, tid, t0, t1, None, None)
            i += 1
        self._read = i

    def marker(self, label: str) -> None:
        t = time.time_ns()
        self._rows.append((label, threading.get_native_id(), t, t, None, None))

    def facts_marker(self, phase: str, cycle: int, facts: dict[str, Any]) -> None:
        """A facts marker ``format_facts(phase, cycle, **facts)``, formatted when the frame is built."""
        check_facts(facts)
        t = time.time_ns()
        self._rows.append(((phase, facts, cycle), threading.get_native_id(), t, t, None, None))

    def thread_map(self) -> dict[int, int]:
        """Kineto thread key -> native thread id, for every live Python thread and every range thread."""
        pairs = dict(self._threads)
        for t in threading.enumerate():
            if t.ident is not None and t.native_id is not None:
                pairs[t.ident] = t.native_id
        return {kineto_thread_key(ident): native for ident, native in pairs.items()}

    def __len__(self) -> int:
        return len(self._rows)

    def _gpu_ns(self) -> list[int | None]:
        if self._event is not None and any(r[4] is not None for r in self._rows[self._read:]):
            self._sync()
            with self._pool_lock:
                self._harvest(wait=True)
        return [self._gpu.get(i) for i in range(len(self._rows))]

    def frame(self, rank: int, pid: int) -> pl.DataFrame:
        """The recorded ranges as ``range`` rows (schema columns, conformed, not finalized)."""
        gpu = self._gpu_ns()
        rows = self._rows
        return schema.conform(
            pl.DataFrame(
                {
                    "rank": pl.Series([rank] * len(rows), dtype=pl.Int32),
                    "kind": pl.Series([schema.RANGE] * len(rows), dtype=pl.String),
                    "name": pl.Series([_label(r[0]) for r in rows], dtype=pl.String),
                    "device": pl.Series([-1] * len(rows), dtype=pl.Int16),
                    "pid": pl.Series([pid] * len(rows), dtype=pl.Int64),
                    "tid": pl.Series([r[1] for r in rows], dtype=pl.Int64),
                    "start_ns": pl.Series([r[2] for r in rows], dtype=pl.Int64),
                    "dur_ns": pl.Series([r[3] - r[2] for r in rows], dtype=pl.Int64),
                    "args": pl.Series([None if g is None else json.dumps({CUDA_EVENT_ARG: g}) for g in gpu],
                                      dtype=pl.String),
                }
            )
        )


def _label(label: Label) -> str:
    """A row's name: the text, or a phase label / facts marker formatted now."""
    if isinstance(label, str):
        return label
    if len(label) == 2:
        return format_label(label[0], **label[1])
    return format_facts(label[0], label[2], **label[1])


def kineto_thread_key(ident: int) -> int:
    """Kineto's thread key of a thread (libkineto ``threadId()``: the first 4 bytes of ``pthread_self()``, int32)."""
    low = ident & 0xFFFFFFFF
    return low - (1 << 32) if low >= 1 << 31 else low


def remap_threads(events: pl.DataFrame, mapping: dict[int, int]) -> pl.DataFrame:
    """``events`` with every host row's ``tid`` that is a Kineto thread key in ``mapping`` replaced by the native id."""
    if not mapping or events.is_empty():
        return events
    keys = [k for k, v in mapping.items() if k != v]
    if not keys:
        return events
    return events.with_columns(
        pl.col("tid").replace_strict(keys, [mapping[k] for k in keys], default=pl.col("tid"), return_dtype=pl.Int64)
    )


def lite_thread_map(kineto: pl.DataFrame, ranges: pl.DataFrame, known: dict[int, int]) -> tuple[dict[int, int], str]:
    """The thread map for a lite window: ``known`` (``RangeRecorder.thread_map``) plus the one-to-one inference of
    the module doc. Returns (mapping, how: "keys", "keys + inferred K -> N" or "none")."""
    from tracekit.schema import LAUNCH

    mapping = dict(known)
    natives = set(mapping.values())
    launch_tids = set(kineto.filter(pl.col("kind") == LAUNCH).get_column("tid").drop_nulls().unique().to_list())
    unknown = sorted(t for t in launch_tids if t not in mapping and t not in natives)
    range_tids = set(ranges.get_column("tid").drop_nulls().unique().to_list())
    silent = sorted(t for t in range_tids if t not in launch_tids and t not in {mapping.get(u) for u in launch_tids})
    how = "keys" if mapping else "none"
    if len(unknown) == 1 and len(silent) == 1:
        mapping[unknown[0]] = silent[0]
        how = f"{how} + inferred {unknown[0]} -> {silent[0]}"
    return mapping, how
