"""The capture launcher's watch over its rank processes: progress, deadlines, Ctrl-C, why a rank failed.

- :class:`Control` is shared with the ranks (spawn-safe multiprocessing primitives): before
  each cycle a rank asks :meth:`Control.may_start`; the launcher's first Ctrl-C sets the
  stop cycle to one past the furthest cycle any rank has begun, under the same lock, so
  every rank ends the window after the same cycle (no collective is left without a peer).
- :class:`Interrupts` counts SIGINT (Ctrl-C) in the launcher; the rank processes ignore
  SIGINT (it reaches the whole process group), so only the launcher decides. A second
  SIGINT, or SIGTERM, raises KeyboardInterrupt: abort.
- :class:`Progress` prints one line per stage when every live rank has reached it, and on a
  terminal the cycles done / total of every rank every few seconds.
- :func:`explain` orders the failures: the first rank to fail is the root cause; a rank
  whose collective failed after that "lost its peer".
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

Say = Callable[[str], None]
TICK_S = 3.0  # terminal progress period


class Control:
    """Window control shared by the launcher and every rank (see the module docstring)."""

    def __init__(self, ctx: Any, world: int) -> None:
        self.lock = ctx.Lock()
        self.stop_at = ctx.Value("i", -1, lock=False)
        self.started = ctx.Array("i", [-1] * world, lock=False)

    def may_start(self, rank: int, cycle: int) -> bool:
        """In a rank, before cycle ``cycle``: False once the launcher asked to stop at or before it."""
        with self.lock:
            stop = int(self.stop_at.value)
            if 0 <= stop <= cycle:
                return False
            self.started[rank] = cycle
            return True

    def stop(self) -> int:
        """In the launcher: end every rank's window after the furthest cycle begun; returns that bound
        (cycles with index below it run everywhere)."""
        got = self.lock.acquire(timeout=5.0)  # a rank killed inside the lock must not hang the launcher
        try:
            stop = int(max(list(self.started))) + 1
            self.stop_at.value = stop
            return stop
        finally:
            if got:
                self.lock.release()


class Interrupts:
    """SIGINT / SIGTERM in the launcher: the first SIGINT is counted, a second one (or SIGTERM) aborts."""

    def __init__(self) -> None:
        self.count = 0
        self.name = ""
        self._prev: dict[int, Any] = {}

    def _on(self, signum: int, _frame: FrameType | None) -> None:
        self.name = signal.Signals(signum).name
        self.count += 1 if signum == signal.SIGINT else 2
        if self.count >= 2:
            raise KeyboardInterrupt

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


def rank_ranges(ranks: list[int]) -> str:
    parts: list[str] = []
    for r in sorted(ranks):
        if parts and parts[-1].split("-")[-1] == str(r - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{r}"
        else:
            parts.append(str(r))
    return ",".join(parts)


@dataclass
class Progress:
    """What the launcher prints while the ranks run (see the module docstring)."""

    say: Say
    world: int
    total_cycles: int
    live: bool = False  # a terminal: also print every rank's cycles every TICK_S seconds
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
        live = set(range(self.world)) - self.gone
        if key in self.done_stages or not got or not live <= set(got):
            return
        self.done_stages.add(key)
        texts = sorted(set(got.values()))
        text = texts[0] if len(texts) == 1 else "; ".join(f"rank {r}: {t}" for r, t in sorted(got.items()))
        n = len(set(got) - self.gone)
        self.say(f"capture: {text} ({n}/{self.world} ranks, {time.monotonic() - self.t0:.1f} s)")

    def tick(self) -> None:
        now = time.monotonic()
        if not self.live or now - self._last_tick < TICK_S:
            return
        self._last_tick = now
        if not self.cycles:
            return
        by: dict[int, list[int]] = {}
        for r in range(self.world):
            if r not in self.gone:
                by.setdefault(self.cycles.get(r, 0), []).append(r)
        parts = [f"rank{'s' if len(rs) > 1 else ''} {rank_ranges(rs)} {n}/{self.total_cycles}"
                 for n, rs in sorted(by.items(), reverse=True)]
        self.say(f"capture: {now - self.t0:.0f} s, cycles done: {', '.join(parts)}")


__all__ = ["Control", "Failure", "Interrupts", "Progress", "exit_reason", "explain", "rank_ranges", "short_error",
           "sigint_ignored"]
