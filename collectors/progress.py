"""Following the capture's rank processes: their messages, deadlines and the progress lines.

- :class:`Progress` prints one line per stage when every live rank has reached it, and on a
  terminal the cycles done / total of every rank every few seconds.
- :func:`watch` follows the ranks until every process has ended: it kills a rank that shows
  no progress for its deadline and ends the window on Ctrl-C (:class:`Watch` is what it saw). A
  silent rank found stopped by a signal when it is killed is said so: its peers, silent too, wait
  for it in a collective (``collectors/merge.py`` names it the root cause).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tracekit.collectors.capture import CaptureConfig
from tracekit.collectors.launcher import DONE_GRACE_S, Inbox, Say
from tracekit.collectors.messages import (
    WINDOW,
    WINDOW_DONE,
    Beat,
    Done,
    Failed,
    Message,
    Stage,
    Status,
)
from tracekit.procfs import is_stopped
from tracekit.ranklist import format_rank_list

STOPPED = "stopped (SIGSTOP or SIGTSTP)"  # a silent rank found in state T when it was killed

TICK_S = 3.0  # terminal progress period


@dataclass
class Progress:
    """What the launcher prints while the ranks run (see the module docstring)."""

    say: Say
    world: int
    total_cycles: int
    live: bool = False  # a terminal: also print every rank's cycles every TICK_S seconds
    local: tuple[int, ...] = ()  # the ranks this launcher runs (a node of a multi-host capture); () = all
    t0: float = field(default_factory=time.monotonic)
    cycles: dict[int, int] = field(default_factory=dict)
    stages: dict[str, dict[int, str]] = field(default_factory=dict)
    done_stages: set[str] = field(default_factory=set)
    gone: set[int] = field(default_factory=set)
    _last_tick: float = field(default_factory=time.monotonic)

    def cycle(self, rank: int, c: int) -> None:
        self.cycles[rank] = c + 1

    def stage(self, rank: int, key: str, text: str) -> None:
        self.stages.setdefault(key, {})[rank] = text
        self._flush(key)

    def rank_gone(self, rank: int) -> None:
        self.gone.add(rank)
        for key in list(self.stages):
            self._flush(key)

    def _flush(self, key: str) -> None:
        got = self.stages.get(key, {})
        live = set(self.ranks()) - self.gone
        if key in self.done_stages or not got or not live <= set(got):
            return
        self.done_stages.add(key)
        texts = sorted(set(got.values()))
        text = texts[0] if len(texts) == 1 else "; ".join(f"rank {r}: {t}" for r, t in sorted(got.items()))
        n = len(set(got) - self.gone)
        self.say(f"capture: {text} ({n}/{len(self.ranks())} ranks, {time.monotonic() - self.t0:.1f} s)")

    def ranks(self) -> tuple[int, ...]:
        return self.local or tuple(range(self.world))

    def tick(self) -> None:
        now = time.monotonic()
        if not self.live or now - self._last_tick < TICK_S:
            return
        self._last_tick = now
        if not self.cycles:
            return
        by: dict[int, list[int]] = {}
        for r in self.ranks():
            if r not in self.gone:
                by.setdefault(self.cycles.get(r, 0), []).append(r)
        parts = [f"rank{'s' if len(rs) > 1 else ''} {format_rank_list(rs)} {n}/{self.total_cycles}"
                 for n, rs in sorted(by.items(), reverse=True)]
        self.say(f"capture: {now - self.t0:.0f} s, cycles done: {', '.join(parts)}")



@dataclass
class Watch:
    finished: dict[int, float] = field(default_factory=dict)  # ranks whose shard is written -> when
    errors: dict[int, tuple[str, bool, float]] = field(default_factory=dict)  # rank -> (error, collective, when)
    died: dict[int, float] = field(default_factory=dict)  # rank -> when its process was seen dead, unfinished
    timed_out: dict[int, float] = field(default_factory=dict)  # rank -> the silence limit it passed
    silent_since: dict[int, float] = field(default_factory=dict)  # timed-out rank -> its last progress report
    stopped: set[int] = field(default_factory=set)  # timed-out ranks found stopped (SIGSTOP, SIGTSTP) when killed
    last_cycle: dict[int, int] = field(default_factory=dict)
    window_done: set[int] = field(default_factory=set)
    window_started: set[int] = field(default_factory=set)
    stop: int | None = None  # Ctrl-C: cycles with a lower index run on every rank


def watch(cc: CaptureConfig, procs: dict[int, Any], q: Inbox, ctl: Any, intr: Any, prog: Any,
           say: Callable[[str], None]) -> Watch:
    """Follow the ranks until every process has ended; kill silent ones; end the window on Ctrl-C."""
    w = Watch()
    last = dict.fromkeys(procs, time.monotonic())  # last progress report per rank
    cycling: set[int] = set()  # ranks past start-up (first cycle done)
    while any(p.is_alive() for p in procs.values()):
        now = time.monotonic()
        if intr.count and w.stop is None:
            w.stop = ctl.stop()
            if w.stop <= cc.warmup:
                return w
            n = min(w.stop - cc.warmup, cc.cycles)
            say(f"capture: Ctrl-C: every rank ends its window after {n} of {cc.cycles} cycles and writes what it "
                "captured (Ctrl-C again to abort)")
        for r, p in procs.items():
            if not p.is_alive() and r not in w.finished and r not in w.died:
                w.died[r] = now
                prog.rank_gone(r)
            if r in w.finished:  # its data is safe: only teardown is left; do not wait minutes for it
                if p.is_alive() and now - w.finished[r] > DONE_GRACE_S and all(
                        q_r in w.finished or not procs[q_r].is_alive() for q_r in procs):
                    p.kill()
                continue
            limit = cc.timeout_s if r in cycling else max(cc.timeout_s, cc.startup_timeout_s)
            if p.is_alive() and r not in w.timed_out and now - last[r] > limit:
                stopped = is_stopped(p.pid)  # not blocked on a peer: stopped, the cause of its peers' silence
                p.kill()
                w.timed_out[r] = limit
                w.silent_since[r] = last[r]
                if stopped:
                    w.stopped.add(r)
                say(f"rank {r}: {STOPPED + ', ' if stopped else ''}no progress for {limit:g} s: killed")
        prog.tick()
        try:
            msg = q.get(timeout=0.2)
        except queue.Empty:
            continue
        _take(msg, w, prog, say)
        last[msg.rank] = time.monotonic()
        if isinstance(msg, Beat) and msg.cycle is not None:
            cycling.add(msg.rank)
    for p in procs.values():
        p.join(timeout=10)
    for msg in q.drain():  # late messages
        _take(msg, w, prog, say)
    for r in procs:  # ranks that ended in the last poll with the others: dead, not forgotten
        if r not in w.finished and r not in w.died:
            w.died[r] = time.monotonic()
            prog.rank_gone(r)
    return w


def _take(msg: Message, w: Watch, prog: Any, say: Callable[[str], None]) -> None:
    r = msg.rank
    match msg:
        case Beat(cycle=int(c)):
            w.last_cycle[r] = c
            prog.cycle(r, c)
        case Stage(key=key, text=text):
            if key == WINDOW_DONE:
                w.window_done.add(r)
            if key == WINDOW:
                w.window_started.add(r)
            prog.stage(r, key, text)
        case Failed(error=error, collective=coll):
            w.errors.setdefault(r, (error, coll, time.monotonic()))
        case Done():
            w.finished[r] = time.monotonic()
            prog.stage(r, "done", "shards written")
        case Status(text=text):
            say(f"rank {r}: {text}")
