"""The tracekit command line: one thin module over the library.

Usage errors exit 2 (click), bad data exits 1 with one line naming the file and
rank, no traceback unless --debug.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from tracekit import __version__
from tracekit.cli_errors import _State, guarded
from tracekit.errors import TracekitError
from tracekit.exporters import FORMATS as EXPORTERS  # the registry imports no writer
from tracekit.exporters import format_names

if TYPE_CHECKING:
    from tracekit.store import Run


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracekit")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """Profile and explain speculative decoding (draft / verify / draft-extend) on every rank.

    \b
    tracekit capture --ranks all                  # built-in workload, every rank
    tracekit attribute run.parquet                # where the verify time went
    tracekit export run.parquet -o run.pftrace    # open in ui.perfetto.dev

    \b
    Exit status: 0 done; 1 bad data or an error (one line; --debug for a traceback);
    2 usage error, or an output that names an input; 3 partial run (written, but some rank
    has no data: one line says which); 130 interrupted (Ctrl-C).
    Outputs: the parent directory must exist (tracekit creates none you did not name);
    every output is written to a temp file beside it and renamed when complete, under
    OUTPUT.lock (a second writer of the same output is refused, naming the pid).
    """
    _State.debug = debug


def _load(path: str, columns: list[str] | None = None) -> Run:
    """``tracekit.store.load_run``; one line on stderr when the run was finalized again on read."""
    from tracekit.render.store import refinalized_line
    from tracekit.store import load_run

    run = load_run(path, columns)
    if run.refinalized is not None:
        click.echo(refinalized_line(run.refinalized), err=True)
    return run


PIPED_TABLE_WIDTH = 200  # piped output: wide enough that no header or number is cut (tests: 80 columns)


def _table_console() -> Any:
    """The console of a command that prints tables: the terminal's width, or wide when piped."""
    from tracekit.render.attribute import make_console

    return make_console(PIPED_TABLE_WIDTH)


@contextmanager
def _claim(out: str, inputs: Iterable[str] = (), *, runs: bool = True) -> Iterator[None]:
    """Every command that writes: the output rule (tracekit.outputs), then its lock while writing."""
    from tracekit.outputs import claimed_output

    with claimed_output(out, inputs, runs=runs) as lock:
        if lock.stale is not None:
            click.echo(f"tracekit: note: replaced a stale lock {lock.path} (pid {lock.stale} no longer runs)", err=True)
        yield


# Each command section below belongs to one part of the project; add commands
# inside your own section only.

# --- ingest / info (foundation) ---

@cli.command()
@click.argument("traces", nargs=-1, required=True)
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="run.parquet to write.")
@click.option("--allow-missing-ranks", is_flag=True, help="Ingest even if some ranks of the world have no trace.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail", show_default=True,
              help="fail: stop at the first unreadable file; skip: ingest the good files, report the rest.")
@click.option("--categories", "categories_file", type=click.Path(dir_okay=False),
              help="TOML file of category rules tried before the built-in table.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@click.option("--align", "align_method", type=click.Choice(["auto", "collectives", "none"]), default="auto",
              show_default=True, help="Clock alignment across ranks: fit offsets from collective ends, or none. "
              "auto: collectives when the ranks ran on more than one host.")
