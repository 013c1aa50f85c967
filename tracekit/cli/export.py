"""``tracekit export`` and ``tracekit validate-trace`` (export)."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracekit.cli.common import RUN_PATH, _claim, _load, _note_partial, cli
from tracekit.cli_errors import guarded
from tracekit.exporters import FORMATS as EXPORTERS  # the registry imports no writer
from tracekit.exporters import format_names
from tracekit.render.text import echo


def _flows_opt(value: str) -> tuple[str, ...]:
    parts = {p.strip() for p in value.split(",") if p.strip()}
    if parts <= {"none"}:
        return ()
    if "all" in parts:
        return ("launches", "collectives")
    bad = parts - {"launches", "collectives"}
    if bad:
        raise click.BadParameter(f"unknown flow kind(s) {', '.join(sorted(bad))} (launches, collectives, all, none)")
    return tuple(k for k in ("launches", "collectives") if k in parts)


@cli.command("export")
@click.argument("run_path", metavar="RUN", type=RUN_PATH)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Trace to write: " + ", ".join(f"{' or '.join(f.suffixes[:2])} ({f.title})" for f in EXPORTERS) + ".")
@click.option("--format", "fmt", type=click.Choice(format_names()), default=None,
              help="Output format [default: from the suffix of -o].")
@click.option("--phase", default=None, help="Only the time of this phase's instances (verify, draft, ...).")
@click.option("--cycles", default=None, help="With --phase: cycles A-B (inclusive) or one cycle N.")
@click.option("--ranks", "ranks_opt", default=None, help="Ranks to export: all, 3, 0,5 or 0-3,7 [default: all].")
@click.option("--window", default=None, help="START:END in ns relative to the run's first event (either side optional; 2ms, 500us also read).")
@click.option("--flows", "flows_opt", default="launches", show_default=True,
              help="Arrows: launches (launch -> its kernels), collectives (same collective across ranks), all, none; comma-separated.")
@click.option("--no-buckets", is_flag=True, help="Leave attribution buckets out of the phase slices (faster on big runs).")
@click.option("--outstanding", is_flag=True, help="Add a counter per rank of GPU work issued and not yet finished.")
@click.option("--full-ranks", "full_opt", default=None, metavar="RANKS",
              help="Perfetto: these ranks in full (0-7, 0,5, all), every other exported rank with its collective "
                   "kernels only [default: all in full].")
@click.option("--executor", "executor_opt", default="local", show_default=True, metavar="local|dask-local:N|dask://HOST:PORT",
              help="Perfetto: where the rank streams are written: this process, a Dask LocalCluster of N workers, or "
                   "a running Dask scheduler (docs/scale.md; pip install 'tracekit[dask]').")
@guarded
def export_cmd(run_path: str, output: str, fmt: str | None, phase: str | None, cycles: str | None,
               ranks_opt: str | None, window: str | None, flows_opt: str, no_buckets: bool, outstanding: bool,
               full_opt: str | None, executor_opt: str) -> None:
    """Write RUN as a Perfetto trace (all ranks on one timeline) or Chrome JSON.

    Perfetto traces are written rank by rank (one packet stream per rank, concatenated): memory is one
    rank's, not the run's.

    \b
    tracekit export run.parquet -o run.pftrace
    tracekit export run.parquet -o verify.pftrace --phase verify --cycles 10-20 --ranks 0,5
    tracekit export run.parquet -o run.json.gz --window 0:50ms
    tracekit export run/ -o big.pftrace --full-ranks 0-7 --flows collectives
    """
    from tracekit.executor import parse_executor
    from tracekit.export import export_events, format_of
    from tracekit.export.select import Selection, parse_cycles, parse_ranks, parse_window
    from tracekit.render.export import export_summary, open_hint

    try:
        spec = parse_executor(executor_opt)
        full = parse_ranks(full_opt) if full_opt is not None else None
        kind = format_of(output, fmt)
        sel = Selection(
            ranks=parse_ranks(ranks_opt) if ranks_opt is not None else None,  # None: all
            phase=phase,
            cycles=parse_cycles(cycles) if cycles is not None else None,
            window=parse_window(window) if window is not None else None,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if cycles is not None and phase is None:
        raise click.UsageError("--cycles needs --phase")
    if kind != "perfetto" and (full is not None or spec.kind != "local"):
        raise click.UsageError("--full-ranks and --executor are for the Perfetto export (.pftrace)")
    flows = _flows_opt(flows_opt)
    with _claim(output, [run_path]):
        if kind != "perfetto":
            r = _load(run_path)
            _note_partial(r)
            res = export_events(r.events, r.manifest, output, fmt=kind, selection=sel, flows=flows,
                                buckets=not no_buckets, outstanding=outstanding, source=run_path)
        else:
            res = _export_ranked(run_path, output, sel, flows, not no_buckets, outstanding, full, spec)
    for w in res.warnings:
        echo(f"tracekit: warning: {w}", err=True)
    echo(export_summary(res))
    echo(open_hint(res))


PROGRESS_MIN_EVENTS = 2_000_000  # an export of more events prints a line per rank on stderr


def _export_ranked(run_path: str, output: str, sel: Any, flows: tuple[str, ...], buckets: bool, outstanding: bool,
                   full: tuple[int, ...] | None, spec: Any) -> Any:
    """The Perfetto export of a run on disk, rank by rank (``export_run``), with a line per rank on stderr
    for a long one."""
    from tracekit.cli.ranked import opened, progress, whole_run_note
    from tracekit.export import export_run
    from tracekit.render.store import outdated_line
    from tracekit.store import Run, empty_events, open_ranked

    rr = open_ranked(run_path)
    if rr is None:  # read whole (a URL prefix, an older file): as the other commands
        r = _load(run_path)
        _note_partial(r)
        whole_run_note(spec, "export", "a URL prefix, or a run written before kind / category were codes")
        from tracekit.export import export_events

        return export_events(r.events, r.manifest, output, selection=sel, flows=flows, buckets=buckets,
                             outstanding=outstanding, source=run_path, full_ranks=full)
    if rr.outdated is not None:
        echo(outdated_line(rr.outdated), err=True)
    _note_partial(Run(events=empty_events(), manifest=rr.manifest, path=run_path))
    n_events = rr.rows

    say = progress()

    def each_rank(done: int, total: int, rank: int) -> None:
        if n_events >= PROGRESS_MIN_EVENTS and total > 1:
            say(f"export: rank {rank} written, {done}/{total}")

    with opened(spec, "export") as ex:
        return export_run(run_path, output, selection=sel, flows=flows, buckets=buckets, outstanding=outstanding,
                          full_ranks=full, executor=ex, progress=each_rank, ranked=rr)


@cli.command("validate-trace")
@click.argument("trace", metavar="FILE", type=RUN_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def validate_trace_cmd(trace: str, as_json: bool) -> None:
    """Check an exported trace (.pftrace or Chrome JSON) for what breaks viewers; exit 1 on problems."""
    import json as _json

    from tracekit.export.validate import validate_trace
    from tracekit.render.export import check_doc, check_lines

    chk = validate_trace(trace)
    if as_json:
        echo(_json.dumps(check_doc(chk), indent=2, ensure_ascii=False))
    else:
        for line in check_lines(chk):
            echo(line)
    if not chk.ok:
        sys.exit(1)
