"""``tracekit attribute`` and ``tracekit gap`` (analyzers)."""

from __future__ import annotations

import click

from tracekit.cli.common import _load, _note_partial, cli
from tracekit.cli_errors import guarded
from tracekit.errors import TracekitError


@cli.command("attribute")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("--phase", default=None, help="Phase name (verify, draft, ...), regex over phase names, or regex over range names. Default: every phase.")
@click.option("--by", "by", type=click.Choice(["rank", "cycle", "seq"]), default="rank", show_default=True,
              help="rank: per phase x rank; cycle: one row per instance; seq: sequence-length buckets.")
@click.option("--rank", type=click.IntRange(0), default=None, help="Only this rank.")
@click.option("--launch-latency-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Idle after a launch call returns that still counts as launch overhead.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def attribute_cmd(run: str, phase: str | None, by: str, rank: int | None, launch_latency_us: float, as_json: bool) -> None:
    """Where phase time went on every rank: exclusive GPU buckets, launch overhead, allreduce wait."""
    import json

    from tracekit.render import attribute as render_attribute

    r = _load(run)
    _note_partial(run)
    from tracekit.render import attribute_doc
    from tracekit.render import host_attribute as render_host

    try:
        mode, report = attribute_doc.analysis(r.events, r.manifest, phase, rank, round(launch_latency_us * 1000))
    except TracekitError as exc:
        raise exc.located(path=run) from None
    if as_json:
        click.echo(json.dumps(attribute_doc.document(mode, report, by, run, r.manifest), indent=2, allow_nan=False))
        return
    if mode == "timing":  # no profiler ran: phase times per instance, no buckets
        from tracekit.render import timing as render_timing

        render_timing.render(report, by, render_attribute.make_console(150), r.manifest)
        return
    from tracekit.render.capture import profile_line

    mode_line = profile_line(r.manifest)
    console = render_attribute.make_console(150 if by != "rank" else 120)
    if mode_line:
        console.print(mode_line, highlight=False, markup=False, soft_wrap=True)
    if mode == "host":
        console.print(render_host.host_mode_line(None if rank is None else [rank]), soft_wrap=True)
        render_host.render_host(report, by, console, r.manifest)
    else:
        render_attribute.render(report, by, console, r.manifest)


@cli.command("gap")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("--a", "a", default="verify", show_default=True, help="Phase A (name or regex, as for attribute --phase).")
@click.option("--b", "b", default="decode", show_default=True, help="Phase B.")
@click.option("--b-run", type=click.Path(dir_okay=True), default=None, help="Take B from this run (e.g. speculation off).")
@click.option("--rank", type=click.IntRange(0), default=None, help="Only this rank (default: all ranks, each instance once).")
@click.option("--by", "by", type=click.Choice(["all", "rank"]), default="all", show_default=True, help="rank: also show each rank.")
@click.option("--launch-latency-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Idle after a launch call returns that still counts as launch overhead.")
@click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
              help="Compare medians per instance (robust to stalls) or means (the buckets add up).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def gap_cmd(run: str, a: str, b: str, b_run: str | None, rank: int | None, by: str, launch_latency_us: float, stat: str,
            as_json: bool) -> None:
    """Why phase A (verify, extend mode) costs more than phase B (decode): bucket by bucket, kernel by kernel."""
    import json

    from rich.console import Console

    from tracekit.analyzers.gap import gap_report
    from tracekit.analyzers.host_attribution import has_gpu_events
    from tracekit.analyzers.host_gap import host_gap_report
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import gap as render_gap
    from tracekit.render import host_attribute as render_host

    ev_a = _load(run).events
    ev_b = _load(b_run).events if b_run is not None else None
    _note_partial(run, b_run)
    sel = None if rank is None else [rank]
    host_mode = not has_gpu_events(ev_a, sel) and not has_gpu_events(ev_b if ev_b is not None else ev_a, sel)
    try:
        if host_mode:  # CPU runs: compare the phases' host time instead of GPU windows
            hrep = host_gap_report(ev_a, ev_b, a=a, b=b, rank=rank, stat=stat)
        else:
            rep = gap_report(ev_a, ev_b, a=a, b=b, rank=rank, launch_latency_ns=round(launch_latency_us * 1000), stat=stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, b_run)) from None
    from tracekit.analyzers.unprofiled import compare_timers
    from tracekit.store import read_manifest

    timing = compare_timers(read_manifest(run), a, read_manifest(b_run or run), b, sel)
    if host_mode:
        hrep["timing"] = timing
        if as_json:
            click.echo(json.dumps(render_host.host_gap_json(hrep, run, b_run or run), indent=2, allow_nan=False))
        else:
            console = Console(width=max(Console().width, 120))
            console.print(render_host.host_mode_line(sel).replace("phase time is attributed", "phases are compared"), soft_wrap=True)
            render_host.render_host_gap(hrep, console)
        return
    rep["timing"] = timing
    if as_json:
        doc = render_gap.to_json(rep, run, b_run or run, by_rank=by == "rank")
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        render_gap.render(rep, Console(width=max(Console().width, 120)), by_rank=by == "rank")
