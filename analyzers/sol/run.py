"""Floors beside a run's measured phases: ``tracekit sol RUN``.

What the run gives: the model config (``--model``, or the config its manifest records: the
built-in workload's ``ranks[r].workload.config``, a live SGLang capture's ``capture.model_config`` (the
server's config.json; its ``server_args`` give TP, DP-attention and EP), the transformers engine's
``ranks[r].workload.model.hf_config``: the model's whole config, or ``model.config`` of its presets in
older captures; the vLLM engine's ``hf_config`` at the same place), the GPU (``--gpu``, or the device name in the manifest),
TP = the world size, each phase instance's facts (batch, tokens, context), the measured distinct
experts per MoE layer where the capture recorded them (the built-in workload:
``ranks[r].workload.distinct_experts``), the transfer part of every matched collective (for the
allreduce fit) and the measured times: the median instance of each phase (its unprofiled timer
where the capture has one, else the profiled GPU window) and the median per instance of each
bucket of ``tracekit attribute``.

A phase instance is one or more forwards: the built-in workload's ``draft`` runs the draft model
``draft_steps`` times, 1 token per sequence each; ``draft_extend`` the draft model once over the
verified tokens; ``verify``, ``decode`` and ``prefill`` the target once. Other engines' draft
phases have no floor (the draft model's config is not in the run): said per phase.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

import polars as pl

from tracekit.analyzers.sol.allreduce import RingFit, RingModel, fit_ring, ring_model
from tracekit.analyzers.sol.config import ModelShape, model_shape
from tracekit.analyzers.sol.floor import PhaseFloor, phase_floor, repeated
from tracekit.analyzers.sol.gpus import GpuSpec, gpu_spec
from tracekit.analyzers.sol.model import Layout, Step
from tracekit.analyzers.sol.report import (
    MODELLED,
    BucketSol,
    InstanceSol,
    PhaseSol,
    SolReport,
    pct_of_sol,
)
from tracekit.buckets import BUCKETS, CATEGORIES, VOCABULARY, Kind
from tracekit.errors import AnalysisError

T = TypeVar("T")

PHASES: Final = ("verify", "decode", "draft", "draft_extend", "prefill")
# sol bucket -> the attribution bucket columns it is measured by (tracekit/buckets.py's vocabulary)
MEASURED_BY: Final = {
    **{b: (b,) for b in MODELLED},
    "launch_idle": tuple(b.name for b in VOCABULARY if b.kind is Kind.GAP and b.name in BUCKETS),
    "other": tuple(b for b in BUCKETS if b not in MODELLED and b in CATEGORIES),
}
GEMM_GROUP: Final = ("moe", "gemm")  # checked together against their floors (_bucket_sols)
TRANSFORMERS_FAMILY: Final = {"deepseek_v3": "DeepseekV3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                              "mixtral": "MixtralForCausalLM", "llama": "LlamaForCausalLM"}


@dataclass(frozen=True)
class RunModel:
    """The model a run ran, as the floor needs it."""

    target: ModelShape
    draft: ModelShape | None
    source: str  # where the config came from
    engine: str  # sharding rules
    draft_forwards: int  # draft model forwards per draft instance (built-in workload: draft_steps; SGLang:
    # speculative_num_steps; else 1, unless the phase's tokens per sequence say more: sol_of_run)


def _workload_section(manifest: dict[str, Any]) -> dict[str, Any] | None:
    for sec in (manifest.get("ranks") or {}).values():
        w = sec.get("workload") if isinstance(sec, dict) else None
        if isinstance(w, dict):
            return w
    return None


def _capture(manifest: dict[str, Any]) -> dict[str, Any]:
    cap = manifest.get("capture")
    return cap if isinstance(cap, dict) else {}


def workload_config(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The built-in workload's target model as a config.json (``TracekitWorkload``, its dtype) where the run
    is a built-in capture; a ``--model`` file for a run of the same workload that does not record it (traces
    ingested without the capture's manifest)."""
    w = _workload_section(manifest) or {}
    if w.get("name") != "builtin" or not isinstance(w.get("config"), dict):
        return None
    return {**w["config"], "torch_dtype": str(w.get("dtype", "bfloat16")), "architectures": ["TracekitWorkload"]}


