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
        last_input_throughput=0.0, last_prefill_stats_tic=time.perf_counter() - 1.0, last_prefill_tokens=0,
        num_prefill_tokens=0,
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
        s.last_prefill_tokens = s.num_prefill_tokens = new  # the previous prefill's tokens, over about 1 s
        stats = SimpleNamespace(num_new_seqs=seqs, log_input_tokens=new, log_hit_tokens=cached, running_bs=0,
                                new_token_ratio=0.7)
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
SERVER_ARGS = ("0.5.9",)
REPORTER_VERSIONS = ("0.5.23",)
POOL: Any = None


def wheel_dataclass(src: Path, name: str) -> Any:
    """The wheel's dataclass ``name`` of ``src`` with its own fields and defaults (module constants read; its
    methods and bases, __post_init__ included, left out)."""
    import dataclasses

    tree = ast.parse(src.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    cls.body = [b for b in cls.body if isinstance(b, ast.AnnAssign)] or [ast.Pass()]
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    bases = {b.id: wheel_dataclass(src, b.id) for b in cls.bases if isinstance(b, ast.Name) and b.id in classes}
    cls.bases = [ast.Name(id=b, ctx=ast.Load()) for b in bases]
    for b in cls.body:
        if isinstance(b, ast.AnnAssign):
            b.annotation = ast.Name(id="object", ctx=ast.Load())
    cls.decorator_list = [ast.Name(id="dataclass", ctx=ast.Load())]

    class NoneLike(Auto):
        def __repr__(self) -> str:
            return "None"

        def __getattr__(self, name: str) -> Any:
            return NoneLike()

        def __call__(self, *a: Any, **k: Any) -> Any:
            return None

        def __getitem__(self, k: Any) -> Any:
            return None

    ns: dict[str, Any] = {n.id: NoneLike() for n in ast.walk(cls) if isinstance(n, ast.Name)}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                ns[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    for b in ("dict", "list", "int", "str", "float", "bool", "tuple", "set", "None", "True", "False", "object"):
        ns.pop(b, None)
    ns.update(dataclass=dataclasses.dataclass, field=dataclasses.field, **bases)
    exec(compile(ast.fix_missing_locations(ast.Module(body=[cls], type_ignores=[])), str(src), "exec"), ns)
    return ns[name]


def finish_lines(root: Path, version: str) -> list[str]:
    """``--log-requests`` Finish lines: RequestLogger.log_finished_request (srt/utils/request_logger.py) with
    its level-0 metadata (_compute_metadata), on the wheel's GenerateReqInput dataclass and an ``out`` whose
    meta_info has the keys TokenizerManager builds, the speculative ones computed by its own
    _calculate_spec_decoding_metrics (speculative_num_draft_tokens=4)."""
    base = root / f"sg{version}" / "sglang/srt"
    logger_py = base / "utils/request_logger.py"
    to_string = load_function(logger_py, "_dataclass_to_string_truncated")
    env = {"_dataclass_to_string_truncated": to_string, "_extract_whitelisted_headers": lambda request: None}
    finished = load(logger_py, "RequestLogger", "log_finished_request", env)
    metadata = load(logger_py, "RequestLogger", "_compute_metadata", {})
    spec = load(base / "managers/tokenizer_manager.py", "TokenizerManager", "_calculate_spec_decoding_metrics", {})
    gen = wheel_dataclass(base / "managers/io_struct.py", "GenerateReqInput")
    out = []
    # completion tokens = 1 (from the prefill) + one bonus per verify + the accepted drafts
    for rid, prompt, completion, verify_ct, accepted, latency in (("a1b2", 128, 64, 24, 39, 1.52),
                                                                   ("c3d4", 512, 256, 100, 155, 5.87)):
        rl = SimpleNamespace(log_requests=True, log_requests_level=0, log_exceeded_ms=0, log_requests_format="text")
        rl.metadata = metadata(rl)
        meta = {"id": rid, "finish_reason": {"type": "length", "length": completion}, "prompt_tokens": prompt,
                "completion_tokens": completion, "cached_tokens": 0}
        tm = SimpleNamespace(server_args=SimpleNamespace(speculative_num_draft_tokens=4))
        recv = SimpleNamespace(spec_verify_ct=[verify_ct], spec_accepted_tokens=[accepted], completion_tokens=[completion],
                               spec_acceptance_histogram=None)
        spec(tm, meta, recv, 0)
        meta["e2e_latency"] = latency
        msgs: list[str] = []
        rl._log = msgs.append
        finished(rl, gen(rid=rid, text="Hello", sampling_params={"max_new_tokens": completion}),
                 {"text": "...", "output_ids": [1] * completion, "meta_info": meta})
        out += msgs
    return out


def load_function(path: Path, fn: str) -> Any:
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == fn)
    node.decorator_list = []
    import dataclasses

    ns: dict[str, Any] = {"dataclasses": dataclasses, "Any": Any, "Optional": Any, "Set": Any}
    exec(compile(ast.Module(body=[node], type_ignores=[]), f"{path}:{fn}", "exec"), ns)
    return ns[fn]


def fstring_line(path: Path, marker: str, names: dict[str, Any]) -> str:
    """The first f-string of ``path`` containing ``marker``, evaluated with ``names`` bound (the engine's own
    message, its values ours)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and marker in str(v.value)
                                                   for v in node.values):
            expr = ast.fix_missing_locations(ast.Expression(body=node))
            return str(eval(compile(expr, str(path), "eval"), dict(names)))
    raise SystemExit(f"no f-string with {marker!r} in {path}")


def startup_lines(root: Path, version: str) -> list[str]:
    """The scheduler's ``max_total_num_tokens=...`` line (srt/managers/scheduler.py) and
    ``Capture cuda graph bs [...]`` (srt/model_executor/cuda_graph_runner.py), their f-strings evaluated."""
    base = root / f"sg{version}" / "sglang/srt"
    sched = SimpleNamespace(max_total_num_tokens=100000, max_prefill_tokens=16384, max_running_requests=48,
                            server_args=SimpleNamespace(chunked_prefill_size=8192), device="cuda",
                            model_config=SimpleNamespace(context_len=8192))
    first = fstring_line(base / "managers/scheduler.py", "max_total_num_tokens=", {"self": sched, "avail_mem": 10.0})
    capture = fstring_line(base / "model_executor/cuda_graph_runner.py", "Capture cuda graph bs ",
                           {"self": SimpleNamespace(capture_bs=[1, 2, 4, 8, 12, 16, 24, 32, 40, 48])})
    return [first, capture]


def server_args_line(root: Path, version: str) -> str:
    """``logger.info(f"{server_args=}")`` (sglang/srt/entrypoints/engine.py) with the wheel's own ServerArgs
    dataclass: its fields and defaults as declared (module constants read; __post_init__, which fills
    derived paths, not run), the speculative settings the decode lines were made with."""
    server_args_cls = wheel_dataclass(root / f"sg{version}" / "sglang/srt/server_args.py", "ServerArgs")
    server_args = server_args_cls(model_path="/models/tiny-llama", speculative_algorithm="EAGLE3",
                                   speculative_draft_model_path="/models/tiny-eagle3", speculative_num_steps=3,
                                   speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    return f"{server_args=}"


def reporter_lines(root: Path, version: str) -> list[str]:
    """0.5.16+: SchedulerMetricsReporter.report_decode_stats (srt/managers/scheduler_components/metrics_reporter.py)
    with SGLANG_ENABLE_METRICS_DEVICE_TIMER on (its forward_occupancy_log_string and
    _ForwardOccupancyLogWindow.log_string), the pool's own PoolStats.get_decode_usage_msg_parts."""
    import enum
    import types

    base = root / f"sg{version}" / "sglang/srt/managers/scheduler_components"
    mode = enum.Enum("RaggedVerifyMode", "OFF CAP_ACCEPT")
    fake = types.ModuleType("sglang.srt.speculative.ragged_verify")
    fake.RaggedVerifyMode = mode  # type: ignore[attr-defined]
    fake.read_ragged_verify_mode = lambda: mode.OFF  # type: ignore[attr-defined]
    for name in ("sglang", "sglang.srt", "sglang.srt.speculative"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["sglang.srt.speculative.ragged_verify"] = fake
    pool_parts = load(base / "pool_stats_observer.py", "PoolStats", "get_decode_usage_msg_parts", {})
    window_log = load(base / "metrics_reporter.py", "_ForwardOccupancyLogWindow", "log_string", {})
    occupancy = load(base / "metrics_reporter.py", "SchedulerMetricsReporter", "forward_occupancy_log_string",
                     {"time": time})
    env = {"time": time, "RECORD_STEP_TIME": False, "LOG_FORWARD_ITERS": False, "ENABLE_METRICS_DEVICE_TIMER": True,
           "get_spec": lambda: SimpleNamespace(speculative_num_draft_tokens=4, speculative_num_steps=3),
           "get_disagg": lambda: SimpleNamespace(language_only=False, encoder_transfer_backend="zmq_to_scheduler"),
           "DisaggregationMode": SimpleNamespace(DECODE="decode", PREFILL="prefill", NULL=None)}
    report = load(base / "metrics_reporter.py", "SchedulerMetricsReporter", "report_decode_stats", env)
    out = []
    for (run, used, acc, ct, gen, graph), busy in zip(STEPS, (0.62, 0.71, 0.70, 0.83, 0.95, 0.97), strict=True):
        pool = SimpleNamespace(is_hybrid_swa=False, is_hybrid_ssm=False, is_hisparse=False, full_num_used=used,
                               full_token_usage=used / 100000, is_hybrid=False)
        sched = SimpleNamespace(
            running_batch=None, spec_algorithm=Spec(True), disaggregation_mode=None, waiting_queue=[],
            forward_ct=0, draft_worker=None,
            pool_stats_observer=SimpleNamespace(get_pool_stats=lambda pool=pool: SimpleNamespace(
                get_decode_usage_msg_parts=lambda pool=pool: pool_parts(pool))))
        now = time.monotonic_ns()
        window = SimpleNamespace(start_ns=now - 1_000_000_000, gpu_seconds=busy, idle_ns=0)
        window.log_string = lambda now_ns, ongoing_idle_ns=0, window=window: window_log(window, now_ns, ongoing_idle_ns)
        r = SimpleNamespace(
            scheduler=sched, current_scheduler_metrics_enabled=False, forward_ct_decode=0, decode_log_interval=40,
            is_stats_logging_rank=True, last_decode_stats_tic=time.perf_counter() - 1.0, num_generated_tokens=gen,
            step_time_dict=defaultdict(list), spec_num_accept_tokens=acc, spec_num_correct_drafts=acc - ct,
            spec_num_forward_ct=ct, spec_num_cap_tokens=0, spec_num_block_accept_tokens=0,
            spec_total_num_accept_tokens=0, spec_total_num_forward_ct=0, _graph_backend_label="cuda graph",
            enable_mfu_metrics=False, forward_pass_device_timer=Auto(), _scheduler_time_accounting=None,
            _forward_occupancy_log_window=window)
        r.forward_occupancy_log_string = lambda r=r: occupancy(r)
        batch = SimpleNamespace(reqs=[object()] * run, forward_iter=None)
        out.append(capture(report, r, graph, batch, gen))
    return out


def main() -> None:
    root, outdir = Path(sys.argv[1]), Path(sys.argv[2])
    for version, (rel, cls) in VERSIONS.items():
        src = root / f"sg{version}" / rel
        env = {"time": time, "defaultdict": defaultdict, "RECORD_STEP_TIME": False, "LOG_FORWARD_ITERS": False,
               "RadixCache": type("RadixCache", (), {}),
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
        lines = decode_lines(version, dec, spec=not version.startswith("0.4.0"), n_draft=4)
        if pre is not None:
            try:
                lines += prefill_lines(version, pre)
            except Exception as exc:  # a version whose prefill stats need more state: decode lines only
                print(f"{version}: prefill skipped ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        ts = 1756720800  # 2025-09-01 10:00:00 UTC
        stamped = [f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts + 10 * i))} TP0] {m}"
                   for i, m in enumerate(lines)]
        if version in SERVER_ARGS:  # the launcher process prints it, without a rank prefix
            stamped.append(f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts - 60))}] "
                           f"{server_args_line(root, version)}")
            stamped += [f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts - 30 + i))} TP0] {m}"
                        for i, m in enumerate(startup_lines(root, version))]
            stamped += [f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts + 100 + i))}] {m}"
                        for i, m in enumerate(finish_lines(root, version))]
        (outdir / f"sglang-{version}.log").write_text("\n".join(stamped) + "\n")
        print(f"sglang-{version}.log: {len(stamped)} lines")
    for version in REPORTER_VERSIONS:
        ts = 1756720800
        lines = reporter_lines(root, version)
        stamped = [f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(ts + 10 * i))} TP0] {m}"
                   for i, m in enumerate(lines)]
        (outdir / f"sglang-{version}.log").write_text("\n".join(stamped) + "\n")
        print(f"sglang-{version}.log: {len(stamped)} lines")


if __name__ == "__main__":
    main()
