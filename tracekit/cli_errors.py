"""Error policy shared by every tracekit command: bad data is one line and exit 1.

``guarded`` turns a TracekitError (and OS errors on inputs) into
``tracekit: error: <file>: rank <r>: <what>`` on stderr and exit status 1; with
``tracekit --debug`` the traceback is shown instead. Usage errors stay click's (exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from tracekit.errors import TracekitError

F = TypeVar("F", bound=Callable[..., Any])


class _State:
    debug = False


def _fail(msg: str) -> None:
    click.echo(f"tracekit: error: {msg}", err=True)
    sys.exit(1)


def guarded(fn: F) -> F:
    """Turn TracekitError (and OS errors on inputs) into one line and exit 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TracekitError as exc:
            if _State.debug:
                raise
            _fail(exc.one_line())
        except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            if _State.debug:
                raise
            _fail(f"{exc.filename}: {exc.strerror}")
        except KeyboardInterrupt:
            click.echo("tracekit: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


__all__ = ["F", "_State", "guarded"]