def run_model(manifest: dict[str, Any], config: dict[str, Any] | None, config_source: str | None,
              kv_dtype: str | None) -> RunModel:
    """The target (and, for the built-in workload, the draft) of a run (module doc)."""
    w = _workload_section(manifest) or {}
    name = w.get("name")
    cap = _capture(manifest)
    if config is None and isinstance(cap.get("model_config"), dict):
        return RunModel(model_shape(dict(cap["model_config"]), kv_dtype=kv_dtype), None,
                        "the run's manifest (the SGLang server's config.json)", "sglang", 1)
    if config is not None:
        return RunModel(model_shape(config, kv_dtype=kv_dtype), None, config_source or "--model",
                        "sglang" if name != "builtin" else "workload", 1)
    cfg = workload_config(manifest)
    if cfg is not None:
        target = model_shape(cfg, kv_dtype=kv_dtype)
        draft = model_shape({**cfg, "architectures": ["TracekitWorkloadDraft"]}, kv_dtype=kv_dtype)
        return RunModel(target, draft, "the run's manifest (built-in workload config)", "workload",
                        int(cfg.get("draft_steps", 1)))
    model = w.get("model") if isinstance(w.get("model"), dict) else None
    if name in ("transformers", "vllm") and model is not None and isinstance(model.get("hf_config"), dict):
        return RunModel(model_shape(dict(model["hf_config"]), kv_dtype=kv_dtype), None,
                        f"the run's manifest ({name} model {model.get('name')}: its config.json)", "sglang", 1)
    if name == "transformers" and model is not None and isinstance(model.get("config"), dict):
        cfg = dict(model["config"])
        arch = TRANSFORMERS_FAMILY.get(str(model.get("family")), str(model.get("class", "")))
        cfg.setdefault("architectures", [arch])
        cfg.setdefault("torch_dtype", str(w.get("dtype", "bfloat16")))
        return RunModel(model_shape(cfg, kv_dtype=kv_dtype), None,
                        f"the run's manifest (transformers model {model.get('name')})", "sglang", 1)
    raise AnalysisError("the run records no model config (only built-in, transformers and vllm captures do): "
                        "pass --model CONFIG.json")


def device_name(manifest: dict[str, Any]) -> str | None:
    for sec in (manifest.get("ranks") or {}).values():
        gpu = sec.get("gpu") if isinstance(sec, dict) else None
        if isinstance(gpu, dict) and gpu.get("name"):
            return str(gpu["name"])
    return None


def distinct_by_instance(manifest: dict[str, Any]) -> dict[tuple[int, str, int], float]:
    """(rank, phase, cycle) -> distinct routed experts per MoE layer (mean over layers), as the capture
    recorded them (``ranks[r].workload.distinct_experts``: phase -> cycle -> per-layer counts)."""
    out: dict[tuple[int, str, int], float] = {}
    for r, sec in (manifest.get("ranks") or {}).items():
        w = sec.get("workload") if isinstance(sec, dict) else None
        rec = w.get("distinct_experts") if isinstance(w, dict) else None
        if not isinstance(rec, dict):
            continue
        for ph, cycles in (rec.get("counts") or {}).items():
            for cyc, layers in cycles.items():
                if layers:
                    out[(int(r), str(ph), int(cyc))] = statistics.fmean(float(x) for x in layers)
    return out


