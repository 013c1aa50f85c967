"""Typed exceptions. The CLI turns a TracekitError into one line and exit 1.

An error carries what it is about as data: the input ``path``, the ``rank`` and, for commands
that read two runs (``gap --b-run``, ``diff OLD NEW``, ``spec --baseline``), the ``side`` ("A":
the first run / phase A / the old run; "B": the second run / phase B / the new or baseline run).
Nothing routes on message text: a command fills in the path of the side that failed
(:meth:`TracekitError.located`) and :func:`tracekit.render.errors.error_line` composes the one
line a user reads (``<file>: rank <r>: <what>``).
"""

from __future__ import annotations

import copy
from typing import Literal, TypeVar

Side = Literal["A", "B"]

E = TypeVar("E", bound="TracekitError")


class TracekitError(Exception):
    """Bad data: names the file, the rank and (two-run commands) the side, where known. ``exit_code`` is
    the CLI's exit status."""

    exit_code = 1

    def __init__(
        self, message: str, *, path: str | None = None, rank: int | None = None, side: Side | None = None
    ) -> None:
        self.message = message
        self.path = path
        self.rank = rank
        self.side = side
        super().__init__(message)

    def located(self: E, *, path: str | None = None, rank: int | None = None, side: Side | None = None) -> E:
        """A copy with the fields that are still unknown filled in (known ones are kept)."""
        out = copy.copy(self)
        out.path = self.path if self.path is not None else path
        out.rank = self.rank if self.rank is not None else rank
        out.side = self.side if self.side is not None else side
        return out

    def one_line(self) -> str:
        from tracekit.render.errors import error_line

        return error_line(self)

    def __str__(self) -> str:
        return self.one_line()


class BadTraceError(TracekitError):
    """An input trace that cannot be read (truncated, not a trace, ...)."""


class EmptyTraceError(BadTraceError):
    """A trace with metadata but no events: ingest skips it (and says so)."""


class NotATraceError(BadTraceError):
    """Valid JSON that is no trace at all: skipped when found by walking a directory."""


class RankError(TracekitError):
    """Missing, duplicate or unidentifiable ranks."""


class RunError(TracekitError):
    """A run.parquet (or shard directory) that cannot be read or is inconsistent."""


class AnalysisError(TracekitError):
    """An analysis that cannot be done on this run (no such phase, no GPU events, ...)."""


def side_path(exc: TracekitError, a: str, b: str | None, both: str | None = None) -> str:
    """The input an error of a two-run command is about: A's file, B's file (``b`` None: B
    came from A's run), or ``both`` (default: A's) when the error names no side."""
    if exc.side == "B" and b is not None:
        return b
    if exc.side is None and both is not None:
        return both
    return a


class ConfigError(TracekitError, ValueError):
    """An option, option combination or ``TRACEKIT_*`` setting that cannot work (a capture that
    cannot run as configured): the user's mistake, refused like a usage error (exit 2). A plain
    ValueError from collectors is an internal error, never reported as a usage error."""

    exit_code = 2


class OutputError(TracekitError):
    """An output path tracekit will not write (missing parent directory, name too long, a directory)."""


class OutputIsInputError(OutputError):
    """The output names one of the inputs: refused before reading, like a usage error (exit 2)."""

    exit_code = 2


class OutputLockedError(OutputError):
    """Another live tracekit process holds the output's lock file."""


class InterruptedCapture(TracekitError):
    """A capture aborted by a second Ctrl-C (or killed launcher signal): exit 130."""

    exit_code = 130


__all__ = [
    "AnalysisError",
    "BadTraceError",
    "ConfigError",
    "EmptyTraceError",
    "InterruptedCapture",
    "NotATraceError",
    "OutputError",
    "OutputIsInputError",
    "OutputLockedError",
    "RankError",
    "RunError",
    "Side",
    "TracekitError",
    "side_path",
]
