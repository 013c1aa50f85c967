"""The capture launcher: spawn the rank processes, signals and Ctrl-C, why a rank failed.

- :func:`launch` spawns one process per rank (tracekit.collectors.rank_process), follows
  them (tracekit.collectors.progress) and ends the capture (tracekit.collectors.merge).

- :class:`Control` is shared with the ranks (spawn-safe multiprocessing primitives): before
  each cycle a rank asks :meth:`Control.may_start`; the launcher's first Ctrl-C sets the
  stop cycle to one past the furthest cycle any rank has begun, under the same lock, so
  every rank ends the window after the same cycle (no collective is left without a peer).
- :class:`Interrupts` counts SIGINT (Ctrl-C) in the launcher; the rank processes ignore
  SIGINT (it reaches the whole process group), so only the launcher decides. A second
  SIGINT, or SIGTERM, raises KeyboardInterrupt: abort.
- :func:`explain` orders the failures: the first rank to fail is the root cause; a rank
  whose collective failed after that "lost its peer".
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from tracekit.ranklist import format_rank_list

if TYPE_CHECKING:
    from tracekit.collectors.capture import CaptureConfig, CaptureResult

Say = Callable[[str], None]


LOCK_WAIT_S = 5.0  # the longest a process waits for Control's lock (a process killed inside it never releases it)


class Control:
    """Window control shared by the launcher and every rank (see the module docstring)."""

    def __init__(self, ctx: Any, world: int) -> None:
        self.lock = ctx.Lock()
        self.stop_at = ctx.Value("i", -1, lock=False)
        self.started = ctx.Array("i", [-1] * world, lock=False)

    def may_start(self, rank: int, cycle: int) -> bool:
        """In a rank, before cycle ``cycle``: False once the launcher asked to stop at or before it. A peer
        killed inside the lock (SIGKILL: never released) costs this rank ``LOCK_WAIT_S``, not its window: it
        goes on without the lock (its next collective then finds the peer gone)."""
        got = self.lock.acquire(timeout=LOCK_WAIT_S)
        try:
            stop = int(self.stop_at.value)
            if 0 <= stop <= cycle:
                return False
            self.started[rank] = cycle
            return True
        finally:
            if got:
                self.lock.release()

    def stop(self) -> int:
        """In the launcher: end every rank's window after the furthest cycle begun; returns that bound
        (cycles with index below it run everywhere)."""
        got = self.lock.acquire(timeout=LOCK_WAIT_S)  # a rank killed inside the lock must not hang the launcher
        try:
            stop = int(max(list(self.started))) + 1
            self.stop_at.value = stop
            return stop
        finally:
            if got:
                self.lock.release()


class Inbox:
    """The ranks' messages to the launcher: one queue per rank process (``queue_of``), read as one. A
    multiprocessing queue's writers share a lock around each write to its pipe; a rank killed while
    holding it (SIGKILL mid-send) would silence every other writer of that queue for good (their shards
    written, their "done" never read): with a queue each, it silences only itself."""

    def __init__(self, ctx: Any, owners: list[int]) -> None:
        self.queues = {r: ctx.Queue() for r in owners}
        self._order = list(self.queues.values())  # rotated after each message: no rank waits behind a busy one

    def queue_of(self, owner: int) -> Any:
        return self.queues[owner]

    def get(self, timeout: float) -> Any:
        """The next message of any rank, waiting up to ``timeout`` s; ``queue.Empty`` when none came."""
        import queue
        import time
        from multiprocessing.connection import wait

        deadline = time.monotonic() + timeout
        while True:
            for i, q in enumerate(self._order):
                with contextlib.suppress(queue.Empty):
                    msg = q.get_nowait()
                    self._order = self._order[i + 1:] + self._order[:i + 1]
                    return msg
            left = deadline - time.monotonic()
            if left <= 0:
                raise queue.Empty
            wait([q._reader for q in self._order], left)  # until a message is in one of the pipes

    def drain(self) -> list[Any]:
        """Every message still queued (after the ranks ended)."""
        import queue

        out = []
        for q in self.queues.values():
            while True:
                try:
                    out.append(q.get_nowait())
                except (queue.Empty, OSError, ValueError):
                    break
        return out


class Interrupts:
    """SIGINT / SIGTERM in the launcher: the first SIGINT is counted, a second one (or SIGTERM) aborts."""

    def __init__(self) -> None:
        self.count = 0
        self.name = ""
        self.names: list[str] = []  # every signal received, in order
        self._prev: dict[int, Any] = {}

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        self.name = signal.Signals(signum).name
        self.names.append(self.name)
        self.count += 1 if signum == signal.SIGINT else 2
        if self.count >= 2:
            raise KeyboardInterrupt

    def how(self) -> str:
        """What aborted the capture, as it happened: ``SIGTERM``, ``SIGINT twice``, ``SIGINT, then SIGTERM``."""
        if not self.names:
            return "SIGINT twice"
        if len(self.names) == 2 and self.names[0] == self.names[1]:
            return f"{self.names[0]} twice"
        return ", then ".join(self.names)

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            self._prev[s] = signal.signal(s, self._on)

    def restore(self) -> None:
        for s, h in self._prev.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, h)
        self._prev.clear()


@contextlib.contextmanager
def sigint_ignored() -> Any:
    """SIGINT ignored while rank processes are spawned: an ignored signal stays ignored across exec,
    and Python then installs no KeyboardInterrupt handler, so a rank never dies of Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    prev = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, prev)