def collective_fit(events: pl.DataFrame, world: int, instances: pl.DataFrame | None = None,
                   message_bytes: dict[str, float] | None = None,
                   fallback_beta_Bps: float | None = None) -> tuple[RingFit | None, str]:
    """The ring fit to the transfer part of the run's allreduces (matched on every rank) over their message
    sizes: the sizes the run records (``coll_bytes``), else, where ``message_bytes`` gives a phase's bytes per
    token per forward (hidden x activation bytes / forwards), the phase instance's tokens times it."""
    from tracekit.analyzers.coll_match import matched_collectives

    if world < 2:
        return None, "one rank: no allreduce"
    m = matched_collectives(events)
    m = m.filter(pl.col("coll_op") == "allreduce") if not m.is_empty() else m
    if m.is_empty():
        return None, "no allreduce matched on every rank"
    sizes = events.filter(pl.col("coll_bytes").is_not_null() & (pl.col("coll_bytes") > 0))
    how = "recorded message sizes"
    if not sizes.is_empty():
        m = m.join(sizes.select("rank", "start_ns", "coll_bytes"), on=["rank", "start_ns"], how="inner")
    elif message_bytes and instances is not None and not instances.is_empty():
        per = pl.DataFrame({"phase": list(message_bytes), "_bpt": list(message_bytes.values())},
                           schema={"phase": pl.String, "_bpt": pl.Float64})
        facts = instances.select("phase_id", "num_tokens").join(
            instances.select("phase_id", "phase").join(per, on="phase", how="inner"), on="phase_id")
        m = m.join(facts.select("phase_id", (pl.col("num_tokens") * pl.col("_bpt")).alias("coll_bytes")),
                   on="phase_id", how="inner").filter(pl.col("coll_bytes").is_not_null())
        how = "message sizes from the model (the phase's tokens per forward x hidden x 2 B; the run records none)"
    else:
        return None, "the run records no allreduce message sizes"
    if m.is_empty():
        return None, "no allreduce with a known message size"
    fit = fit_ring(world, m.get_column("coll_bytes").cast(pl.Float64).to_list(),
                   m.get_column("transfer_ns").cast(pl.Float64).to_list(), fallback_beta_Bps)
    if fit is None:
        n = m.get_column("coll_bytes").n_unique()
        return None, f"{n} allreduce message size{'s' if n != 1 else ''} in the run ({how}; a fit needs 2)"
    return fit, how


def _median_int(values: list[int]) -> int:
    return round(statistics.median(values))


def _group_floor(f: PhaseFloor, group: tuple[str, ...]) -> int:
    return sum(b.floor_ns for b in f.buckets if b.bucket in group)


def _bucket_sols(f: PhaseFloor, inst: pl.DataFrame, floors: list[PhaseFloor], forwards: int) -> tuple[BucketSol, ...]:
    """Per bucket: the floor of the median step (``f``, all forwards), the median per instance of the bucket's
    exclusive time, and whether any instance beat its own floor. Exposed allreduce can legitimately fall
    below the chain's floor where compute overlaps it: the allreduce check reads the kernels' transfer time
    (kernel time minus the wait for the last rank) instead. MoE and dense GEMM are checked together
    (``GEMM_GROUP``): which of the two an engine's router and shared experts run in depends on its fusions."""
    out = []
    for b, cols in MEASURED_BY.items():
        per = inst.select(pl.sum_horizontal([pl.col(f"{c}_ns") for c in cols])).to_series().to_list()
        measured = _median_int(per) if per else None
        bf = f.bucket(b)
        if bf is None:
            out.append(BucketSol(b, 0, "not modelled", measured, None, False))
            continue
        group = GEMM_GROUP if b in GEMM_GROUP else (b,)
        if b == "allreduce":
            check = inst.get_column("allreduce_transfer_ns").to_list()
        else:
            check = inst.select(pl.sum_horizontal([pl.col(f"{c}_ns") for c in group])).to_series().to_list()
        beaten = any(v < _group_floor(fl, group) * forwards for v, fl in zip(check, floors, strict=True))
        out.append(BucketSol(b, bf.floor_ns, bf.bound, measured, pct_of_sol(bf.floor_ns, measured), beaten))
    return tuple(out)


def _gpu_of(manifest: dict[str, Any], gpu: str | None) -> tuple[GpuSpec, str | None]:
    """The GPU spec of ``--gpu`` or of the run's device name, and that name."""
    dev = device_name(manifest)
    if gpu is None and dev is None:
        raise AnalysisError("the run's manifest names no GPU (a CPU run?): pass --gpu NAME or --gpu SPEC.toml")
    return gpu_spec(gpu if gpu is not None else str(dev)), dev


