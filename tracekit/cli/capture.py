"""``tracekit capture`` (collectors)."""

from __future__ import annotations

import sys
from typing import Any

import click

from tracekit.cli.common import cli
from tracekit.cli_errors import guarded
from tracekit.render.text import echo


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
                   "profiler, phase times per cycle by CUDA events (no kernels). auto: lite on GPU, full on CPU "
                   "(with --sglang: full).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=300.0, show_default=True, help="Seconds a rank may go without progress before it is killed.")
@click.option("--nnodes", type=click.IntRange(1), default=None,
              help="Hosts in the capture: one `tracekit capture` per host, each with its --node-rank (docs/scale.md). "
                   "Without it, RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in the environment (torchrun, srun) make "
                   "this process one rank of such a job.")
@click.option("--node-rank", type=click.IntRange(0), default=0, show_default=True, help="With --nnodes: this host's index; node 0 hosts rank 0 and merges.")
@click.option("--master", default=None, metavar="ADDR:PORT", help="With --nnodes: where node 0's rank 0 hosts the process group's store.")
@click.option("--nproc-per-node", type=click.IntRange(1), default=None,
              help="With --nnodes: ranks per host [default: every visible GPU, else --world / --nnodes, else 8].")
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
                accept_probs: str | None, device: str, keep_json: str | None, profile: str, timeout_s: float,
                nnodes: int | None, node_rank: int, master: str | None, nproc_per_node: int | None, out: str,
                sglang_url: str | None, requests: int, input_len: int, output_len: int, concurrency: int) -> None:
    """Capture the built-in speculative-decoding workload (or transformers' assisted generation with --engine transformers, or with --sglang URL a live server) on every rank into one run.parquet.

    \b
    Exit status: 0 every rank captured; 1 no rank produced data (one line per failed rank,
    root cause first; logs kept in RUN.d/); 3 partial run (written, some ranks missing: the
    summary and the manifest say which and why); 130 Ctrl-C (the first ends the window at
    the current cycle and still writes the cycles captured, marked interrupted; a second aborts).
    """
    if sglang_url is not None:
        if nnodes is not None:
            raise click.UsageError("--sglang captures a running server's ranks: --nnodes is for the built-in and "
                                   "transformers engines")
        if ranks_opt != "all":
            raise click.UsageError("--sglang captures every rank: use --ranks all (and --world N to name the rank count)")
        from tracekit.collectors.sglang.commands import sglang_capture

        sglang_capture(sglang_url, out, requests=requests, input_len=input_len, output_len=output_len,
                        concurrency=concurrency, cycles=cycles, world=world, trace_dir=None, manifest_dir=None,
                        timeout_s=timeout_s, allow_no_hooks=False, profile=profile)
        return
    ranks = _parse_ranks(ranks_opt)
    from tracekit.outputs import OutputLock, check_output

    check_output(out)  # the output rule and a held lock: refused at once, before torch is imported
    OutputLock(out).refuse_if_held()
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
    from tracekit.errors import ConfigError
    from tracekit.render.capture import render_capture_summary

    wl: Any  # WorkloadConfig | TransformersConfig
    try:
        from tracekit.collectors.nodes import Topology, from_env, from_options

        if nnodes is None and (node_rank or master or nproc_per_node):
            raise click.UsageError("--node-rank, --master and --nproc-per-node go with --nnodes")
        nodes = (from_options(nnodes, node_rank, master, nproc_per_node) if nnodes is not None
                 else from_env() or Topology())
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
            raise click.UsageError("--model, --assistant and --no-assistant need --engine transformers")
        else:
            wl = make_config(preset or ("kimi-k2-tiny" if kind == "cuda" else "tiny"), verify_graph=verify_graph,
                             batch_size=batch_size, draft_steps=draft_steps, ctx_start=ctx_start, layers=layers,
                             hidden=hidden, experts=experts, top_k=top_k, accept_probs=probs)
        cc = CaptureConfig(out=out, world=world, ranks=ranks, cycles=cycles, warmup=warmup, after=after, device=device,
                           workload=wl, keep_json=keep_json, timeout_s=timeout_s, profile=profile, nodes=nodes)
        result = run_capture(cc, progress=lambda m: echo(m, err=True), live=sys.stderr.isatty())
    except ConfigError as exc:  # the user's options; any other error is not a usage error
        raise click.UsageError(exc.message) from None
    echo(render_capture_summary(result))
    from tracekit.cli_errors import EXIT_INTERRUPTED, EXIT_PARTIAL

    if result.interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if result.missing:
        sys.exit(EXIT_PARTIAL)
