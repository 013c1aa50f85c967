"""``tracekit sol``: the speed-of-light model, on a run or for a hypothetical step (analyzers/sol)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from tracekit.cli import ranked as rank_cli
from tracekit.cli.common import RUN_PATH, _table_console, cli
from tracekit.cli_errors import guarded
from tracekit.render.text import echo

if TYPE_CHECKING:
    import polars as pl

    from tracekit.executor import ExecutorSpec


@cli.command("sol")
@click.argument("run", required=False, type=RUN_PATH)
@click.option("--model", "model", default=None, help="Hugging Face config.json (or its checkpoint directory). "
              "Default on a run: the config its manifest records.")
@click.option("--gpu", default=None, help="GPU table name (tracekit/data/gpus.toml), or SPEC.toml. "
              "Default on a run: the device name in its manifest.")
@click.option("--tp", type=click.IntRange(1), default=None, help="Tensor-parallel degree (default on a run: its world size).")
@click.option("--tokens", "tokens", type=click.IntRange(1), multiple=True,
              help="What-if: new tokens per sequence (repeat for several steps, e.g. --tokens 1 --tokens 3).")
@click.option("--seq-len", type=click.IntRange(0), default=None, help="What-if: context per sequence in the KV cache.")
@click.option("--batch", type=click.IntRange(1), default=1, show_default=True, help="What-if: sequences per step.")
@click.option("--engine", type=click.Choice(["sglang", "vllm", "workload"]), default=None,
              help="Sharding rules (default: sglang; a built-in capture: workload).")
@click.option("--dp-attention", is_flag=True, help="DP-attention: attention replicated, each rank its share of the batch.")
@click.option("--ep", type=click.IntRange(1), default=1, show_default=True, help="Expert-parallel degree (1: experts split by TP).")
@click.option("--kv-dtype", type=click.Choice(["bfloat16", "float16", "fp8", "float32"]), default=None,
              help="KV cache dtype when it differs from the model's.")
@click.option("--achievable", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Fraction of the GPU's peaks the floor assumes (default: the spec's, 0.9 in the table).")
@click.option("--allreduce-us", type=click.FloatRange(0), default=None,
              help="Fixed time per allreduce instead of the ring model (e.g. a measured NCCL figure).")
@click.option("--distinct-experts", type=click.FloatRange(0), default=None,
              help="What-if: distinct routed experts per MoE layer instead of U(T).")
@click.option("--draft-model", default=None, help="The draft model's config.json. What-if: one --tokens T gives a "
              "speculative cycle (T - 1 draft steps, verify of T tokens, draft extend) and a decode step, and the SOL "
              "break-even. On a run: floors for its draft and draft_extend phases.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON document.")
@click.option("--calibrate", is_flag=True, help="Measure this machine's GPU (copy bandwidth, bf16 / fp8 GEMM rate, "
              "CUDA events) and write a --gpu SPEC.toml to -o.")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False), help="--calibrate: the spec file to write.")
@rank_cli.executor_option
@guarded
def sol_cmd(run: str | None, model: str | None, gpu: str | None, tp: int | None, tokens: tuple[int, ...],
            seq_len: int | None, batch: int, engine: str | None, dp_attention: bool, ep: int, kv_dtype: str | None,
            achievable: float | None, allreduce_us: float | None, distinct_experts: float | None,
            draft_model: str | None, as_json: bool, calibrate: bool, output: str | None, executor_opt: str) -> None:
    """What a phase should cost: the floor per phase and bucket, and % of SOL (floor / measured).

    \b
    tracekit sol RUN [--model CONFIG] [--gpu NAME|SPEC.toml]         # beside a run's phases
    tracekit sol --model CONFIG --gpu NAME --tp N --tokens T --seq-len S [--batch B]   # what-if
    tracekit sol --calibrate -o SPEC.toml                             # this machine's GPU, measured
    """
    import dataclasses
    import json

    from tracekit.analyzers.sol.config import load_config, model_shape
    from tracekit.analyzers.sol.gpus import gpu_spec
    from tracekit.analyzers.sol.model import Layout, Step
    from tracekit.analyzers.sol.report import what_if
    from tracekit.render import sol as render_sol

    if run is None and executor_opt != "local":
        raise click.UsageError("--executor is for a RUN (the what-if form and --calibrate read none)")
    if calibrate or output is not None:
        if not (calibrate and output is not None):
            raise click.UsageError("--calibrate and -o SPEC.toml go together")
        if run is not None or model is not None or tokens:
            raise click.UsageError("--calibrate takes no RUN, --model or --tokens")
        _calibrate(output)
        return
    if run is not None:
        if tokens or seq_len is not None or distinct_experts is not None:
            raise click.UsageError("--tokens, --seq-len and --distinct-experts are for the what-if form (no RUN)")
        from tracekit.analyzers.sol.run import sol_of_run
        from tracekit.errors import TracekitError

        cfg = load_config(model) if model is not None else None
        draft_cfg = None if draft_model is None else load_config(draft_model)
        try:
            events, manifest, instances = _run_inputs(run, rank_cli.spec_of(executor_opt), cfg, model, gpu, kv_dtype)
            rep = sol_of_run(events, manifest, run=run, config=cfg, config_source=model, gpu=gpu, tp=tp,
                             draft_config=draft_cfg, engine=engine, dp_attention=dp_attention, ep=ep,
                             kv_dtype=kv_dtype, achievable=achievable,
                             allreduce_ns=None if allreduce_us is None else allreduce_us * 1000, instances=instances)
        except TracekitError as exc:
            raise exc.located(path=run) from None
    else:
        missing = [o for o, v in (("--model", model), ("--gpu", gpu), ("--tokens", tokens), ("--seq-len", seq_len))
                   if not v and v != 0]
        if missing:
            raise click.UsageError(f"give {', '.join(missing)} (the what-if form)")
        assert model is not None and gpu is not None and seq_len is not None
        shape = model_shape(load_config(model), kv_dtype=kv_dtype)
        spec = gpu_spec(gpu)
        if achievable is not None:
            spec = dataclasses.replace(spec, achievable=achievable)
        layout = Layout(tp or 1, engine or "sglang", dp_attention, ep)
        src = "uniform routing U(T)" if distinct_experts is None else "given (--distinct-experts)"
        steps = [Step(f"{t}-token step" if t > 1 else "1-token step", batch, t, seq_len, distinct_experts, src)
                 for t in tokens]
        draft = None
        if draft_model is not None:
            if len(tokens) != 1 or tokens[0] < 2:
                raise click.UsageError("--draft-model takes one --tokens T >= 2 (the verify's tokens: T - 1 draft steps)")
            draft = model_shape(load_config(draft_model), kv_dtype=kv_dtype)
        rep = what_if(shape, model, spec, "--gpu", layout, steps,
                      None if allreduce_us is None else allreduce_us * 1000, draft)
    if as_json:
        echo(json.dumps(render_sol.to_json(rep), indent=2, allow_nan=False))
    else:
        render_sol.render(rep, _table_console())


def _run_inputs(run: str, spec: ExecutorSpec, config: dict[str, Any] | None, config_source: str | None,
                gpu: str | None, kv_dtype: str | None) -> tuple[pl.DataFrame, dict[str, Any], pl.DataFrame | None]:
    """What ``sol_of_run`` reads of ``run``: rank by rank where the rule says so (docs/scale.md: the collective
    rows and attribute's instances, after the manifest's own checks, so a run without a model config or a GPU
    is refused before its events are read), else the whole table (instances None: ``sol_of_run`` computes them)."""
    from tracekit.analyzers import ranked
    from tracekit.analyzers.sol.run import sol_preflight
    from tracekit.cli.common import _note_partial

    rr = rank_cli.ranked_run(run, spec)
    if rr is not None:
        _note_partial(rr)
        manifest = dict(rr.manifest)
        sol_preflight(manifest, config=config, config_source=config_source, gpu=gpu, kv_dtype=kv_dtype)
        try:
            with rank_cli.opened(spec, "sol") as ex:
                coll, instances = ranked.sol_inputs(rr, ex, say=rank_cli.progress())
            return coll, manifest, instances
        except ranked.Unsupported as why:
            rank_cli.whole_run_note(spec, "sol", str(why))
    r = rank_cli.load_whole(run, rr)
    if rr is None:
        _note_partial(r)
    return r.events, dict(r.manifest), None


def _calibrate(output: str) -> None:
    from tracekit.analyzers.sol.gpus import gpu_spec
    from tracekit.cli.common import _claim
    from tracekit.collectors.calibrate import calibrate_local, spec_toml
    from tracekit.errors import AnalysisError
    from tracekit.outputs import atomic_write

    with _claim(output, runs=False):
        echo("tracekit: measuring copy bandwidth and GEMM rates on the local GPU (about 10 s)...", err=True)
        cal = calibrate_local()
        try:
            base = gpu_spec(cal.device)
        except AnalysisError:
            base = None
        text = spec_toml(cal, base)
        with atomic_write(output) as tmp, open(tmp, "w") as fh:
            fh.write(text)
    fp8 = "n/a" if cal.fp8_flops is None else f"{cal.fp8_flops / 1e12:.0f}"
    ref = "" if base is None else (f" (datasheet {base.name}: {base.hbm_Bps / 1e9:.0f} GB/s, bf16 "
                                   f"{base.flops['bf16'] / 1e12:.0f} TFLOP/s)")
    echo(f"{cal.device}: copy {cal.hbm_Bps / 1e9:.0f} GB/s, bf16 GEMM {cal.bf16_flops / 1e12:.0f} TFLOP/s, "
               f"fp8 GEMM {fp8} TFLOP/s{ref} -> {output}")
