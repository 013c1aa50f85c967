"""What every command shares: the ``tracekit`` group, loading a run, the table console,
claiming an output, the partial-run lines and the forensic JSON printer."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from tracekit import __version__
from tracekit.cli_errors import _State
from tracekit.render.text import echo

if TYPE_CHECKING:
    from tracekit.store import RankedRun, Run


# The type of every input path: tracekit opens and checks each input itself, so a missing, unreadable
# or special file is the reader's one line and exit 1 (click's own checks would make it a usage error).
RUN_PATH = click.Path(dir_okay=True, readable=False)  # a run file or a shard directory (or a log, a trace)
INPUT_FILE = click.Path(dir_okay=False, readable=False)  # a file, never a directory (rules, patterns)


# command -> the module that defines it: a command's module is imported when that command runs
# (or when --help lists them all), so `tracekit ingest` does not import export's or capture's
# modules. tests/test_cli_startup.py checks this table against the commands the modules define.
COMMAND_MODULES: dict[str, str] = {
    "ingest": "tracekit.cli.ingest", "info": "tracekit.cli.ingest",
    "capture": "tracekit.cli.capture",
    "attribute": "tracekit.cli.analyses", "gap": "tracekit.cli.analyses",
    "export": "tracekit.cli.export", "validate-trace": "tracekit.cli.export",
    "spec": "tracekit.cli.forensics", "align": "tracekit.cli.forensics", "upgrade": "tracekit.cli.forensics", "diff": "tracekit.cli.forensics",
    "ranks": "tracekit.cli.forensics",
    "report": "tracekit.cli.report", "merge": "tracekit.cli.report",
    "sol": "tracekit.cli.sol",
    "logs": "tracekit.cli.logs",
    # the SGLang integration's commands live beside it (no torch or sglang import at load)
    "sglang-capture": "tracekit.collectors.sglang.commands", "sglang-launch": "tracekit.collectors.sglang.commands",
    "sglang-bootstrap": "tracekit.collectors.sglang.commands", "sglang-check": "tracekit.collectors.sglang.commands",
}


class _Commands(click.Group):
    """The ``tracekit`` group: loads a command's module on first use (COMMAND_MODULES)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMAND_MODULES))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            load_commands(COMMAND_MODULES[cmd_name])
        return super().get_command(ctx, cmd_name)


def load_commands(module: str) -> None:
    """Import a command module: it registers its commands on ``cli`` (``@cli.command``), or
    lists them in ``COMMANDS`` (the SGLang integration's module, which does not know ``cli``)."""
    import importlib

    mod = importlib.import_module(module)
    for cmd in getattr(mod, "COMMANDS", ()):
        if cmd.name not in cli.commands:
            cli.add_command(cmd)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """Profile and explain speculative decoding (draft / verify / draft-extend) on every rank.

    \b
    tracekit capture --ranks all                  # built-in workload, every rank
    tracekit attribute run.parquet                # where the verify time went
    tracekit export run.parquet -o run.pftrace    # open in ui.perfetto.dev

    \b
    Exit status: 0 done; 1 bad data or an error (one line; --debug for a traceback);
    2 usage error, or an output that names an input; 3 partial run (written, but some rank
    has no data: one line says which); 130 interrupted (Ctrl-C; 143 SIGTERM, 129 SIGHUP: the output left as it
    was, its lock and temp files removed). A stdout closed by its
    reader (| head) ends quietly with 1.
    Outputs: the parent directory must exist (tracekit creates none you did not name);
    every output is written to a temp file beside it and renamed when complete, under
    OUTPUT.lock (a second writer of the same output is refused, naming the pid).
    """
    _State.debug = debug
    from tracekit import settings
    from tracekit.errors import ConfigError

    try:
        settings.current()  # the TRACEKIT_* settings, checked once before the command runs
    except ConfigError as exc:
        raise click.UsageError(exc.message) from None


def _load(path: str, columns: list[str] | None = None) -> Run:
    """``tracekit.store.load_run``; one line on stderr when the run is of an older finalize version."""
    from tracekit.render.store import outdated_line
    from tracekit.store import load_run

    run = load_run(path, columns)
    if run.outdated is not None:
        echo(outdated_line(run.outdated), err=True)
    return run


PIPED_TABLE_WIDTH = 200  # piped output: wide enough that no header or number is cut (tests: 80 columns)


def _table_console() -> Any:
    """The console of a command that prints tables: the terminal's width, or wide when piped."""
    from tracekit.render.attribute import make_console

    return make_console(PIPED_TABLE_WIDTH)


@contextmanager
def _claim(out: str, inputs: Iterable[str] = (), *, runs: bool = True) -> Iterator[None]:
    """Every command that writes: the output rule (tracekit.outputs), then its lock while writing."""
    from tracekit.outputs import claimed_output

    with claimed_output(out, inputs, runs=runs) as lock:
        if lock.stale is not None:
            echo(f"tracekit: note: replaced a stale lock {lock.path} (pid {lock.stale} no longer runs)", err=True)
        yield


def _note_partial(*runs: Run | RankedRun | None) -> None:
    """One stderr line per way each run is not whole (missing ranks, interrupted capture), from the
    manifest read with its events (``_load``: one read of each file)."""
    from tracekit.render.run_state import run_state_lines

    for run in runs:
        if run is not None:
            for line in run_state_lines(str(run.path), run.manifest):
                echo(f"tracekit: warning: {line}", err=True)


def _forensic_json(doc: Any) -> None:
    import json

    echo(json.dumps(doc, indent=2, sort_keys=False, allow_nan=False))


def rank_view_options(fn: Any) -> Any:
    """``--ranks SEL`` and ``--all-ranks`` of the commands that print one row per rank: the command
    receives ``view`` (``render.rank_fold.RankView``). Rows only: the analysis uses every rank."""
    import functools

    @click.option("--ranks", "ranks_sel", default=None, metavar="SEL",
                  help="Show the rows of these ranks only: all, 3, 0,5 or 0-7,12 (the analysis still uses every rank: "
                       "collectives are matched over all of them).")
    @click.option("--all-ranks", "all_ranks", is_flag=True,
                  help="Print every rank's row (more than 16 rows are otherwise folded into median / p90 / mean / "
                       "min / max and the worst ranks).")
    @functools.wraps(fn)
    def wrapped(*args: Any, ranks_sel: str | None, all_ranks: bool, **kwargs: Any) -> Any:
        from tracekit.ranklist import parse_rank_list
        from tracekit.render.rank_fold import RankView

        try:
            sel = None if ranks_sel is None else parse_rank_list(ranks_sel)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--ranks") from None
        return fn(*args, view=RankView(sel, all_ranks), **kwargs)

    return wrapped
