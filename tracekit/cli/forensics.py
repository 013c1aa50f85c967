"""``tracekit spec``, ``align``, ``upgrade``, ``diff`` and ``ranks`` (forensics)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli import ranked as rank_cli
from tracekit.cli.common import (
    RUN_PATH,
    _claim,
    _forensic_json,
    _load,
    _note_partial,
    _table_console,
    cli,
    rank_view_options,
)
from tracekit.cli.log_inputs import is_log_input, log_options
from tracekit.cli_errors import guarded
from tracekit.render.text import echo

if TYPE_CHECKING:
    from tracekit.render.rank_fold import RankView


@cli.command("spec")
@click.argument("run", type=RUN_PATH)
@click.option("--baseline", "baseline", type=RUN_PATH, help="A plain-decode run (speculation off) for the decode step time.")
@click.option("--baseline-tps", type=click.FloatRange(min=0, min_open=True), help="Plain-decode tok/s per sequence instead of a baseline run.")
@click.option("--target-tps", type=click.FloatRange(min=0, min_open=True), default=None, help="Target tok/s per sequence (e.g. 150).")
@click.option("--rank", type=int, default=None, help="Use this rank's cycles (default: the slowest rank).")
@click.option("--draft-tokens", type=click.IntRange(min=0), default=None, help="k for the chain model (default: verify tokens per request - 1).")
@click.option("--accept-len", type=click.FloatRange(min=0), default=None, help="Accepted draft tokens per cycle, bonus excluded, when the trace lacks them.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@log_options
@click.option("--verify-field", default=None, help="Log runs: the user-pattern field of the verify time (default verify_ms).")
@click.option("--draft-field", default=None, help="Log runs: the user-pattern field of the draft time (default draft_ms).")
@click.option("--decode-field", default=None, help="Log runs: the user-pattern field of the decode step time (default decode_ms).")
@click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
              help="Log runs: the statistic over intervals that feeds every formula.")
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
    patterns: tuple[str, ...] = (),
    pattern_file: str | None = None,
    verify_field: str | None = None,
    draft_field: str | None = None,
    decode_field: str | None = None,
    stat: str = "median",
) -> None:
    """What speculation pays: tokens/cycle, tok/s, break-even accept length, accept rate for a target.

    RUN may be a log run (tracekit logs) or an engine log file: accept length and tok/s from the
    log, break-even from the log's own verify / decode times (a user pattern, metrics snapshots
    or --baseline-tps).
    """
    if is_log_input(run):
        from tracekit.cli.log_inputs import log_spec_cmd

        if baseline is not None or rank is not None or draft_tokens is not None or accept_len is not None:
            raise click.UsageError("--baseline, --rank, --draft-tokens and --accept-len are for trace runs, not logs")
        log_spec_cmd(run, patterns, pattern_file, as_json, stat=stat, verify_field=verify_field,
                     draft_field=draft_field, decode_field=decode_field, baseline_tps=baseline_tps,
                     target_tps=target_tps)
        return

    from tracekit.analyzers import analyses
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import spec as render_spec

    if baseline is not None and baseline_tps is not None:
        raise click.UsageError("give --baseline or --baseline-tps, not both")
    opts: dict[str, Any] = {"baseline_tps": baseline_tps, "target_tps": target_tps, "rank": rank,
                            "draft_tokens": draft_tokens, "accept_len": accept_len}
    rep = None
    try:
        local = rank_cli.spec_of("local")
        rr = rank_cli.ranked_run(run, local)
        rb = rank_cli.ranked_run(baseline, local) if rr is not None and baseline is not None else None
        if rr is not None and (baseline is None or rb is not None):  # both rank by rank, or both whole
            from tracekit.analyzers import ranked
            from tracekit.analyzers.ranked_light import phase_rows_of, spec_inputs
            from tracekit.executor import LocalExecutor

            _note_partial(rr, rb)
            say = rank_cli.progress()
            try:
                rows, sol = spec_inputs(rr, LocalExecutor(), say)
                base_rows = None if rb is None else phase_rows_of(rb, LocalExecutor(), say, "spec (baseline): ")
                rep = analyses.spec(rows, rr.manifest, baseline=base_rows,
                                    baseline_manifest=None if rb is None else rb.manifest, sol=sol, **opts)
            except ranked.Unsupported:
                pass
        if rep is None:
            loaded = rank_cli.load_whole(run, rr)
            base_run = None if baseline is None else rank_cli.load_whole(baseline, rb)
            if rr is None or (baseline is not None and rb is None):
                _note_partial(loaded, base_run)
            rep = analyses.spec(loaded.events, loaded.manifest, baseline=None if base_run is None else base_run.events,
                                baseline_manifest=None if base_run is None else base_run.manifest, **opts)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, baseline)) from None
    if as_json:
        _forensic_json(render_spec.to_json(rep))
    else:
        render_spec.render(rep, _table_console())


@cli.command("align")
@click.argument("run", type=RUN_PATH)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Aligned run.parquet to write.")
@click.option("--align", "method", type=click.Choice(["collectives", "none", "auto"]), default="collectives", show_default=True,
              help="collectives: fit per-rank clock offsets from allreduce ends; auto: collectives only when ranks ran on several hosts.")
@guarded
def align_cmd(run: str, output: str, method: str) -> None:
    """Put every rank on rank 0's clock (offsets and residual go to the manifest; raw times stay recoverable)."""
    from tracekit.analyzers.align import align_events
    from tracekit.errors import AnalysisError
    from tracekit.store import write_run

    with _claim(output, [run]):
        r = _load(run)
        try:
            events, man = align_events(r.events, r.manifest, None if method == "auto" else method)
        except AnalysisError as exc:
            raise exc.located(path=run) from None
        write_run(events, output, man)
    from tracekit.manifest import typed
    from tracekit.render.ingest import alignment_line

    line = alignment_line(typed(man).clock)
    echo(f"{line} -> {output}" if line else f"no alignment (ranks share one host clock) -> {output}")


