"""``tracekit export`` and ``tracekit validate-trace`` (export)."""

from __future__ import annotations

import sys

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
@guarded
def export_cmd(run_path: str, output: str, fmt: str | None, phase: str | None, cycles: str | None,
               ranks_opt: str | None, window: str | None, flows_opt: str, no_buckets: bool, outstanding: bool) -> None:
    """Write RUN as a Perfetto trace (all ranks on one timeline) or Chrome JSON.

    \b
    tracekit export run.parquet -o run.pftrace
    tracekit export run.parquet -o verify.pftrace --phase verify --cycles 10-20 --ranks 0,5
    tracekit export run.parquet -o run.json.gz --window 0:50ms
    """
    from tracekit.export import export_events, format_of
    from tracekit.export.select import Selection, parse_cycles, parse_ranks, parse_window
    from tracekit.render.export import export_summary, open_hint

    try:
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
    with _claim(output, [run_path]):
        r = _load(run_path)
        _note_partial(r)
        res = export_events(r.events, r.manifest, output, fmt=kind, selection=sel, flows=_flows_opt(flows_opt),
                            buckets=not no_buckets, outstanding=outstanding, source=run_path)
    for w in res.warnings:
        echo(f"tracekit: warning: {w}", err=True)
    echo(export_summary(res))
    echo(open_hint(res))


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
