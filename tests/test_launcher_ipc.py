"""The launcher's shared primitives when a rank process is killed inside one of their locks (SIGKILL never
releases a multiprocessing lock): the other ranks' messages still reach the launcher (``Inbox``: a queue
per rank) and their cycles still start (``Control.may_start`` waits ``LOCK_WAIT_S`` at most).

Found by a fresh clone's test run: ``test_rank_killed_mid_window_is_a_partial_run`` named rank 0 the root
cause ("no progress for 300 s") when rank 1, killed with SIGKILL, had held the one queue's write lock:
rank 0's shard was written, its "done" never sent."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from typing import Any

from tracekit.collectors.launcher import LOCK_WAIT_S, Control, Inbox
from tracekit.collectors.messages import Done

GUARD_S = 120  # a last guard only: every wait below ends on an event or a process exit


def _hold_and_wait(lock: Any, held: Any) -> None:
    lock.acquire()
    held.set()
    signal.pause()  # killed here, inside the lock


def _send_done(q: Any, rank: int) -> None:
    q.put(Done(rank, 5))
    q.close()
    q.join_thread()  # returns once the message is in the pipe


def _start_cycle(ctl: Any, rank: int, out: Any) -> None:
    out.put(ctl.may_start(rank, 3))


def _killed_holding(ctx: Any, lock: Any) -> None:
    held = ctx.Event()
    p = ctx.Process(target=_hold_and_wait, args=(lock, held))
    p.start()
    assert held.wait(GUARD_S)
    os.kill(p.pid, signal.SIGKILL)
    p.join(GUARD_S)
    assert p.exitcode == -signal.SIGKILL


def test_a_rank_killed_inside_its_queue_lock_silences_only_itself() -> None:
    ctx = mp.get_context("spawn")
    inbox = Inbox(ctx, [0, 1])
    _killed_holding(ctx, inbox.queue_of(1)._wlock)  # rank 1 dies mid-send: its queue's write lock held for good
    sender = ctx.Process(target=_send_done, args=(inbox.queue_of(0), 0))
    sender.start()
    assert inbox.get(GUARD_S) == Done(0, 5)
    sender.join(GUARD_S)
    assert sender.exitcode == 0  # its queue flushed: it ended
    assert inbox.drain() == []


def test_one_queue_for_every_rank_is_what_hung() -> None:
    """The mechanism the Inbox removes: with one queue shared by the ranks, a writer killed inside its lock
    keeps every other writer's message out of the pipe (the sender cannot flush and end)."""
    ctx = mp.get_context("spawn")
    shared = ctx.Queue()
    _killed_holding(ctx, shared._wlock)
    sender = ctx.Process(target=_send_done, args=(shared, 0))
    sender.start()
    sender.join(5)  # it cannot end: its feeder thread waits for the dead writer's lock
    try:
        assert sender.exitcode is None and shared.empty()
    finally:
        sender.kill()
        sender.join(GUARD_S)


def test_a_rank_killed_inside_the_window_lock_does_not_stop_the_others() -> None:
    ctx = mp.get_context("spawn")
    ctl = Control(ctx, 2)
    _killed_holding(ctx, ctl.lock)
    out = ctx.Queue()
    p = ctx.Process(target=_start_cycle, args=(ctl, 0, out))
    p.start()
    assert out.get(timeout=GUARD_S + LOCK_WAIT_S) is True  # after LOCK_WAIT_S without the lock
    p.join(GUARD_S)
    assert p.exitcode == 0 and list(ctl.started) == [3, -1]
    assert ctl.stop() == 4  # the launcher's Ctrl-C still ends the window (its own wait is bounded too)