def exit_reason(code: int | None) -> str:
    """``killed by SIGKILL`` / ``exited with code 17`` for a process exit status."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class Failure:
    """How one rank failed, as the launcher saw it."""

    rank: int
    at: float  # time.monotonic() when the launcher learnt of it
    what: str  # "killed by SIGKILL", "failed: RuntimeError: ...", "no progress for 12 s (killed)"
    collective: bool = False  # the error came out of torch.distributed (a peer went away)
    stage: str = ""  # "before the profiling window", "in the profiling window after 3 cycles"


def explain(failures: dict[int, Failure]) -> list[tuple[Failure, str]]:
    """Failures ordered root cause first, each with one line (``rank 1: killed by SIGKILL ...``)."""
    if not failures:
        return []
    order = sorted(failures.values(), key=lambda f: (f.at, f.collective, f.rank))
    roots = [f for f in order if not f.collective] or order[:1]
    first = roots[0]
    out: list[tuple[Failure, str]] = []
    for f in sorted(order, key=lambda f: (f is not first, f.collective, f.at, f.rank)):
        where = f" {f.stage}" if f.stage else ""
        if f is first:
            out.append((f, f"rank {f.rank}: {f.what}{where} (root cause)"))
        elif f.collective:
            out.append((f, f"rank {f.rank}: lost its peer (rank {first.rank}){where}: {f.what}"))
        else:
            out.append((f, f"rank {f.rank}: {f.what}{where}"))
    return out


def short_error(text: str, limit: int = 200) -> str:
    """The first line of an exception's text, at most ``limit`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."



def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# After every rank wrote its shard, teardown gets this long before the launcher ends the process.
DONE_GRACE_S = 20.0


def stop_all(procs: dict[int, Any]) -> None:
    for p in procs.values():
        if p.is_alive():
            p.kill()
    for p in procs.values():
        p.join(timeout=10)


