"""``tracekit ingest`` and ``tracekit info`` (foundation)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli.common import (
    INPUT_FILE,
    RUN_PATH,
    _claim,
    _load,
    _table_console,
    cli,
    rank_view_options,
)
from tracekit.cli.log_inputs import is_log_input, log_options, looks_like_log
from tracekit.cli_errors import guarded
from tracekit.render.text import echo

if TYPE_CHECKING:
    from collections.abc import Callable

    from tracekit.analyzers.ranked_light import RunInfo
    from tracekit.finalize.categories import Rule
    from tracekit.render.rank_fold import RankView
    from tracekit.store import RankedRun


@cli.command()
@click.argument("traces", nargs=-1, required=False)
@click.option("-o", "--output", required=True, type=click.Path(),
              help="run.parquet to write; a directory (DIR/, or any with --rank-files) is written as a sharded run: "
                   "one rank-NNNNN.parquet per rank.")
@click.option("--allow-missing-ranks", is_flag=True, help="Ingest even if some ranks of the world have no trace.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="fail: stop at the first unreadable file; skip: ingest the good files, report the rest.")
@click.option("--categories", "categories_file", type=INPUT_FILE,
              help="TOML file of category rules tried before the built-in table.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@click.option("--align", "align_method", type=click.Choice(["auto", "collectives", "none"]), default="auto",
              show_default=True, help="Clock alignment across ranks: fit offsets from collective ends, or none. "
              "auto: collectives when the ranks ran on more than one host.")
@click.option("--executor", "executor_opt", default="local", show_default=True, metavar="local|dask-local:N|dask://HOST:PORT",
              help="Where files are parsed and ranks finalized: this process, a Dask LocalCluster of N workers, or a "
                   "running Dask scheduler (docs/scale.md; pip install 'tracekit[dask]').")
@click.option("--rank-files", "rank_files", multiple=True, metavar="GLOB",
              help="This node's rank traces, written as shards into the directory -o (shared by the nodes, each "
                   "adding its ranks); `tracekit merge DIR` later says which ranks are still missing.")
@guarded
def ingest(traces: tuple[str, ...], output: str, allow_missing_ranks: bool, on_error: str,
           categories_file: str | None, quiet: bool, align_method: str, executor_opt: str,
           rank_files: tuple[str, ...]) -> None:
    """Ingest torch-profiler (Kineto) traces into one run.parquet (or a sharded run directory).

    TRACES are files (.json / .json.gz), globs or directories: SGLang's
    per-rank *-TP-<r>*.trace.json.gz, its merged-*.trace.json.gz, or any
    torch.profiler export_chrome_trace output. Engine logs and /metrics snapshots
    are written as a log run (`tracekit logs`, which also takes --pattern).
    """
    import time
    from pathlib import Path

    from tracekit.executor import parse_executor

    try:
        spec = parse_executor(executor_opt)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    traces = (*traces, *rank_files)
    if not traces:
        raise click.UsageError("name the traces to ingest (TRACES or --rank-files GLOB)")
    logs = [t for t in traces if looks_like_log(t)]
    if logs:  # engine logs / metrics snapshots: a log run, as `tracekit logs` writes it
        if len(logs) != len(traces) or rank_files:
            raise click.UsageError("engine logs and traces cannot be ingested together: `tracekit logs LOG... -o "
                                   "logs.parquet` for the logs, `tracekit ingest TRACES -o run.parquet` for the traces")
        from tracekit.cli.log_inputs import run_logs

        run_logs(logs, output, (), None, quiet=quiet)
        return
    from tracekit.urls import is_url

    # a directory, or a URL prefix (object storage: a run there is always sharded)
    sharded = bool(rank_files) or is_url(output) or output.endswith(("/", os.sep)) or Path(output).is_dir()
    from tracekit.finalize.categories import load_rules

    rules = load_rules(categories_file) if categories_file else None
    err: Any = None
    progress: Any = None
    if not quiet:  # rich only when something is printed
        from tracekit.render.console import SafeConsole as Console
        from tracekit.render.ingest import ByteProgress

        err = Console(stderr=True, soft_wrap=True)  # never break file paths
        progress = ByteProgress(err)
    t0 = time.perf_counter()
    if sharded:
        # --rank-files: this node's ranks only, nothing to fit the clock against (the merge aligns hosts)
        _ingest_sharded(traces, output, spec, allow_missing_ranks or bool(rank_files), on_error, progress,
                        rules, err, strict=not rank_files,
                        align="none" if rank_files else None if align_method == "auto" else align_method)
        return
    from tracekit.ingest.discover import discover

    align = None if align_method == "auto" else align_method
    inputs = discover(traces, [])
    with _claim(output, [*traces, *map(str, inputs)], runs=False):
        try:
            res = _ingest_file(traces, inputs, spec, allow_missing_ranks, on_error, progress, rules, Path(output), err,
                               align)
        finally:
            if progress is not None:
                progress.stop()
    out, man = res.out_dir, res.manifest
    if err is not None:
        from tracekit.render.ingest import print_ingest_summary

        print_ingest_summary(err, out, res.rows, man, time.perf_counter() - t0)
    from tracekit.render.run_state import resolution_line

    line = resolution_line(res.coarse)
    if line:
        echo(f"tracekit: warning: {out}: {line}", err=True)
    _data_warnings(str(out), res.joins, man)
    from tracekit.manifest import typed

    if typed(man).missing_ranks:
        from tracekit.cli_errors import EXIT_PARTIAL

        sys.exit(EXIT_PARTIAL)


def _ingest_file(traces: tuple[str, ...], inputs: list[Any], spec: Any, allow_missing_ranks: bool, on_error: Any,
                 progress: Any, rules: Any, output: Any, err: Any, align: str | None) -> Any:
    """``-o run.parquet``: the run written, aligned (``align``; None: auto), as a ``ShardedIngest``. In this
    process whole (``local`` while ``ingest.plan.ingests_whole``: the cheapest), else rank by rank through
    the executor, staged beside ``output`` and streamed into it (``sharded.ingest_file``: memory bounded
    by the ranks in flight). Both write the same table and manifest."""
    from tracekit.ingest.plan import ingests_whole
    from tracekit.ingest.sharded import ShardedIngest, ingest_file

    if spec.kind == "local" and ingests_whole(inputs):
        from tracekit.analyzers.align import align_events
        from tracekit.analyzers.joins import join_problems
        from tracekit.ingest import ingest_traces
        from tracekit.resolution import time_resolution
        from tracekit.store import write_run

        run = ingest_traces(traces, allow_missing_ranks=allow_missing_ranks, on_error=on_error,
                            progress=progress, rules=rules)
        events, man = align_events(run.events, run.manifest, align)
        out = write_run(events, output, man)
        return ShardedIngest(out_dir=out, manifest=man, rows=events.height, shards=1,
                             coarse=time_resolution(events), joins=join_problems(events))
    ex = _open(spec, err)
    try:
        return ingest_file(traces, output, ex, allow_missing_ranks=allow_missing_ranks, on_error=on_error,
                           progress=progress, rules=rules, align=align)
    finally:
        ex.close()


def _open(spec: Any, err: Any) -> Any:
    from tracekit.executor import open_executor

    if err is not None and spec.kind != "local":
        err.print(f"ingest: starting executor {spec}", highlight=False)
    try:
        return open_executor(spec)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _ingest_sharded(traces: tuple[str, ...], out: Any, spec: Any, allow_missing_ranks: bool, on_error: Any,
                    progress: Any, rules: Any, err: Any, *, strict: bool, align: str | None) -> None:
    """``-o DIR`` (or a URL prefix): the shards written there (a directory is created when missing), aligned
    as ``align`` says, not merged."""
    from contextlib import nullcontext
    from pathlib import Path

    from tracekit.errors import OutputError
    from tracekit.ingest.sharded import SHARD_NAME, ingest_sharded
    from tracekit.outputs import OutputLock
    from tracekit.urls import is_url

    if not is_url(out):
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise OutputError("is a file: a sharded run is a directory (name a directory, or a .parquet file for one "
                              "run)", path=str(out))
        out.mkdir(parents=True, exist_ok=True)
    # an object store has no lock files: one writer per prefix is the user's to keep
    lock: Any = nullcontext() if is_url(out) else OutputLock(out).acquire()
    try:
        ex = _open(spec, err)
        try:
            res = ingest_sharded(traces, out, ex, allow_missing_ranks=allow_missing_ranks, on_error=on_error,
                                 progress=progress, rules=rules, align=align)
        finally:
            ex.close()
            if progress is not None:
                progress.stop()
    finally:
        if not is_url(out):
            lock.release()
    from tracekit.manifest import typed

    man = typed(res.manifest)
    click.echo(f"wrote {res.shards} rank shard(s) ({res.rows} events) into {str(out).rstrip('/')}/ "
               f"({SHARD_NAME.format(rank=0)} ...): "
               f"a sharded run every command reads; `tracekit merge {out} -o run.parquet` makes one file (and aligns "
               "ranks of several hosts)")
    if man.missing_ranks and strict:
        from tracekit.cli_errors import EXIT_PARTIAL

        sys.exit(EXIT_PARTIAL)


@cli.command()
@click.argument("run_path", metavar="RUN", type=RUN_PATH)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of tables.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0), help="Unmatched kernel names to list.")
@click.option("--categories", "categories_file", type=INPUT_FILE,
              help="Also use these category rules when listing unmatched kernels.")
@log_options
@rank_view_options
@guarded
def info(run_path: str, as_json: bool, top: int, categories_file: str | None, view: RankView, patterns: tuple[str, ...] = (),
         pattern_file: str | None = None) -> None:
    """Ranks, devices, versions, per-rank kernel/busy/span/comm time, manifest differences.

    RUN may be a log run (tracekit logs) or an engine log file: what the log covers, its
    grammar versions, intervals, graph use, batch and tokens per request.
    """
    if is_log_input(run_path):
        if view.ranks is not None or view.all_ranks:
            raise click.UsageError("--ranks and --all-ranks are for trace runs, not logs")
        from tracekit.cli.log_inputs import log_info_cmd

        log_info_cmd(run_path, patterns, pattern_file, as_json)
        return
    from tracekit.cli.ranked import progress, ranked_run, spec_of
    from tracekit.finalize.categories import load_rules
    from tracekit.summary import info_document

    rules = load_rules(categories_file) if categories_file else None
    got, manifest = _info_of(run_path, rules, progress(), ranked_run(run_path, spec_of("local")))
    doc = info_document(got.parts, manifest, top=top)
    if view.ranks is not None and as_json:
        from tracekit.ranklist import format_rank_list
        from tracekit.summary import info_rank_summary

        doc["ranks"] = [r for r in doc["ranks"] if view.shows(r["rank"])]
        doc["rank_summary"] = info_rank_summary(doc["ranks"], manifest)
        doc["ranks_selected"] = format_rank_list(view.ranks)
    if as_json:
        import json

        echo(json.dumps(doc, indent=2, default=str))
        _data_warnings(run_path, got.joins, manifest)
        return

    from tracekit.analyzers.rank_summary import int_hosts
    from tracekit.env_view import environment_rows
    from tracekit.render.info import render_info

    render_info(doc, _table_console(), env_rows=environment_rows(manifest), view=view, hosts=int_hosts(manifest))
    from tracekit.render.run_state import resolution_line

    line = resolution_line(got.coarse)
    if line:
        echo(f"tracekit: warning: {run_path}: {line}", err=True)
    _data_warnings(run_path, got.joins, manifest)


def _info_of(run_path: str, rules: list[Rule] | None, say: Callable[[str], None],
             rr: RankedRun | None) -> tuple[RunInfo, dict[str, Any]]:
    """``info``'s ``RunInfo`` and manifest: rank by rank where ``rr`` (``analyzers.ranked.choose``'s rule:
    a shard directory, a large one-file run), else from the whole table of info's columns."""
    from tracekit.analyzers.ranked_light import RunInfo, run_info

    if rr is not None:  # progress on stderr, a line per rank at most every 0.5 s
        from tracekit.executor import LocalExecutor

        return run_info(rr, LocalExecutor(), rules, say), dict(rr.manifest)
    from tracekit.analyzers.joins import join_problems
    from tracekit.resolution import time_resolution
    from tracekit.summary import INFO_COLUMNS, info_parts

    run = _load(run_path, columns=list(INFO_COLUMNS))
    return RunInfo(info_parts(run.events, rules), time_resolution(run.events), join_problems(run.events)), run.manifest


def _data_warnings(path: str, joins: list[Any], manifest: dict[str, Any]) -> None:
    """``ingest`` and ``info``: one warning line per reason ingest left events out and per kind of
    GPU event that joined no launch (``analyzers.joins.join_problems``; never a silently wrong number)."""
    from tracekit.render.run_state import dropped_lines, join_lines

    for line in [*dropped_lines(path, manifest), *join_lines(path, joins)]:
        echo(f"tracekit: warning: {line}", err=True)
