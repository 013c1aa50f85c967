"""``tracekit attribute`` and ``tracekit gap`` (analyzers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli import ranked as rank_cli
from tracekit.cli.common import RUN_PATH, _note_partial, cli, rank_view_options
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
@rank_cli.executor_option
@guarded
def attribute_cmd(run: str, phase: str | None, by: str, rank: int | None, launch_latency_us: float, as_json: bool,
                  view: RankView, executor_opt: str) -> None:
    """Where phase time went on every rank: exclusive GPU buckets, launch overhead, allreduce wait."""
    import json

    from tracekit.analyzers import analyses
    from tracekit.render import attribute_doc

    spec = rank_cli.spec_of(executor_opt)
    ll = round(launch_latency_us * 1000)
    report, unphased = None, None
    try:
        rr = rank_cli.ranked_run(run, spec)
        if rr is not None:
            from tracekit.analyzers import ranked

            _note_partial(rr)
            try:
                with rank_cli.opened(spec, "attribute") as ex:
                    report, unphased = ranked.attribute(rr, ex, phase, rank, launch_latency_ns=ll, say=rank_cli.progress())
            except ranked.Unsupported as why:
                rank_cli.whole_run_note(spec, "attribute", str(why))
        if report is None:
            from tracekit.analyzers.joins import unphased_gpu

            r = rank_cli.load_whole(run, rr)
            if rr is None:
                _note_partial(r)
            report = analyses.attribute(r.events, r.manifest, phase, rank, launch_latency_ns=ll)
            unphased = unphased_gpu(r.events if rank is None else r.events.filter(r.events.get_column("rank") == rank))
    except TracekitError as exc:
        raise exc.located(path=run) from None
    from tracekit.analyzers.reports import Mode

    if report.mode is Mode.TIMING and (view.ranks is not None or view.all_ranks):
        echo("tracekit: note: --ranks / --all-ranks are not applied to a timing-mode capture (every rank is shown)",
             err=True)
    if as_json:
        echo(json.dumps(attribute_doc.document(report, by, run, view), indent=2, allow_nan=False))
    else:
        attribute_doc.render(report, by, view)
        from tracekit.render.run_state import unphased_line

        line = unphased_line(unphased)
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
@rank_cli.executor_option
@guarded
def gap_cmd(run: str, a: str, b: str, b_run: str | None, rank: int | None, by: str, launch_latency_us: float, stat: str,
            as_json: bool, view: RankView, patterns: tuple[str, ...] = (), pattern_file: str | None = None,
            executor_opt: str = "local") -> None:
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

    spec = rank_cli.spec_of(executor_opt)
    ll = round(launch_latency_us * 1000)
    rep = None
    man_a: dict[str, Any] = {}
    try:
        rra = rank_cli.ranked_run(run, spec)
        rrb = rank_cli.ranked_run(b_run, spec) if b_run is not None and rra is not None else None
        if rra is not None and (b_run is None or rrb is not None):
            from tracekit.analyzers import ranked

            _note_partial(rra, rrb)
            man_a = rra.manifest
            try:
                with rank_cli.opened(spec, "gap") as ex:
                    rep = ranked.gap(rra, rrb, ex, a=a, b=b, rank=rank, launch_latency_ns=ll, stat=stat, say=rank_cli.progress())
            except ranked.Unsupported as why:
                rank_cli.whole_run_note(spec, "gap", str(why))
        if rep is None:
            ra = rank_cli.load_whole(run, rra)
            man_a = ra.manifest
            rb = rank_cli.load_whole(b_run, rrb) if b_run is not None else None
            if rra is None or (b_run is not None and rrb is None):
                _note_partial(ra, rb)
            rep = analyses.gap(ra.events, ra.manifest, None if rb is None else rb.events,
                               None if rb is None else rb.manifest, a=a, b=b, rank=rank, launch_latency_ns=ll, stat=stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, b_run)) from None
    from tracekit.analyzers.rank_summary import int_hosts

    hosts = int_hosts(man_a)
    by_rank = by == "rank" or view.ranks is not None or view.all_ranks  # --ranks / --all-ranks: the per-rank rows
    if as_json:
        echo(json.dumps(render_gap.document(rep, run, b_run or run, by_rank=by_rank, hosts=hosts, view=view), indent=2, allow_nan=False))
    else:
        render_gap.render_report(rep, Console(width=max(Console().width, 120)), by_rank=by_rank, view=view, hosts=hosts)