def sol_of_run(events: pl.DataFrame, manifest: dict[str, Any], *, run: str, config: dict[str, Any] | None = None,
               draft_config: dict[str, Any] | None = None,
               config_source: str | None = None, gpu: str | None = None, tp: int | None = None,
               engine: str | None = None, dp_attention: bool = False, ep: int = 1, kv_dtype: str | None = None,
               achievable: float | None = None, allreduce_ns: float | None = None,
               launch_latency_ns: int | None = None, instances: pl.DataFrame | None = None) -> SolReport:
    """``tracekit sol RUN`` (module doc). ``instances``: ``tracekit attribute``'s instance table when the caller
    has it already (the other analyses' "% of SOL")."""
    from tracekit.analyzers.attribution import attribute_report
    from tracekit.analyzers.buckets import DEFAULT_LAUNCH_LATENCY_NS
    from tracekit.analyzers.unprofiled import phase_timers

    rm = run_model(manifest, config, config_source, kv_dtype)
    if draft_config is not None:  # --draft-model: the engine's draft; a draft phase is its speculative steps
        steps_arg = _capture(manifest).get("server_args", {}).get("speculative_num_steps")
        rm = replace(rm, draft=model_shape(draft_config, kv_dtype=kv_dtype),
                     draft_forwards=int(steps_arg) if isinstance(steps_arg, int) and steps_arg > 0 else rm.draft_forwards,
                     source=rm.source + "; draft: --draft-model")
    spec, dev = _gpu_of(manifest, gpu)
    if achievable is not None:
        spec = replace(spec, achievable=achievable)
    world = int(manifest.get("world_size") or 1)
    args = _capture(manifest).get("server_args") or {}
    dp_attention = dp_attention or bool(args.get("enable_dp_attention"))
    if ep == 1 and isinstance(args.get("ep_size"), int) and args["ep_size"] > 1:
        ep = int(args["ep_size"])
    tp_arg = args.get("tp_size") if isinstance(args.get("tp_size"), int) else None
    layout = Layout(tp or tp_arg or world, engine or rm.engine, dp_attention, ep)
    if instances is None:
        instances = attribute_report(events, launch_latency_ns=launch_latency_ns or DEFAULT_LAUNCH_LATENCY_NS)[
            "instances"]
    inst_all = instances.filter(pl.col("gpu_events") > 0)
    per_token = {ph: rm.target.hidden * rm.target.act_bytes / (rm.draft_forwards if ph == "draft" else 1)
                 for ph in PHASES if rm.draft is not None or ph not in ("draft", "draft_extend")}
    fit, how = collective_fit(events, world, inst_all, per_token, spec.link_Bps)
    ring: RingModel = ring_model(layout.tp, spec.alpha_ns, spec.link_Bps, spec.link, fit, how, allreduce_ns)
    timers = phase_timers(manifest)
    distinct = distinct_by_instance(manifest)
    notes: list[str] = []
    phases = []
    present = [p for p in PHASES if p in set(inst_all.get_column("phase").to_list())]
    if not present:
        raise AnalysisError(f"no {', '.join(PHASES)} phase instances with GPU events in the run")
    for ph in present:
        inst = inst_all.filter(pl.col("phase") == ph)
        drafty = ph in ("draft", "draft_extend")
        shape = rm.draft if drafty else rm.target
        if shape is None:
            notes.append(f"{ph}: no floor: the run does not record its draft model's config")
            continue
        forwards = rm.draft_forwards if ph == "draft" else 1
        if ph == "draft" and rm.engine != "workload" and forwards == 1:  # one token per sequence per draft step
            per_seq = [(r["num_tokens"] or 0) / max(int(r["batch_size"] or 1), 1) for r in inst.iter_rows(named=True)]
            forwards = max(1, round(statistics.median(per_seq))) if per_seq else 1
        steps = []
        for row in inst.iter_rows(named=True):
            b = int(row["batch_size"] or 1)
            t = max(1, round((row["num_tokens"] or b) / b / forwards))
            d = distinct.get((int(row["rank"]), ph, int(row["cycle"] if row["cycle"] is not None else -1)))
            steps.append(Step(ph, b, t, int(row["seq_len"] or 0), d, "measured (router outputs, per instance)"
                              if d is not None else "uniform routing U(T)"))
        memo: dict[Step, PhaseFloor] = {}  # instances of one phase mostly share their step: one floor each
        floors = [memo[s] if s in memo else memo.setdefault(s, phase_floor(shape, layout, s, spec, ring)) for s in steps]
        measured_d = [s.distinct_experts for s in steps if s.distinct_experts is not None]
        med = Step(ph, _median_int([s.batch for s in steps]), _median_int([s.tokens for s in steps]),
                   _median_int([s.seq_len for s in steps]),
                   statistics.median(measured_d) if measured_d else None,
                   f"measured: median over {len(measured_d)} instances of the mean over MoE layers" if measured_d
                   else "uniform routing U(T)")
        f = phase_floor(shape, layout, med, spec, ring)
        if forwards > 1:
            f = repeated(f, forwards)
        windows = inst.get_column("gpu_window_ns").to_list()
        timer = timers.get(ph)
        if timer is not None:
            measured, clock = round(timer.unprofiled_ns), f"unprofiled timer, {timer.clock}"
        else:
            measured, clock = _median_int(windows), "profiled GPU window"
        beaten = measured < f.floor_ns or any(w < fl.floor_ns * forwards for w, fl in zip(windows, floors, strict=True))
        note = f"{forwards} draft-model forwards per instance" if forwards > 1 else None
        per = tuple(InstanceSol(int(row["rank"]), row["cycle"], s.seq_len, fl.floor_ns * forwards, int(w))
                    for row, s, fl, w in zip(inst.iter_rows(named=True), steps, floors, windows, strict=True))
        phases.append(PhaseSol(ph, f, measured, clock, inst.height, pct_of_sol(f.floor_ns, measured), beaten,
                               _bucket_sols(f, inst, floors, forwards), note, per))
    if rm.target.experts and not distinct:
        notes.append("distinct experts per MoE layer: uniform routing U(T) (the run records no measured count)")
    return SolReport(run, rm.target.name, rm.source, rm.target.architecture, rm.target.quant.description, spec,
                     "--gpu" if gpu is not None else f"the run's device name {dev!r}", layout, ring, tuple(phases),
                     tuple(notes))



