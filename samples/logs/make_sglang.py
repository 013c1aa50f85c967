"""Make samples/logs/sglang-<version>.log by running SGLang's own log functions from its wheels.

For each version, the function that prints the scheduler's Decode / Prefill batch lines is taken
from the wheel's source (ast: the function's own code, unchanged), executed with a stand-in
``self`` that holds the counters it reads, and its ``logger.info`` message is written with
SGLang's own logging format (``[%(asctime)s TP0] %(message)s``, datefmt ``%Y-%m-%d %H:%M:%S``,
sglang/srt/utils/common.py configure_logger). The stand-in raises after the message is logged,
so the metrics-export code that follows the log call does not run.

Usage: python samples/logs/make_sglang.py WHEEL_SRC_ROOT OUT_DIR
(WHEEL_SRC_ROOT holds sg<version>/sglang/... unpacked from `pip download --no-deps sglang==<version>`).
"""

from __future__ import annotations

import ast
import contextlib
import sys
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any


class Logged(Exception):
    pass


class Auto:
    """Any attribute, call or index: another Auto; falsy; len 0 (what the log code only passes through)."""

    def __getattr__(self, name: str) -> Any:
        return Auto()

    def __call__(self, *a: Any, **k: Any) -> Any:
        return Auto()

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __getitem__(self, k: Any) -> Any:
        return Auto()

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


def load(path: Path, cls: str, fn: str, env: dict[str, Any]) -> Any:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == fn:
                    item.decorator_list = []
                    for a in [*item.args.args, *item.args.kwonlyargs]:
                        a.annotation = None
                    item.returns = None
                    mod = ast.Module(body=[item], type_ignores=[])
                    names = {n.id for n in ast.walk(item) if isinstance(n, ast.Name)}
                    ns: dict[str, Any] = {n: Auto() for n in names if n not in dir(__builtins__)}
                    ns.update(env)
                    exec(compile(mod, f"{path}:{fn}", "exec"), ns)
                    return ns[fn]
    raise SystemExit(f"{cls}.{fn} not found in {path}")


class Spec:
    def __init__(self, on: bool) -> None:
        self.on = on

    def is_none(self) -> bool:
        return not self.on

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: False


def capture(fn: Any, self: Any, *args: Any, **kw: Any) -> str:
    msgs: list[str] = []

    def info(msg: str, *a: Any) -> None:
        msgs.append(msg % a if a else msg)
        raise Logged

    fn.__globals__["logger"] = SimpleNamespace(info=info, debug=info, warning=info)
    with contextlib.suppress(Logged):
        fn(self, *args, **kw)
    return msgs[0]


STEPS = [  # (running reqs, tokens used, accepted tokens, verify count, generated tokens, graph)
    (1, 1100, 110, 40, 110, True),
    (4, 3121, 438, 160, 438, True),
    (4, 5200, 420, 160, 420, True),
    (8, 6400, 800, 320, 800, True),
    (8, 12800, 780, 320, 780, False),
    (16, 20000, 1500, 640, 1500, False),
]


def base_self(version: str, spec: bool, n_draft: int) -> SimpleNamespace:
    sa = SimpleNamespace(decode_log_interval=40, speculative_num_steps=n_draft - 1,
                         speculative_num_draft_tokens=n_draft, language_only=False, enable_metrics=False)
    return SimpleNamespace(
        server_args=sa, spec_algorithm=Spec(spec), disaggregation_mode=None, device="cuda",
        waiting_queue=[], grammar_queue=[], enable_metrics=False, forward_ct=0, max_total_num_tokens=100000,
        is_hybrid_swa=False, is_hybrid_ssm=False, is_hybrid=False, step_time_dict=defaultdict(list),
        cum_spec_accept_length=0, cum_spec_accept_count=0, spec_total_num_accepted_tokens=0,
        spec_total_num_forward_ct=0, spec_total_num_accept_tokens=0, stats=Auto(), metrics_collector=Auto(),
        tree_cache=Auto(), token_to_kv_pool_allocator=Auto(), token_to_kv_pool=Auto(),
        _publish_kv_events=lambda: None, _emit_kv_metrics=lambda: None,
        running_batch=None, last_decode_stats_tic=0.0, num_generated_tokens=0, last_gen_throughput=0.0,
        last_input_throughput=0.0, last_prefill_stats_tic=0.0,
    )


