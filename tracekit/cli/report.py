"""``tracekit report`` (report) and ``tracekit merge`` (reliability: partial runs)."""

from __future__ import annotations

import sys

import click

from tracekit.cli import ranked as rank_cli
from tracekit.cli.common import RUN_PATH, _claim, cli
from tracekit.cli.log_inputs import is_log_input, log_options
from tracekit.cli_errors import guarded
from tracekit.render.text import echo


@cli.command("report")
@click.argument("run", type=RUN_PATH)
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="HTML file to write (self-contained: opens offline).")
@click.option("--b-run", type=RUN_PATH, default=None, help="Compare with this run: plots side by side and the diff table.")
@click.option("--png-dir", type=click.Path(file_okay=False), default=None, help="Also write every plot as PNG here (needs Chrome or Chromium).")
@click.option("--target-tps", type=click.FloatRange(min=0, min_open=True), default=None, help="Target tok/s per sequence for the speculation plot.")
@log_options
@rank_cli.executor_option
@guarded
def report_cmd(run: str, output: str, b_run: str | None, png_dir: str | None, target_tps: float | None,
               patterns: tuple[str, ...] = (), pattern_file: str | None = None, executor_opt: str = "local") -> None:
    """One HTML page of plots of RUN: buckets, time vs sequence length, cycles, skew, gap, speculation, facts.

    RUN (and --b-run) may be log runs or engine log files: throughput and accept length against
    tokens per request, what the logs cover, and the binned diff of the two.
    """
    from tracekit.render.report.summary import report_lines

    run_log = is_log_input(run)
    if run_log or (b_run is not None and is_log_input(b_run)):
        if not run_log or (b_run is not None and not is_log_input(b_run)):
            raise click.UsageError("report of a log against a captured run is not supported: give two logs or two runs")
        from tracekit.cli.log_inputs import log_report_cmd

        with _claim(output, [run, *([b_run] if b_run else [])]):
            res = log_report_cmd(run, b_run, output, png_dir, patterns, pattern_file)
        for line in report_lines(res):
            echo(line)
        return
    from tracekit.render.report import build_report
    from tracekit.render.store import outdated_line

    spec = rank_cli.spec_of(executor_opt)
    with _claim(output, [run, *([b_run] if b_run else [])]), rank_cli.opened(spec, "report") as ex:
        res = build_report(run, output, b_path=b_run, png_dir=png_dir, target_tps=target_tps, executor=ex,
                           kind=spec.kind, say=rank_cli.progress(),
                           whole=lambda why: rank_cli.whole_run_note(spec, "report", why))
    for note in res.outdated:
        echo(outdated_line(note), err=True)
    for line in report_lines(res):
        echo(line)


@cli.command("merge")
@click.argument("shard_dir", metavar="DIR", type=click.Path(file_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="run.parquet to write.")
@guarded
def merge_cmd(shard_dir: str, output: str) -> None:
    """Merge a capture's shard directory (DIR/rank-*.parquet) into one run file.

    A capture that was aborted, or whose launcher died, leaves its per-rank shards in
    RUN.d/; this merges them (DIR is left as it is). Exit 3 when ranks are missing.
    """
    from tracekit.cli_errors import EXIT_PARTIAL
    from tracekit.manifest import typed
    from tracekit.render.run_state import missing_line
    from tracekit.shard_merge import merge_shards
    from tracekit.store import read_manifest

    with _claim(output, [shard_dir]):
        merge_shards(shard_dir, output, {"merged_by": "tracekit merge", "merged_from": shard_dir})
    man = read_manifest(output)
    n = len(typed(man).ranks)
    echo(f"merged {n} shard(s) from {shard_dir} into {output} (the shards are left in {shard_dir})")
    line = missing_line(output, man)
    if line:
        echo(f"tracekit: warning: {line}", err=True)
        sys.exit(EXIT_PARTIAL)
