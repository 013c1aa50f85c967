"""The analysis commands' ``--executor`` (``attribute``, ``ranks``, ``gap``): which read a run rank by
rank (``analyzers.ranked.choose``: the rule of docs/scale.md), the executor opened for the command,
progress on stderr, the whole-run read where rank by rank does not apply."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from tracekit.render.text import echo

if TYPE_CHECKING:
    from tracekit.executor import DaskExecutor, ExecutorSpec, LocalExecutor
    from tracekit.store import RankedRun, Run

F = TypeVar("F", bound=Callable[..., Any])

PROGRESS_EVERY_S = 0.5  # at most this often a progress line (and each pass's last)


def executor_option(fn: F) -> F:
    """``--executor local|dask-local:N|dask://HOST:PORT`` of an analysis command."""
    return click.option(
        "--executor", "executor_opt", default="local", show_default=True, metavar="local|dask-local:N|dask://HOST:PORT",
        help="Where the run's ranks are analysed, one rank per task: this process, a Dask LocalCluster of N workers, "
             "or a running Dask scheduler. Sharded runs and large ones are read rank by rank with any executor "
             "(docs/scale.md; pip install 'tracekit[dask]').")(fn)


def spec_of(executor_opt: str) -> ExecutorSpec:
    from tracekit.executor import parse_executor

    try:
        return parse_executor(executor_opt)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def ranked_run(path: str, spec: ExecutorSpec) -> RankedRun | None:
    """The run opened rank by rank when the rule says so (its outdated line on stderr), else None."""
    from tracekit.analyzers.ranked import choose
    from tracekit.render.store import outdated_line

    rr = choose(path, spec.kind)
    if rr is not None and rr.outdated is not None:
        echo(outdated_line(rr.outdated), err=True)
    return rr


@contextmanager
def opened(spec: ExecutorSpec, command: str) -> Iterator[LocalExecutor | DaskExecutor]:
    from tracekit.executor import open_executor

    if spec.kind != "local":
        echo(f"{command}: starting executor {spec}", err=True)
    try:
        ex = open_executor(spec)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        yield ex
    finally:
        ex.close()


def progress() -> Callable[[str], None]:
    """A progress printer on stderr: a line per rank done, at most every ``PROGRESS_EVERY_S`` (and the last
    of each pass, whose line ends ``N/N``)."""
    last = [0.0]

    def say(line: str) -> None:
        done, _, total = line.rpartition(", ")[2].partition("/")
        now = time.monotonic()
        if done == total or now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            echo(line, err=True)

    return say


def load_whole(path: str, rr: RankedRun | None) -> Run:
    """The run in one table: ``_load`` (with its outdated line), or without that line again when the run
    was opened rank by rank first (``ranked_run`` printed it)."""
    from tracekit.cli.common import _load

    if rr is None:
        return _load(path)
    from tracekit.store import load_run

    return load_run(path)


def whole_run_note(spec: ExecutorSpec, command: str, why: str) -> None:
    """Where rank by rank does not apply: one line when an executor was asked for."""
    if spec.kind != "local":
        echo(f"tracekit: note: {command} reads this run whole, in this process ({why})", err=True)


__all__ = ["executor_option", "load_whole", "opened", "progress", "ranked_run", "spec_of", "whole_run_note"]