@guarded
def ingest(traces: tuple[str, ...], output: str, allow_missing_ranks: bool, on_error: str,
           categories_file: str | None, quiet: bool, align_method: str) -> None:
    """Ingest torch-profiler (Kineto) traces into one run.parquet.

    TRACES are files (.json / .json.gz), globs or directories: SGLang's
    per-rank *-TP-<r>*.trace.json.gz, its merged-*.trace.json.gz, or any
    torch.profiler export_chrome_trace output.
    """
    import time

    from rich.console import Console

    from tracekit.analyzers.align import align_events
    from tracekit.finalize.categories import load_rules
    from tracekit.ingest import ingest_traces
    from tracekit.ingest.discover import discover
    from tracekit.render.ingest import ByteProgress, print_ingest_summary
    from tracekit.store import write_run

    rules = load_rules(categories_file) if categories_file else None
    err = Console(stderr=True, soft_wrap=True)  # never break file paths
    progress = ByteProgress(err, enabled=not quiet)
    t0 = time.perf_counter()
    with _claim(output, [*traces, *map(str, discover(traces))], runs=False):
        try:
            run = ingest_traces(traces, allow_missing_ranks=allow_missing_ranks,
                                on_error=on_error,  # type: ignore[arg-type]
                                progress=progress, rules=rules)
        finally:
            progress.stop()
        events, man = align_events(run.events, run.manifest, None if align_method == "auto" else align_method)
        out = write_run(events, output, man)
    if not quiet:
        print_ingest_summary(err, out, events.height, man, time.perf_counter() - t0)
    from tracekit.render.run_state import resolution_line
    from tracekit.resolution import time_resolution

    line = resolution_line(time_resolution(events))
    if line:
        click.echo(f"tracekit: warning: {out}: {line}", err=True)
    if man.get("missing_ranks"):
        from tracekit.cli_errors import EXIT_PARTIAL

        sys.exit(EXIT_PARTIAL)


