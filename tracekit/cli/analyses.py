"""``tracekit attribute`` and ``tracekit gap`` (analyzers)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from tracekit.cli.common import RUN_PATH, _load, _note_partial, cli, rank_view_options
from tracekit.cli.log_inputs import is_log_input, log_options
from tracekit.cli_errors import guarded
from tracekit.errors import TracekitError
from tracekit.render.text import echo

if TYPE_CHECKING:
    from tracekit.render.rank_fold import RankView


@cli.command("attribute")
@click.argument("run", type=RUN_PATH)
@click.option("--phase", default=None, help="Phase name (verify, draft, ...), regex over phase names, or regex over range names. Default: every phase.")
@click.option("--by", "by", type=click.Choice(["rank", "cycle", "seq"]), default="rank", show_default=True,
              help="rank: per phase x rank; cycle: one row per instance; seq: sequence-length buckets.")
@click.option("--rank", type=click.IntRange(0), default=None, help="Only this rank.")
@click.option("--launch-latency-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Idle after a launch call returns that still counts as launch overhead.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@rank_view_options
@guarded
def attribute_cmd(run: str, phase: str | None, by: str, rank: int | None, launch_latency_us: float, as_json: bool,
                  view: RankView) -> None:
    """Where phase time went on every rank: exclusive GPU buckets, launch overhead, allreduce wait."""
    import json

    from tracekit.analyzers import analyses
    from tracekit.render import attribute_doc

    r = _load(run)
    _note_partial(r)
    try:
        report = analyses.attribute(r.events, r.manifest, phase, rank, launch_latency_ns=round(launch_latency_us * 1000))
    except TracekitError as exc:
        raise exc.located(path=run) from None
    if as_json:
        echo(json.dumps(attribute_doc.document(report, by, run), indent=2, allow_nan=False))
    else:
        attribute_doc.render(report, by, view)
        from tracekit.analyzers.joins import unphased_gpu
        from tracekit.render.run_state import unphased_line

        ev = r.events if rank is None else r.events.filter(r.events.get_column("rank") == rank)
        line = unphased_line(unphased_gpu(ev))
        if line:
            echo(line)


@cli.command("gap")
@click.argument("run", type=RUN_PATH)
@click.option("--a", "a", default="verify", show_default=True, help="Phase A (name or regex, as for attribute --phase).")
@click.option("--b", "b", default="decode", show_default=True, help="Phase B.")
@click.option("--b-run", type=RUN_PATH, default=None, help="Take B from this run (e.g. speculation off).")
@click.option("--rank", type=click.IntRange(0), default=None, help="Only this rank (default: all ranks, each instance once).")
@click.option("--by", "by", type=click.Choice(["all", "rank"]), default="all", show_default=True, help="rank: also show each rank.")
@click.option("--launch-latency-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Idle after a launch call returns that still counts as launch overhead.")
@click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
              help="Compare medians per instance (robust to stalls) or means (the buckets add up).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@log_options
@rank_view_options
@guarded
def gap_cmd(run: str, a: str, b: str, b_run: str | None, rank: int | None, by: str, launch_latency_us: float, stat: str,
            as_json: bool, view: RankView, patterns: tuple[str, ...] = (), pattern_file: str | None = None) -> None:
    """Why phase A (verify, extend mode) costs more than phase B (decode): bucket by bucket, kernel by kernel.

    RUN (and --b-run) may be log runs or engine log files: A's and B's times from the engine's
    own clock (user-pattern fields such as verify_ms, or the metrics' device timer).
    """
    run_log = is_log_input(run)
    if run_log or (b_run is not None and is_log_input(b_run)):
        if not run_log or (b_run is not None and not is_log_input(b_run)):
            raise click.UsageError("gap of a log against a captured run is not supported: give two logs or two runs")
        if rank is not None or by != "all" or view.ranks is not None or view.all_ranks:
            raise click.UsageError("--rank, --ranks, --all-ranks and --by are for trace runs, not logs")
        from tracekit.cli.log_inputs import log_gap_cmd

        log_gap_cmd(run, a, b, b_run, patterns, pattern_file, as_json, stat=stat)
        return
    import json

    from tracekit.analyzers import analyses
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import gap as render_gap
    from tracekit.render.console import SafeConsole as Console

    ra = _load(run)
    rb = _load(b_run) if b_run is not None else None
    _note_partial(ra, rb)
    try:
        rep = analyses.gap(ra.events, ra.manifest, None if rb is None else rb.events, None if rb is None else rb.manifest,
                           a=a, b=b, rank=rank, launch_latency_ns=round(launch_latency_us * 1000), stat=stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, b_run)) from None
    from tracekit.analyzers.rank_summary import int_hosts

    hosts = int_hosts(ra.manifest)
    by_rank = by == "rank" or view.ranks is not None or view.all_ranks  # --ranks / --all-ranks: the per-rank rows
    if as_json:
        echo(json.dumps(render_gap.document(rep, run, b_run or run, by_rank=by_rank, hosts=hosts, view=view), indent=2, allow_nan=False))
    else:
        render_gap.render_report(rep, Console(width=max(Console().width, 120)), by_rank=by_rank, view=view, hosts=hosts)