def launch(cc: CaptureConfig, say: Callable[[str], None], live: bool, kind: str, world: int, captured: list[int],
           out: Path, shard_dir: Path) -> CaptureResult:
    import multiprocessing as mp

    from tracekit.collectors.capture import SAFE_ENV
    from tracekit.collectors.manifest import launcher_section
    from tracekit.collectors.merge import finish
    from tracekit.collectors.progress import Progress, watch
    from tracekit.collectors.rank_process import rank_main
    from tracekit.errors import InterruptedCapture

    launcher = launcher_section()
    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)
    # spawn, not fork/forkserver: a rank must see the launcher's environment as it is now (inheritance at
    # spawn is how NCCL_* reach ranks; a forkserver started earlier would hand out a stale environment)
    ctx = mp.get_context("spawn")
    ctl = Control(ctx, world)
    nodes = cc.nodes
    port = nodes.master_port or free_port()
    local = nodes.local_ranks()
    # where the shards end: the shard directory, or the URL prefix the ranks upload them to
    dest = cc.remote.prefix if cc.remote is not None else str(shard_dir)
    say(f"capture: {world} ranks ({'NCCL on GPU' if kind == 'cuda' else 'gloo on CPU'}), capturing "
        f"{format_rank_list(captured)}, {cc.warmup} warm-up + {cc.cycles} cycles in profile mode {cc.profile}")
    if nodes.multi:
        from tracekit.collectors.nodes import gloo_interface, node_info, write_node

        if kind != "cuda" and not os.environ.get("GLOO_SOCKET_IFNAME"):
            name, how = gloo_interface(nodes.master_addr, port)
            if name:
                os.environ["GLOO_SOCKET_IFNAME"] = name  # inherited by the ranks at spawn, kept in their manifest
            say(f"capture: gloo's interface: {how}")
        say(f"capture: node {nodes.node_rank} of {nodes.nnodes} ({socket.gethostname()}): ranks "
            f"{format_rank_list(local)}; process group at {nodes.master_addr}:{port}; shards to {dest}/")
        write_node(shard_dir, nodes.node_rank, "started", node_info(nodes), cc.remote)
    driver = getattr(cc.workload, "driver", None)
    if driver:  # an engine that runs every rank in its own processes, from one driver (collectors/engines.py)
        from tracekit.collectors.engines import load_ref

        fn = load_ref(driver)
        inbox = Inbox(ctx, [-1])  # one process, one queue
        one = ctx.Process(target=fn, args=(world, kind, cc, str(shard_dir), inbox.queue_of(-1), ctl),
                          name="tracekit-driver")
        procs = dict.fromkeys(local, one)  # the driver answers for every rank: its death is theirs
    else:
        inbox = Inbox(ctx, list(local))
        procs = {r: ctx.Process(target=rank_main, args=(r, world, kind, cc, port, str(shard_dir), inbox.queue_of(r),
                                                        ctl), name=f"tracekit-rank{r}") for r in local}
    intr = Interrupts()
    with sigint_ignored():
        for p in {id(p): p for p in procs.values()}.values():
            p.start()
    intr.install()
    try:
        say("capture: rank processes started (pid per rank: "
            + ", ".join(f"{r}: {p.pid}" for r, p in procs.items()) + f"); logs in {shard_dir}/"
            + (f" (uploaded to {dest}/ when a rank fails), shards uploaded to {dest}/" if cc.remote is not None else ""))
        prog = Progress(say, world, cc.warmup + cc.cycles, live=live, local=tuple(local))
        seen = watch(cc, procs, inbox, ctl, intr, prog, say)
        if seen.stop is not None and seen.stop <= cc.warmup:
            stop_all(procs)
            shutil.rmtree(shard_dir, ignore_errors=True)
            raise InterruptedCapture("interrupted before the profiling window: nothing was captured", path=str(out))
        return finish(cc, say, seen, procs, world, captured, out, shard_dir, launcher)
    except KeyboardInterrupt:
        stop_all(procs)
        shards = sorted(shard_dir.glob("rank-*.parquet"))  # with -o URL: the uploaded ones (a failed upload deletes)
        run = cc.remote.run if cc.remote is not None else out
        if not shards:
            shutil.rmtree(shard_dir, ignore_errors=True)
            raise InterruptedCapture(f"aborted ({intr.how()}): nothing was captured",
                                     path=str(run)) from None
        raise InterruptedCapture(f"aborted ({intr.how()}): {len(shards)} rank shard(s) kept in "
                                 f"{dest}; merge them with `tracekit merge {dest} -o {run}`",
                                 path=str(run)) from None
    finally:
        intr.restore()


__all__ = ["DONE_GRACE_S", "LOCK_WAIT_S", "Control", "Failure", "Inbox", "Interrupts", "exit_reason", "explain", "free_port", "launch",
           "short_error", "sigint_ignored", "stop_all"]

