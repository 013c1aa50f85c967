"""Typed exceptions. The CLI turns a TracekitError into one line and exit 1."""

from __future__ import annotations


class TracekitError(Exception):
    """Bad data: names the file and, where known, the rank."""

    def __init__(self, message: str, *, path: str | None = None, rank: int | None = None) -> None:
        self.message = message
        self.path = path
        self.rank = rank
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = []
        if self.path is not None:
            where.append(str(self.path))
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        prefix = ": ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


class BadTraceError(TracekitError):
    """An input trace that cannot be read (truncated, not a trace, ...)."""


class RankError(TracekitError):
    """Missing, duplicate or unidentifiable ranks."""


class RunError(TracekitError):
    """A run.parquet (or shard directory) that cannot be read or is inconsistent."""


class AnalysisError(TracekitError):
    """An analysis that cannot be done on this run (no such phase, no GPU events, ...)."""