def try_sol(events: pl.DataFrame, manifest: dict[str, Any] | None, *, run: str | None = None,
            instances: pl.DataFrame | None = None) -> tuple[SolReport | None, str | None]:
    """The other analyses' "% of SOL": ``sol_of_run`` with everything from the run, or (None, why not) where the
    run does not say enough (no model config, no GPU, no phase with GPU events)."""
    if not manifest:
        return None, "the run has no manifest"
    return _why_not(lambda: sol_of_run(events, manifest, run=run or "", instances=instances))


def sol_preflight(manifest: dict[str, Any], *, config: dict[str, Any] | None = None, config_source: str | None = None,
                  gpu: str | None = None, kv_dtype: str | None = None) -> None:
    """The first steps of ``sol_of_run``, which read the manifest only (the model config, the GPU): their
    ``AnalysisError`` before any event is read (``tracekit sol`` of a run read rank by rank)."""
    run_model(manifest, config, config_source, kv_dtype)
    _gpu_of(manifest, gpu)


def sol_unavailable(manifest: dict[str, Any] | None) -> str | None:
    """``try_sol``'s reason where the manifest alone decides it (``sol_preflight``: no manifest, no model
    config, no GPU), whatever the events; None where the events may give a floor (a run read rank by rank
    then runs attribute's passes for the instances)."""
    if not manifest:
        return "the run has no manifest"
    return _why_not(lambda: sol_preflight(manifest))[1]


def _why_not(fn: Callable[[], T]) -> tuple[T | None, str | None]:
    try:
        return fn(), None
    except AnalysisError as exc:
        return None, exc.message
    except (KeyError, TypeError, ValueError, ArithmeticError) as exc:  # an addition never breaks the analysis
        return None, f"the speed-of-light model failed on this run ({exc.__class__.__name__}: {exc}); tracekit sol " \
                     "RUN --debug shows where"