@cli.command("upgrade")
@click.argument("run", type=RUN_PATH)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="Write the upgraded run here (default: RUN itself, replaced atomically; required for a shard directory).")
@guarded
def upgrade_cmd(run: str, output: str | None) -> None:
    """Finalize a run written by an older tracekit again (categories, collectives, phases) and write it once."""
    import os

    from tracekit.finalize.upgrade import upgrade_run
    from tracekit.render.store import upgrade_line

    if output is None and os.path.isdir(run):
        raise click.UsageError(f"{run} is a shard directory: give -o run.parquet (the upgrade writes one file)")
    out = run if output is None else output
    with _claim(out, [] if output is None else [run]):
        up = upgrade_run(run, out)
    echo(upgrade_line(up))


@cli.command("diff")
@click.argument("old", type=RUN_PATH)
@click.argument("new", type=RUN_PATH)
@click.option("--phase", default="verify", show_default=True, help="Phase name or regex to compare; 'all' compares every phase both runs have.")
@click.option("--seq-width", type=click.IntRange(min=1), default=None, help="Sequence-length bucket width in tokens (default: about 8 buckets).")
@click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
              help="Compare medians per instance (robust to stalls) or means (the buckets add up).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@log_options
@click.option("--tokens-width", type=click.IntRange(min=1), default=None,
              help="Log runs: tokens-per-request bin width (default: about 8 bins).")
