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


def _forensic_json(doc: Any) -> None:
    import json

    click.echo(json.dumps(doc, indent=2, sort_keys=False, allow_nan=False))


@cli.command("spec")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("--baseline", "baseline", type=click.Path(dir_okay=True), help="A plain-decode run (speculation off) for the decode step time.")
@click.option("--baseline-tps", type=click.FloatRange(min=0, min_open=True), help="Plain-decode tok/s per sequence instead of a baseline run.")
@click.option("--target-tps", type=click.FloatRange(min=0, min_open=True), default=None, help="Target tok/s per sequence (e.g. 150).")
@click.option("--rank", type=int, default=None, help="Use this rank's cycles (default: the slowest rank).")
@click.option("--draft-tokens", type=click.IntRange(min=0), default=None, help="k for the chain model (default: verify tokens per request - 1).")
@click.option("--accept-len", type=click.FloatRange(min=0), default=None, help="Accepted draft tokens per cycle, bonus excluded, when the trace lacks them.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def spec_cmd(
    run: str,
    baseline: str | None,
    baseline_tps: float | None,
    target_tps: float | None,
    rank: int | None,
    draft_tokens: int | None,
    accept_len: float | None,
    as_json: bool,
) -> None:
    """What speculation pays: tokens/cycle, tok/s, break-even accept length, accept rate for a target."""
    from rich.console import Console

    from tracekit.analyzers.spec import spec_report  # type: ignore[import-not-found]
    from tracekit.errors import AnalysisError
    from tracekit.render import spec as render_spec
    from tracekit.store import read_run

    if baseline is not None and baseline_tps is not None:
        raise click.UsageError("give --baseline or --baseline-tps, not both")
    events = read_run(run)
    base = read_run(baseline) if baseline is not None else None
    try:
        table, ctx = spec_report(
            events,
            baseline=base,
            baseline_tps=baseline_tps,
            target_tps=target_tps,
            rank=rank,
            draft_tokens=draft_tokens,
            accept_len=accept_len,
        )
    except AnalysisError as exc:
        if exc.path is None:
            exc.path = baseline if "baseline" in exc.message else run
        raise type(exc)(exc.message, path=exc.path, rank=exc.rank) from None
    if as_json:
        _forensic_json(render_spec.to_json(table, ctx))
    else:
        render_spec.render(table, ctx, Console())


@cli.command("align")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Aligned run.parquet to write.")
@click.option("--align", "method", type=click.Choice(["collectives", "none", "auto"]), default="collectives", show_default=True,
              help="collectives: fit per-rank clock offsets from allreduce ends; auto: collectives only when ranks ran on several hosts.")
@guarded
def align_cmd(run: str, output: str, method: str) -> None:
    """Put every rank on rank 0's clock (offsets and residual go to the manifest; raw times stay recoverable)."""
    from tracekit.analyzers.align import align_events  # type: ignore[import-not-found]
    from tracekit.errors import AnalysisError
    from tracekit.store import load_run, write_run

    r = load_run(run)
    try:
        events, man = align_events(r.events, r.manifest, None if method == "auto" else method)
    except AnalysisError as exc:
        raise AnalysisError(exc.message, path=run, rank=exc.rank) from None
    write_run(events, output, man)
    clock = man["clock"]
    if clock.get("align") == "collectives":
        offs = ", ".join(f"rank {k}: {int(v):+d} ns" for k, v in clock["offsets_ns"].items())
        res = clock["residual_ns"]
        click.echo(
            f"aligned {len(clock['offsets_ns'])} ranks on {clock['collectives']} collectives "
            f"({clock['rejected']} rejected): {offs}; residual median {res['median']} ns, max {res['max']} ns -> {output}"
        )
    else:
        click.echo(f"no alignment (ranks share one host clock) -> {output}")


@cli.command("ranks")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("--min-skew-us", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="A collective has a last rank only when arrivals spread at least this much.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def ranks_cmd(run: str, min_skew_us: float, as_json: bool) -> None:
    """Stragglers: per rank, how often it arrived last at a collective, the wait it caused, and why."""
    from rich.console import Console

    from tracekit.analyzers.stragglers import rank_state, stragglers  # type: ignore[import-not-found]
    from tracekit.render import ranks as render_ranks
    from tracekit.store import load_run

    r = load_run(run)
    view = stragglers(r.events, round(min_skew_us * 1000))
    state = rank_state(r.manifest)
    if as_json:
        _forensic_json(render_ranks.to_json(view, state))
    else:
        render_ranks.render(view, state, Console())

# --- sglang (integration) ---


def main() -> None:
    cli(prog_name="tracekit")


if __name__ == "__main__":
    main()
