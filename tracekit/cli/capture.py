"""``tracekit capture`` (collectors): common options, then one option group per engine.

The engines and their options come from the engine registry (collectors/engines.py): this
module names no engine. ``capture --help`` prints the common options, then each engine's
group under its title with the shared options it also reads; an option given on the command
line that the chosen engine does not read is a usage error naming the engines that do.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from tracekit.cli.common import cli
from tracekit.cli_errors import guarded
from tracekit.collectors.engines import ENGINES, Engine, engine_names, get_engine, live_engine
from tracekit.limits import MAX_WORLD_SIZE
from tracekit.render.text import echo


def _parse_ranks(value: str) -> list[int] | None:
    from tracekit.ranklist import parse_rank_list

    try:
        ranks = parse_rank_list(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--ranks") from None
    return None if ranks is None else list(ranks)


COMMON = [
    click.Option(["--ranks", "ranks_opt"], default="all", show_default=True,
                 help="Ranks to capture: all, 3, 0,3,5 or 0-3,7 (all ranks still run)."),
    click.Option(["--world"], type=click.IntRange(1, MAX_WORLD_SIZE), default=None,
                 help="Number of ranks [default: every visible GPU, else 8 CPU ranks (the engine may say fewer)]."),
    click.Option(["--engine"], type=click.Choice(engine_names()), default="builtin", show_default=True,
                 help="What every rank runs (the groups below)."),
    click.Option(["--cycles"], type=click.IntRange(1), default=8, show_default=True, help="Profiled speculative cycles."),
    click.Option(["--warmup"], type=click.IntRange(0), default=4, show_default=True,
                 help="Unprofiled cycles before the window (later ones timed for dilation)."),
    click.Option(["--after"], type=click.IntRange(0), default=4, show_default=True,
                 help="Unprofiled cycles timed after the window: with the warm-up's, the dilation's reference."),
    click.Option(["--workload"], type=click.Choice(["builtin"]), default="builtin", show_default=True, hidden=True),
    click.Option(["--device"], type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True),
    click.Option(["--keep-json"], type=click.Path(file_okay=False), default=None,
                 help="Also keep each rank's raw Kineto JSON here."),
    click.Option(["--profile"], type=click.Choice(["auto", "full", "lite", "timing"]), default="auto",
                 show_default=True,
                 help="full: CPU+CUDA profiler; lite: CUDA activity + tracekit's own phase ranges (no CPU ops); timing: "
                      "no profiler, phase times per cycle by CUDA events (no kernels). auto: lite on GPU, full on CPU "
                      "(with --sglang: full)."),
    click.Option(["--timeout", "timeout_s"], type=click.FloatRange(1), default=300.0, show_default=True,
                 help="Seconds a rank may go without progress before it is killed."),
    click.Option(["-o", "--out"], type=click.Path(dir_okay=False), default="run.parquet", show_default=True,
                 help="The run file; or a URL: s3://bucket/run.parquet (one object, merged) or s3://bucket/run/ "
                      "(a sharded run left under the prefix); docs/scale.md, \"Object storage\"."),
]

# Several hosts (collectors/nodes.py, docs/scale.md): a group of its own, shown after the common options.
MULTI_HOST = [
    click.Option(["--nnodes"], type=click.IntRange(1, MAX_WORLD_SIZE), default=None,
                 help="Hosts in the capture: one `tracekit capture` per host, each with its --node-rank (docs/scale.md). "
                      "Without it, RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in the environment (torchrun, srun) make "
                      "this process one rank of such a job."),
    click.Option(["--node-rank"], type=click.IntRange(0, MAX_WORLD_SIZE - 1), default=0, show_default=True,
                 help="With --nnodes: this host's index; node 0 hosts rank 0 and merges."),
    click.Option(["--master"], default=None, metavar="ADDR:PORT",
                 help="With --nnodes: where node 0's rank 0 hosts the process group's store."),
    click.Option(["--nproc-per-node"], type=click.IntRange(1, MAX_WORLD_SIZE), default=None,
                 help="With --nnodes: ranks per host [default: every visible GPU, else --world / --nnodes, else 8]."),
]

GROUPS: list[tuple[Engine, list[click.Option]]] = [(e, e.click_options()) for e in ENGINES]
_OWNER: dict[str, Engine] = {str(o.name): e for e, opts in GROUPS for o in opts}


def _flag(dest: str) -> str:
    for _e, opts in GROUPS:
        for o in opts:
            if o.name == dest:
                return max(o.opts, key=len)
    return f"--{dest.replace('_', '-')}"


class GroupedCommand(click.Command):
    """``--help`` lists the common options, then each engine's own options under its title."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        def rows(opts: list[click.Option]) -> list[tuple[str, str]]:
            return [r for o in opts if (r := o.get_help_record(ctx)) is not None]

        with formatter.section("Options"):
            formatter.write_dl(rows([*COMMON, *(p for p in self.params if isinstance(p, click.Option)
                                                and p.name == "help")]))
        with formatter.section("Several hosts (docs/scale.md)"):
            formatter.write_dl(rows(MULTI_HOST))
        for engine, opts in GROUPS:
            shared = [_flag(d) for d in engine.reads if _OWNER.get(d) is not engine]
            title = engine.title + (f"; also reads {', '.join(shared)}" if shared else "")
            with formatter.section(title):
                formatter.write_dl(rows(opts))