@rank_cli.executor_option
@guarded
def diff_cmd(old: str, new: str, phase: str, seq_width: int | None, stat: str, as_json: bool,
             patterns: tuple[str, ...] = (), pattern_file: str | None = None, tokens_width: int | None = None,
             executor_opt: str = "local") -> None:
    """What changed between two runs: time at matched sequence length, buckets, kernels, manifests.

    OLD and NEW may be log runs or engine log files (or one log and one captured run): compared per
    bin of batch size, tokens per request and graph use; bins found in one only are listed, not
    compared.
    """
    old_log, new_log = is_log_input(old), is_log_input(new)
    if old_log and new_log:
        from tracekit.cli.log_inputs import log_diff_cmd

        log_diff_cmd(old, new, patterns, pattern_file, as_json, stat=stat, tokens_width=tokens_width)
        return
    if old_log or new_log:  # an engine log against a captured run
        from tracekit.cli.log_inputs import log_trace_diff_cmd

        log_trace_diff_cmd(old, new, old_log, patterns, pattern_file, as_json, stat=stat, tokens_width=tokens_width)
        return

    from tracekit.analyzers import analyses
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import diff as render_diff

    spec = rank_cli.spec_of(executor_opt)
    sel = None if phase == "all" else phase
    rep = None
    try:
        ro = rank_cli.ranked_run(old, spec)
        rn = rank_cli.ranked_run(new, spec) if ro is not None else None
        if ro is not None and rn is not None:  # both rank by rank, or both whole
            from tracekit.analyzers import ranked

            _note_partial(ro, rn)
            try:
                with rank_cli.opened(spec, "diff") as ex:
                    rep = ranked.diff(ro, rn, ex, phase=sel, seq_width=seq_width, stat=stat, say=rank_cli.progress())
            except ranked.Unsupported as why:
                rank_cli.whole_run_note(spec, "diff", str(why))
        if rep is None:
            a = rank_cli.load_whole(old, ro)
            b = rank_cli.load_whole(new, rn)
            if ro is None or rn is None:
                _note_partial(a, b)
            rep = analyses.diff(a.events, a.manifest, b.events, b.manifest, phase=sel, seq_width=seq_width, stat=stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, old, new, both=f"{old}, {new}")) from None
    if as_json:
        _forensic_json(render_diff.to_json(rep, old, new))
    else:
        render_diff.render(rep, _table_console())


@cli.command("ranks")
@click.argument("run", type=RUN_PATH)
@click.option("--min-skew-us", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="A collective has a last rank only when arrivals spread at least this much.")
@click.option("--launch-latency-us", type=click.FloatRange(0), default=20.0, show_default=True,
              help="Idle after a launch call returns that still counts as a launch gap (as for attribute).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document (every rank's row, and their summary).")
@rank_view_options
@rank_cli.executor_option
@guarded
def ranks_cmd(run: str, min_skew_us: float, launch_latency_us: float, as_json: bool, view: RankView,
              executor_opt: str) -> None:
    """Stragglers: per rank, how often it arrived last at a collective, the wait it caused, and why.

    More than 16 ranks: the table shows median / p90 / mean / min / max over the ranks and the
    ranks that made the others wait longest (--all-ranks: every row; --ranks 0-7,12: those rows).
    """

    from tracekit.analyzers import analyses
    from tracekit.analyzers.rank_summary import int_hosts
    from tracekit.render import ranks as render_ranks

    spec = rank_cli.spec_of(executor_opt)
    skew, ll = round(min_skew_us * 1000), round(launch_latency_us * 1000)
    rr = rank_cli.ranked_run(run, spec)
    if rr is not None:  # every run can be: stragglers need no mode
        from tracekit.analyzers import ranked

        _note_partial(rr)
        with rank_cli.opened(spec, "ranks") as ex:
            rep = ranked.ranks(rr, ex, min_skew_ns=skew, launch_latency_ns=ll, say=rank_cli.progress())
        manifest = rr.manifest
    else:
        r = _load(run)
        _note_partial(r)
        rep = analyses.ranks(r.events, r.manifest, min_skew_ns=skew, launch_latency_ns=ll)
        manifest = r.manifest
    if as_json:
        _forensic_json(render_ranks.to_json(rep, int_hosts(manifest), view))
    else:
        render_ranks.render(rep, _table_console(), view, int_hosts(manifest))