def decode_lines(version: str, fn: Any, spec: bool, n_draft: int) -> list[str]:
    out = []
    for run, used, acc, ct, gen, graph in STEPS:
        s = base_self(version, spec, n_draft)
        # 0.4.0 times the interval with time.time(), later versions with time.perf_counter(): one second
        s.last_decode_stats_tic = (time.time() if version == "0.4.0" else time.perf_counter()) - 1.0
        s.num_generated_tokens = gen
        batch = SimpleNamespace(reqs=[object()] * run)
        s.running_batch = batch
        s._get_token_info = lambda used=used: (used, used / 100000, 0, 0)
        s.token_to_kv_pool_allocator = SimpleNamespace(available_size=lambda used=used: 100000 - used)
        s.token_to_kv_pool = s.token_to_kv_pool_allocator
        s.tree_cache = SimpleNamespace(evictable_size=lambda: 0)
        for name in ("spec_num_total_accepted_tokens", "spec_num_accepted_tokens", "spec_num_accept_tokens"):
            setattr(s, name, acc)
        for name in ("spec_num_total_forward_ct", "spec_num_forward_ct"):
            setattr(s, name, ct)
        if version.startswith("0.4.0"):
            out.append(capture(fn, s))
        elif POOL is not None:  # 0.5.12: the pool's own message parts (PoolStats.get_decode_usage_msg_parts)
            pool = SimpleNamespace(is_hybrid_swa=False, is_hybrid_ssm=False, is_hisparse=False, full_num_used=used,
                                   full_token_usage=used / 100000)
            s.get_pool_stats = lambda pool=pool: SimpleNamespace(get_decode_usage_msg_parts=lambda: POOL(pool))
            s.is_stats_logging_rank, s.current_scheduler_metrics_enabled, s.forward_ct_decode = True, False, 0
            s._graph_backend_label = "cuda graph"  # what its __init__ sets for device "cuda"
            s.enable_mfu_metrics = False
            batch.forward_iter = None
            out.append(capture(fn, s, graph, batch))
        else:
            out.append(capture(fn, s, graph, batch))
    return out


def prefill_lines(version: str, fn: Any) -> list[str]:
    out = []
    for seqs, new, cached in ((1, 128, 0), (4, 2048, 512)):
        s = base_self(version, True, 4)
        s._get_token_info = lambda new=new: (new, new / 100000, 0, 0)
        s.token_to_kv_pool_allocator = SimpleNamespace(available_size=lambda new=new: 100000 - new)
        s.token_to_kv_pool = s.token_to_kv_pool_allocator
        s.tree_cache = SimpleNamespace(evictable_size=lambda: 0)
        adder = SimpleNamespace(log_input_tokens=new, log_hit_tokens=cached)
        can_run = [SimpleNamespace(queue_time_start=0.0, queue_time_end=0.0)] * seqs
        stats = SimpleNamespace(num_new_seqs=seqs, log_input_tokens=new, log_hit_tokens=cached, running_bs=0)
        if version.startswith("0.4.0"):
            s.tree_cache = SimpleNamespace(evictable_size=lambda: 0)
            out.append(capture(fn, s, adder, can_run, 0, False))
        elif version.startswith(("0.4.", "0.5.2")):
            out.append(capture(fn, s, adder, can_run, 0))
        else:
            out.append(capture(fn, s, stats, False))
    return out


VERSIONS = {
    "0.4.0": ("sglang/srt/managers/scheduler.py", "Scheduler"),
    "0.4.6.post5": ("sglang/srt/managers/scheduler.py", "Scheduler"),
    "0.5.2": ("sglang/srt/managers/scheduler_metrics_mixin.py", "SchedulerMetricsMixin"),
    "0.5.9": ("sglang/srt/managers/scheduler_metrics_mixin.py", "SchedulerMetricsMixin"),
    "0.5.12": ("sglang/srt/observability/scheduler_metrics_mixin.py", "SchedulerMetricsMixin"),
}
DECODE_FN = {"0.5.12": "report_decode_stats"}
POOL: Any = None


def main() -> None:
    root, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    for version, (rel, cls) in VERSIONS.items():
        src = root / f"sg{version}" / rel
        env = {"time": time, "defaultdict": defaultdict, "RECORD_STEP_TIME": False, "LOG_FORWARD_ITERS": False,
               "DisaggregationMode": SimpleNamespace(DECODE="decode", PREFILL="prefill", NULL=None)}
        global POOL
        POOL = None
        if version == "0.5.12":
            POOL = load(root / f"sg{version}" / "sglang/srt/managers/scheduler_runtime_checker_mixin.py", "PoolStats",
                        "get_decode_usage_msg_parts", {})
        dec = load(src, cls, DECODE_FN.get(version, "log_decode_stats"), env)
        pre = None
        with contextlib.suppress(SystemExit):
            pre = load(src, cls, "log_prefill_stats", env)
        lines = []
        if pre is not None:
            try:
                lines += prefill_lines(version, pre)
            except Exception as exc:  # a version whose prefill stats need more state: decode lines only
                print(f"{version}: prefill skipped ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        lines += decode_lines(version, dec, spec=not version.startswith("0.4.0"), n_draft=4)
        ts = 1756720800  # 2025-09-01 10:00:00 UTC
        stamped = [f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts + 10 * i))} TP0] {m}"
                   for i, m in enumerate(lines)]
        (outdir / f"sglang-{version}.log").write_text("\n".join(stamped) + "\n")
        print(f"sglang-{version}.log: {len(stamped)} lines")


if __name__ == "__main__":
    main()