def _check_applicable(ctx: click.Context, engine: Engine) -> None:
    """A usage error for an engine option given on the command line that ``engine`` does not read."""
    for dest, owner in _OWNER.items():
        src = ctx.get_parameter_source(dest)
        if src is not click.core.ParameterSource.COMMANDLINE or dest in engine.reads:
            continue
        users = [e.name for e in ENGINES if dest in e.reads]
        raise click.UsageError(f"{_flag(dest)} does not apply to --engine {engine.name} "
                               f"(need --engine {' or '.join(users) or owner.name})")


@guarded
def capture_cmd(**opts: Any) -> None:
    """Capture speculative decoding on every rank into one run.parquet: the built-in workload, another engine
    (--engine), or a live server (--sglang URL).

    \b
    Exit status: 0 every rank captured; 1 no rank produced data (one line per failed rank,
    root cause first; logs kept in RUN.d/); 3 partial run (written, some ranks missing: the
    summary and the manifest say which and why); 130 Ctrl-C (the first ends the window at
    the current cycle and still writes the cycles captured, marked interrupted; a second aborts).
    """
    ctx = click.get_current_context()
    live = live_engine(opts)
    engine = live or get_engine(opts["engine"])
    _check_applicable(ctx, engine)
    if live is not None:
        if opts["nnodes"] is not None:
            raise click.UsageError(f"--{live.name} captures a running server's ranks: --nnodes is for engines whose "
                                   "ranks tracekit starts")
        from tracekit.urls import is_url

        if is_url(opts["out"]):
            raise click.UsageError(f"--{live.name} writes one local run file: -o URL is for engines whose ranks "
                                   "tracekit starts")
        live.capture_live(opts)
        return
    ranks = _parse_ranks(opts["ranks_opt"])
    from tracekit.outputs import OutputLock, check_output
    from tracekit.urls import is_url

    out = opts["out"]
    if not is_url(out):  # a URL (s3://bucket/run/): checked by a probe PUT before the ranks start (remote.check)
        check_output(out)  # the output rule and a held lock: refused at once, before torch is imported
        OutputLock(out).refuse_if_held()
    from tracekit.collectors.capture import CaptureConfig, resolve_device, run_capture
    from tracekit.errors import ConfigError
    from tracekit.render.capture import render_capture_summary

    try:
        from tracekit.collectors.nodes import Topology, from_env, from_options

        nnodes = opts["nnodes"]
        if nnodes is None and (opts["node_rank"] or opts["master"] or opts["nproc_per_node"]):
            raise click.UsageError("--node-rank, --master and --nproc-per-node go with --nnodes")
        nodes = (from_options(nnodes, opts["node_rank"], opts["master"], opts["nproc_per_node"]) if nnodes is not None
                 else from_env() or Topology())
        kind, _ = resolve_device(opts["device"])
        world = engine.world(kind, opts["world"])
        wl = engine.make_config(kind, opts)
        cc = CaptureConfig(out=out, world=world, ranks=ranks, cycles=opts["cycles"], warmup=opts["warmup"],
                           after=opts["after"], device=opts["device"], workload=wl, keep_json=opts["keep_json"],
                           timeout_s=opts["timeout_s"], profile=opts["profile"], nodes=nodes)
        result = run_capture(cc, progress=lambda m: echo(m, err=True), live=sys.stderr.isatty())
    except ConfigError as exc:  # the user's options; any other error is not a usage error
        raise click.UsageError(exc.message) from None
    echo(render_capture_summary(result))
    from tracekit.cli_errors import EXIT_INTERRUPTED, EXIT_PARTIAL

    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if result.missing:
        sys.exit(EXIT_PARTIAL)


cli.add_command(GroupedCommand("capture", callback=capture_cmd,
                               params=[*COMMON, *MULTI_HOST, *(o for _e, g in GROUPS for o in g)],
                               help=capture_cmd.__doc__))
