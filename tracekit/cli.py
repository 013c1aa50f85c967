"""The tracekit command line: one thin module over the library.

Usage errors exit 2 (click), bad data exits 1 with one line naming the file and
rank, no traceback unless --debug.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from tracekit import __version__
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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """Profile and explain speculative decoding (draft / verify / draft-extend) on every rank.

    \b
    tracekit capture --ranks all                  # built-in workload, every rank
    tracekit attribute run.parquet                # where the verify time went
    tracekit export run.parquet -o run.pftrace    # open in ui.perfetto.dev
    """
    _State.debug = debug


# Each command section below belongs to one part of the project; add commands
# inside your own section only.

# --- ingest / info (foundation) ---

# --- capture (collectors) ---

# --- attribute / gap (analyzers) ---

# --- export / validate-trace (export) ---

# --- diff / spec / ranks (forensics) ---

# --- sglang (integration) ---


def main() -> None:
    cli(prog_name="tracekit")


if __name__ == "__main__":
    main()
