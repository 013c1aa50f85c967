"""``tracekit logs``: engine logs and metrics snapshots as a log run (docs/logs.md)."""

from __future__ import annotations

import click

from tracekit.cli.common import INPUT_FILE, RUN_PATH, cli
from tracekit.cli_errors import guarded


@cli.command("logs")
@click.argument("files", nargs=-1, required=True, type=RUN_PATH)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Log run (.parquet) to write.")
@click.option("--pattern", "patterns", multiple=True,
              help="A user pattern, e.g. 'Target verify: {verify_ms:f} ms/cyc' (repeatable; d int, f number, s word).")
@click.option("--patterns", "pattern_file", type=INPUT_FILE, help="A file of user patterns, one a line.")
@click.option("--engine-version", default=None, help="The engine version, when the log does not print it (e.g. 'sglang 0.5.9').")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as a JSON document.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary.")
@guarded
def logs_cmd(files: tuple[str, ...], output: str, patterns: tuple[str, ...], pattern_file: str | None,
             engine_version: str | None, as_json: bool, quiet: bool) -> None:
    """Read SGLang / vLLM server logs, Prometheus /metrics snapshots and user-pattern lines into a log run.

    \b
    Each matched line is a row (its time, DP/TP/EP tags, engine, grammar version, every field
    typed); lines that match nothing are counted and the first few shown. The run is read by
    info, spec, diff and report. Two or more metrics snapshots (curl URL/metrics > t1.prom) give
    one interval per consecutive pair.
    """
    from tracekit.cli.log_inputs import run_logs

    run_logs(files, output, patterns, pattern_file, engine_version=engine_version, as_json=as_json, quiet=quiet)
