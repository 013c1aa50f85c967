"""What a capture rank process tells the launcher, as typed records (they cross a multiprocessing queue).

A rank sends :class:`Beat` (alive; after each cycle with its index), :class:`Stage` (a step every
rank passes: the launcher prints it once all live ranks have), :class:`Status` (a line worth
printing now), :class:`Failed` (why it stops) and :class:`Done` (its shard is written). The
launcher (collectors/progress.py) matches on the type; every record carries the rank, so any
message counts as progress for its rank.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Beat:
    rank: int
    cycle: int | None = None  # the cycle just finished; None: the process is up, no cycle yet


@dataclass(frozen=True)
class Stage:
    rank: int
    key: str  # "pg", "ready", "window", "window done", ...: the launcher's grouping key
    text: str


@dataclass(frozen=True)
class Status:
    rank: int
    text: str


@dataclass(frozen=True)
class Failed:
    rank: int
    error: str  # one line: "RuntimeError: ..."
    collective: bool  # it came out of torch.distributed (a peer went away)


@dataclass(frozen=True)
class Done:
    rank: int
    events: int  # rows in the shard written


Message = Beat | Stage | Status | Failed | Done

# Stage keys the launcher acts on besides printing them.
WINDOW = "window"
WINDOW_DONE = "window done"

__all__ = ["WINDOW", "WINDOW_DONE", "Beat", "Done", "Failed", "Message", "Stage", "Status"]
