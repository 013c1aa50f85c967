"""The one line a user reads for a TracekitError: ``<file>: rank <r>: <what>``.

The error's side (A/B of a two-run command) is not printed: the command already turned it
into the file it names (:func:`tracekit.errors.side_path`).
"""

from __future__ import annotations

from tracekit.errors import TracekitError


def error_line(exc: TracekitError) -> str:
    where = []
    if exc.path is not None:
        where.append(str(exc.path))
    if exc.rank is not None:
        where.append(f"rank {exc.rank}")
    prefix = ": ".join(where)
    return f"{prefix}: {exc.message}" if prefix else exc.message


__all__ = ["error_line"]