@cli.command()
@click.argument("run_path", metavar="RUN", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print the JSON document instead of tables.")
@click.option("--top", default=10, show_default=True, type=click.IntRange(0), help="Unmatched kernel names to list.")
@click.option("--categories", "categories_file", type=click.Path(dir_okay=False),
              help="Also use these category rules when listing unmatched kernels.")
@guarded
def info(run_path: str, as_json: bool, top: int, categories_file: str | None) -> None:
    """Ranks, devices, versions, per-rank kernel/busy/span/comm time, manifest differences."""
    from tracekit.finalize.categories import load_rules
    from tracekit.summary import run_summary

    run = _load(run_path, columns=["rank", "kind", "name", "category", "start_ns", "dur_ns"])
    rules = load_rules(categories_file) if categories_file else None
    doc = run_summary(run.events, run.manifest, rules=rules, top=top)
    if as_json:
        import json

        click.echo(json.dumps(doc, indent=2, default=str))
        return

    from tracekit.render.info import render_info

    render_info(doc, _table_console())
    from tracekit.render.run_state import resolution_line
    from tracekit.resolution import time_resolution

    line = resolution_line(time_resolution(run.events))
    if line:
        click.echo(f"tracekit: warning: {run_path}: {line}", err=True)

# --- capture (collectors) ---


def _parse_ranks(value: str) -> list[int] | None:
    from tracekit.ranklist import parse_rank_list

    try:
        ranks = parse_rank_list(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ranks") from None
    return None if ranks is None else list(ranks)


@cli.command("capture")
@click.option("--ranks", "ranks_opt", default="all", show_default=True, help="Ranks to capture: all, 3, 0,3,5 or 0-3,7 (all ranks still run).")
@click.option("--world", type=click.IntRange(1), default=None, help="Number of ranks [default: every visible GPU, else 8 CPU ranks].")
@click.option("--cycles", type=click.IntRange(1), default=8, show_default=True, help="Profiled speculative cycles.")
@click.option("--warmup", type=click.IntRange(0), default=4, show_default=True, help="Unprofiled cycles before the window (later ones timed for dilation).")
@click.option("--after", type=click.IntRange(0), default=4, show_default=True, help="Unprofiled cycles timed after the window: with the warm-up's, the dilation's reference.")
@click.option("--workload", type=click.Choice(["builtin"]), default="builtin", show_default=True)
@click.option("--engine", type=click.Choice(["builtin", "transformers"]), default="builtin", show_default=True,
              help="What every rank runs: the built-in workload, or Hugging Face transformers' generate() with an assistant (docs/transformers.md).")
@click.option("--model", default=None, metavar="DIR|PRESET",
              help="--engine transformers: checkpoint directory or preset (deepseek-v3-tiny, deepseek-v3-small, llama-tiny) [default: deepseek-v3-small on GPU, deepseek-v3-tiny on CPU].")
@click.option("--assistant", default=None, metavar="SPEC",
              help="--engine transformers: DIR, PRESET, same, early-exit:L, noisy:S or prompt-lookup:N [default: early-exit:1 for presets].")
@click.option("--no-assistant", is_flag=True, help="--engine transformers: plain decode, speculation off (the baseline for gap --b-run / spec --baseline).")
@click.option("--new-tokens", type=click.IntRange(1), default=16, show_default=True, help="--engine transformers: tokens per generate() call (one call per cycle).")
@click.option("--prompt-len", type=click.IntRange(1), default=16, show_default=True, help="--engine transformers: random prompt tokens per call.")
@click.option("--preset", type=click.Choice(["tiny", "kimi-k2-tiny"]), default=None, help="Model shape [default: kimi-k2-tiny on GPU, tiny on CPU].")
@click.option("--verify-graph", type=click.Choice(["on", "off", "auto", "mixed"]), default="auto", show_default=True,
              help="Verify from a CUDA graph, eagerly (SGLang's fallback), by batch size, or alternating.")
@click.option("--batch-size", type=click.IntRange(1), default=None)
@click.option("--draft-steps", type=click.IntRange(1), default=None)
@click.option("--ctx", "ctx_start", type=click.IntRange(1), default=None, help="Context length at the first cycle.")
@click.option("--layers", type=click.IntRange(1), default=None)
@click.option("--hidden", type=click.IntRange(8), default=None)
@click.option("--experts", type=click.IntRange(1), default=None)
@click.option("--top-k", type=click.IntRange(1), default=None)
@click.option("--accept-probs", default=None, help="Per-position accept probabilities, e.g. 0.8,0.6,0.45 (modelled).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--keep-json", type=click.Path(file_okay=False), default=None, help="Also keep each rank's raw Kineto JSON here.")
@click.option("--profile", "profile", type=click.Choice(["auto", "full", "lite", "timing"]), default="auto", show_default=True,
              help="full: CPU+CUDA profiler; lite: CUDA activity + tracekit's own phase ranges (no CPU ops); timing: no "
                   "profiler, phase times per cycle by CUDA events (no kernels). auto: lite on GPU, full on CPU.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=300.0, show_default=True, help="Seconds a rank may go without progress before it is killed.")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default="run.parquet", show_default=True)
@click.option("--sglang", "sglang_url", default=None, metavar="URL",
              help="Capture a live SGLang server (http://HOST:PORT) instead of the built-in workload; see sglang-capture.")
@click.option("--requests", type=click.IntRange(1), default=64, show_default=True, help="With --sglang: /generate requests to send.")
@click.option("--input-len", type=click.IntRange(1), default=512, show_default=True, help="With --sglang: prompt tokens per request.")
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True, help="With --sglang: max_new_tokens per request.")
@click.option("--concurrency", type=click.IntRange(1), default=8, show_default=True, help="With --sglang: requests in flight.")
@guarded
def capture_cmd(ranks_opt: str, world: int | None, cycles: int, warmup: int, after: int, workload: str, engine: str,
                model: str | None, assistant: str | None, no_assistant: bool, new_tokens: int, prompt_len: int,
                preset: str | None,
                verify_graph: str, batch_size: int | None, draft_steps: int | None, ctx_start: int | None,
                layers: int | None, hidden: int | None, experts: int | None, top_k: int | None,
                accept_probs: str | None, device: str, keep_json: str | None, profile: str, timeout_s: float, out: str,
                sglang_url: str | None, requests: int, input_len: int, output_len: int, concurrency: int) -> None:
    """Capture the built-in speculative-decoding workload (or transformers' assisted generation with --engine transformers, or with --sglang URL a live server) on every rank into one run.parquet.

    \b
    Exit status: 0 every rank captured; 1 no rank produced data (one line per failed rank,
    root cause first; logs kept in RUN.d/); 3 partial run (written, some ranks missing: the
    summary and the manifest say which and why); 130 Ctrl-C (the first ends the window at
    the current cycle and still writes the cycles captured, marked interrupted; a second aborts).
    """
    if sglang_url is not None:
        if ranks_opt != "all":
            raise click.UsageError("--sglang captures every rank: use --ranks all (and --world N to name the rank count)")
        from tracekit.collectors.sglang.commands import sglang_capture

        sglang_capture(sglang_url, out, requests=requests, input_len=input_len, output_len=output_len,
                        concurrency=concurrency, cycles=cycles, world=world, trace_dir=None, manifest_dir=None,
                        timeout_s=timeout_s, allow_no_hooks=False)
        return
    ranks = _parse_ranks(ranks_opt)
    try:
        probs = tuple(float(p) for p in accept_probs.split(",")) if accept_probs else None
    except ValueError:
        raise click.BadParameter(f"not a list of numbers: {accept_probs!r}", param_hint="--accept-probs") from None
    # collectors/ ships as tracekit.collectors through package-dir: mypy (tracekit/, analyzers/) cannot see it
    from tracekit.collectors.capture import (
        CaptureConfig,
        resolve_device,
        run_capture,
    )
    from tracekit.collectors.workload.config import make_config
    from tracekit.render.capture import render_capture_summary

    wl: Any  # WorkloadConfig | TransformersConfig
    try:
        kind, _ = resolve_device(device)
        if engine == "transformers":
            from tracekit.collectors.transformers.commands import (
                default_world,
                transformers_config,
            )

            world = default_world(kind, world)
            wl = transformers_config(kind, model=model, assistant=assistant, no_assistant=no_assistant,
                                     draft_tokens=draft_steps, new_tokens=new_tokens, prompt_len=prompt_len,
                                     batch_size=batch_size)
        elif model or assistant or no_assistant:
            raise ValueError("--model, --assistant and --no-assistant need --engine transformers")
        else:
            wl = make_config(preset or ("kimi-k2-tiny" if kind == "cuda" else "tiny"), verify_graph=verify_graph,
                             batch_size=batch_size, draft_steps=draft_steps, ctx_start=ctx_start, layers=layers,
                             hidden=hidden, experts=experts, top_k=top_k, accept_probs=probs)
        cc = CaptureConfig(out=out, world=world, ranks=ranks, cycles=cycles, warmup=warmup, after=after, device=device,
                           workload=wl, keep_json=keep_json, timeout_s=timeout_s, profile=profile)
        from tracekit.outputs import check_output

        check_output(out)
        result = run_capture(cc, progress=lambda m: click.echo(m, err=True), live=sys.stderr.isatty())
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(render_capture_summary(result))
    from tracekit.cli_errors import EXIT_INTERRUPTED, EXIT_PARTIAL

    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if result.missing:
        sys.exit(EXIT_PARTIAL)

# --- attribute / gap (analyzers) ---


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
        if as_json:
            hdoc = render_host.host_gap_json(hrep, run, b_run or run)
            hdoc.update(timing_source=timing["timing_source"], unprofiled=timing)
            click.echo(json.dumps(hdoc, indent=2, allow_nan=False))
        else:
            console = Console(width=max(Console().width, 120))
            console.print(render_host.host_mode_line(sel).replace("phase time is attributed", "phases are compared"), soft_wrap=True)
            render_host.render_host_gap(hrep, console)
            if timing["timing_source"] == "unprofiled":
                console.print(f"unprofiled (capture timers, {timing['clock']}, median per instance): {a} "
                              f"{timing['a_ns'] / 1e6:.3f} ms, {b} {timing['b_ns'] / 1e6:.3f} ms "
                              f"({timing['delta_ns'] / 1e6:+.3f} ms); the table above is profiled", soft_wrap=True)
        return
    rep["timing"] = timing
    if as_json:
        doc = render_gap.to_json(rep, run, b_run or run, by_rank=by == "rank")
        click.echo(json.dumps(doc, indent=2, allow_nan=False))
    else:
        render_gap.render(rep, Console(width=max(Console().width, 120)), by_rank=by == "rank")


# --- export / validate-trace (export) ---



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
@click.argument("run_path", metavar="RUN", type=click.Path())
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
        _note_partial(run_path)
        res = export_events(r.events, r.manifest, output, fmt=kind, selection=sel, flows=_flows_opt(flows_opt),
                            buckets=not no_buckets, outstanding=outstanding, source=run_path)
    for w in res.warnings:
        click.echo(f"tracekit: warning: {w}", err=True)
    click.echo(export_summary(res))
    click.echo(open_hint(res))


@cli.command("validate-trace")
@click.argument("trace", metavar="FILE", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def validate_trace_cmd(trace: str, as_json: bool) -> None:
    """Check an exported trace (.pftrace or Chrome JSON) for what breaks viewers; exit 1 on problems."""
    import json as _json

    from tracekit.export.validate import validate_trace
    from tracekit.render.export import check_doc, check_lines

    chk = validate_trace(trace)
    if as_json:
        click.echo(_json.dumps(check_doc(chk), indent=2, ensure_ascii=False))
    else:
        for line in check_lines(chk):
            click.echo(line)
    if not chk.ok:
        sys.exit(1)


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

    from tracekit.analyzers.spec import spec_report
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import spec as render_spec

    if baseline is not None and baseline_tps is not None:
        raise click.UsageError("give --baseline or --baseline-tps, not both")
    loaded = _load(run)
    events = loaded.events
    base_run = _load(baseline) if baseline is not None else None
    base = base_run.events if base_run is not None else None
    _note_partial(run, baseline)
    try:
        table, ctx = spec_report(
            events,
            baseline=base,
            baseline_tps=baseline_tps,
            target_tps=target_tps,
            rank=rank,
            draft_tokens=draft_tokens,
            accept_len=accept_len,
            manifest=loaded.manifest,
            baseline_manifest=base_run.manifest if base_run is not None else None,
        )
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, run, baseline)) from None
    if as_json:
        _forensic_json(render_spec.to_json(table, ctx))
    else:
        render_spec.render(table, ctx, _table_console())


@cli.command("align")
@click.argument("run", type=click.Path(dir_okay=True))
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
    from tracekit.render.ingest import alignment_line

    line = alignment_line(man["clock"])
    click.echo(f"{line} -> {output}" if line else f"no alignment (ranks share one host clock) -> {output}")


@cli.command("diff")
@click.argument("old", type=click.Path(dir_okay=True))
@click.argument("new", type=click.Path(dir_okay=True))
@click.option("--phase", default="verify", show_default=True, help="Phase name or regex to compare; 'all' compares every phase both runs have.")
@click.option("--seq-width", type=click.IntRange(min=1), default=None, help="Sequence-length bucket width in tokens (default: about 8 buckets).")
@click.option("--stat", type=click.Choice(["median", "mean"]), default="median", show_default=True,
              help="Compare medians per instance (robust to stalls) or means (the buckets add up).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def diff_cmd(old: str, new: str, phase: str, seq_width: int | None, stat: str, as_json: bool) -> None:
    """What changed between two runs: time at matched sequence length, buckets, kernels, manifests."""

    from tracekit.analyzers.diff import diff_runs
    from tracekit.analyzers.manifest_diff import manifest_diff
    from tracekit.errors import AnalysisError, side_path
    from tracekit.render import diff as render_diff

    a = _load(old)
    b = _load(new)
    _note_partial(old, new)
    try:
        view = diff_runs(a.events, b.events, None if phase == "all" else phase, seq_width, stat)
    except AnalysisError as exc:
        raise exc.located(path=side_path(exc, old, new, both=f"{old}, {new}")) from None
    md = manifest_diff(a.manifest, b.manifest)
    from tracekit.analyzers.unprofiled import compare_timers

    timing = {p: compare_timers(a.manifest, p, b.manifest, p) for p in view["phases"].get_column("phase").to_list()}
    if as_json:
        _forensic_json(render_diff.to_json(view, md, old, new, timing))
    else:
        render_diff.render(view, md, _table_console(), timing)


@cli.command("ranks")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("--min-skew-us", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="A collective has a last rank only when arrivals spread at least this much.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@guarded
def ranks_cmd(run: str, min_skew_us: float, as_json: bool) -> None:
    """Stragglers: per rank, how often it arrived last at a collective, the wait it caused, and why."""

    from tracekit.analyzers.stragglers import rank_state, stragglers
    from tracekit.render import ranks as render_ranks

    r = _load(run)
    _note_partial(run)
    view = stragglers(r.events, round(min_skew_us * 1000))
    state = rank_state(r.manifest)
    if as_json:
        _forensic_json(render_ranks.to_json(view, state))
    else:
        render_ranks.render(view, state, _table_console())

# --- report ---


@cli.command("report")
@click.argument("run", type=click.Path(dir_okay=True))
@click.option("-o", "--output", default="report.html", show_default=True, type=click.Path(dir_okay=False),
              help="HTML file to write (self-contained: opens offline).")
@click.option("--b-run", type=click.Path(dir_okay=True), default=None, help="Compare with this run: plots side by side and the diff table.")
@click.option("--png-dir", type=click.Path(file_okay=False), default=None, help="Also write every plot as PNG here (needs Chrome or Chromium).")
@click.option("--target-tps", type=click.FloatRange(min=0, min_open=True), default=None, help="Target tok/s per sequence for the speculation plot.")
@guarded
def report_cmd(run: str, output: str, b_run: str | None, png_dir: str | None, target_tps: float | None) -> None:
    """One HTML page of plots of RUN: buckets, time vs sequence length, cycles, skew, gap, speculation, facts."""
    from tracekit.render.report import build_report
    from tracekit.render.report.summary import report_lines
    from tracekit.render.store import refinalized_line

    with _claim(output, [run, *([b_run] if b_run else [])]):
        res = build_report(run, output, b_path=b_run, png_dir=png_dir, target_tps=target_tps)
    for note in res.refinalized:
        click.echo(refinalized_line(note), err=True)
    for line in report_lines(res):
        click.echo(line)


# --- merge / partial runs (reliability) ---


def _note_partial(*paths: str | None) -> None:
    """One stderr line per way each run is not whole (missing ranks, interrupted capture)."""
    from tracekit.render.run_state import run_state_lines
    from tracekit.store import read_manifest

    for path in paths:
        if path is not None:
            for line in run_state_lines(path, read_manifest(path)):
                click.echo(f"tracekit: warning: {line}", err=True)


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
    from tracekit.render.run_state import missing_line
    from tracekit.store import merge_shards, read_manifest

    with _claim(output, [shard_dir]):
        merge_shards(shard_dir, output, {"merged_by": "tracekit merge", "merged_from": shard_dir})
    man = read_manifest(output)
    n = len(man.get("ranks", {}))
    click.echo(f"merged {n} shard(s) from {shard_dir} into {output} (the shards are left in {shard_dir})")
    line = missing_line(output, man)
    if line:
        click.echo(f"tracekit: warning: {line}", err=True)
        sys.exit(EXIT_PARTIAL)


# --- sglang (integration) ---
# The integration's commands (sglang-capture, sglang-launch, sglang-bootstrap, sglang-check)
# live beside it in tracekit.collectors.sglang.commands (no torch or sglang import at load).
from tracekit.collectors.sglang.commands import COMMANDS as _SGLANG_COMMANDS  # noqa: E402

for _cmd in _SGLANG_COMMANDS:
    cli.add_command(_cmd)


def main() -> None:
    cli(prog_name="tracekit")


if __name__ == "__main__":
    main()
