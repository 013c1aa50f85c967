"""The vLLM capture's driver process (spawned by the launcher instead of tracekit rank processes).

It runs vLLM's offline engine (``vllm.LLM``) with ``tensor_parallel_size`` = the capture's world:
vLLM starts its engine core and one worker process per rank, and its own allreduce runs between
them. tracekit's hooks are in the workers (the ``vllm.general_plugins`` entry point, with
``TRACEKIT_VLLM=1``), and the worker extension (collectors/vllm/worker.py) is how the driver
opens and closes the window on every worker. One capture cycle is one engine step
(``LLMEngine.step()``: one scheduler iteration); requests (random prompt ids, greedy,
``ignore_eos``) are kept ``concurrency`` in flight.

The driver speaks for every rank to the launcher (typed messages, collectors/messages.py): a
beat per rank after each step, the stages, a ``Done`` per rank with its shard's events, a
``Failed`` per rank when vLLM fails. The launcher maps every rank to this one process, so a dead
or silent driver is every rank's failure; Ctrl-C ends the window after the same step everywhere
(``Control.may_start``). vLLM's own speculative-decoding counters (``LLM.get_metrics()``) before
and after the window go into every rank's manifest beside what the hooks counted.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tracekit.collectors.capture import CaptureConfig, log_path
from tracekit.collectors.messages import WINDOW, WINDOW_DONE, Beat, Done, Failed, Stage, Status
from tracekit.process_exit import exit_now

if TYPE_CHECKING:
    from tracekit.collectors.vllm.config import VllmConfig

METRICS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
           "vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_accepted_tokens_per_pos")


def spec_metrics(metrics: Any) -> dict[str, Any]:
    """vLLM's spec-decode counters from ``LLM.get_metrics()``: name -> value (per position: a list)."""
    out: dict[str, Any] = {}
    for m in metrics:
        name = getattr(m, "name", "")
        if name not in METRICS:
            continue
        short = name.removeprefix("vllm:spec_decode_")
        if hasattr(m, "values"):  # a Vector (per position)
            out[short] = [int(v) for v in m.values]
        else:
            out[short] = int(getattr(m, "value", 0))
    return out


def metrics_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in after.items():
        b = before.get(k, [] if isinstance(v, list) else 0)
        if isinstance(v, list):
            b = list(b) + [0] * (len(v) - len(b))
            out[k] = [x - y for x, y in zip(v, b, strict=False)]
        else:
            out[k] = v - b
    return out


def cpu_binding(world: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` giving each CPU worker a core of its own ("0|1" for two ranks)."""
    n = os.cpu_count() or 1
    return "|".join(str(r % n) for r in range(world))


class Requests:
    """Random-prompt requests kept ``concurrency`` in flight (at most ``total`` in all, when set)."""

    def __init__(self, engine: Any, cfg: Any, vocab: int) -> None:
        from vllm import SamplingParams

        self.engine, self.cfg = engine, cfg
        self.rng = random.Random(cfg.seed)
        self.vocab = vocab
        self.sent = 0
        self.in_flight = 0
        self.params = SamplingParams(max_tokens=cfg.output_len, temperature=0.0, ignore_eos=True, detokenize=False)

    def refill(self) -> None:
        while self.in_flight < self.cfg.concurrency and (self.cfg.requests is None or self.sent < self.cfg.requests):
            ids = [self.rng.randrange(3, self.vocab) for _ in range(self.cfg.input_len)]
            self.engine.add_request(f"tk-{self.sent}", {"prompt_token_ids": ids}, self.params)
            self.sent += 1
            self.in_flight += 1

    def step(self) -> bool:
        """One engine step (False: nothing left to run)."""
        self.refill()
        if not self.engine.has_unfinished_requests():
            return False
        self.in_flight -= sum(1 for out in self.engine.step() if out.finished)
        return True


def driver_main(world: int, kind: str, cc: CaptureConfig, shard_dir: str, q: Any, ctl: Any = None) -> None:
    """Body of the driver process; always ends in os._exit."""
    from tracekit.collectors.launcher import short_error
    from tracekit.collectors.rank_process import _die_with_launcher, redirect_output

    code = 0
    _die_with_launcher()
    try:
        redirect_output(log_path(Path(shard_dir), 0))
        _drive(world, kind, cc, Path(shard_dir), q, ctl)
    except BaseException as exc:
        traceback.print_exc()
        for r in range(world):
            q.put(Failed(r, short_error(f"{exc.__class__.__name__}: {exc}"), False))
        code = 1
    finally:
        with contextlib.suppress(Exception):
            q.close()
            q.join_thread()
    exit_now(code)


def _drive(world: int, kind: str, cc: CaptureConfig, shard_dir: Path, q: Any, ctl: Any) -> None:
    from tracekit.collectors.timing import AFTER, BEFORE
    from tracekit.collectors.vllm.plugin import ENV
    from tracekit.collectors.vllm.presets import PRESETS, materialize, parse_spec
    from tracekit.collectors.vllm.worker import capture_spec

    ranks = range(world)

    def every(make: Any) -> None:
        for r in ranks:
            q.put(make(r))

    every(Beat)
    cfg = cast("VllmConfig", cc.workload)
    os.environ[ENV] = "1"  # the plugin installs the hooks in every vLLM process started from here
    # the engine core in this process: LLMEngine.step() is then exactly one scheduler iteration (schedule, run
    # on every worker, update), so the window's steps, the workers' hooks and vLLM's metrics cover the same steps
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if kind == "cpu":
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_binding(world))
    from vllm import LLM

    work = Path(tempfile.mkdtemp(prefix="tracekit-vllm-"))
    model, speculative, dummy = materialize(cfg.model, parse_spec(cfg.spec), cfg.num_spec_tokens, work)
    every(lambda r: Stage(r, "pg", f"starting vLLM (model {cfg.model}, spec {cfg.spec}, TP {world})"))
    kwargs: dict[str, Any] = {"load_format": "dummy"} if dummy else {}
    llm = LLM(model=model, skip_tokenizer_init=True, dtype=cfg.dtype, max_model_len=cfg.max_model_len,
              enforce_eager=kind == "cpu", max_num_seqs=cfg.concurrency, gpu_memory_utilization=cfg.kv_fraction,
              tensor_parallel_size=world, speculative_config=speculative, disable_log_stats=False,
              async_scheduling=False, seed=cfg.seed,
              worker_extension_cls="tracekit.collectors.vllm.worker.TracekitWorker", **kwargs)
    infos = llm.collective_rpc("tracekit_setup")
    missing = [i["rank"] for i in infos if not i["hooks"]]
    if missing:
        raise RuntimeError(f"tracekit's hooks are not installed in vLLM worker(s) {missing}: {infos[0]['errors']}")
    import vllm

    every(lambda r: Stage(r, "ready", f"vLLM {vllm.__version__} ready ({len(infos[0]['hooks'])} hooks per worker)"))
    engine = llm.llm_engine
    vocab = int(PRESETS[cfg.model]["vocab_size"]) if cfg.model in PRESETS else 1000
    reqs = Requests(engine, cfg, vocab)

    def step(c: int) -> bool:
        if not reqs.step():
            return False
        every(lambda r: Beat(r, c))
        return True

    def may(c: int) -> bool:
        return ctl is None or all(ctl.may_start(r, c) for r in ranks)

    spec = capture_spec(cc, str(shard_dir), world)
    skip = min(2, max(cc.warmup - 1, 0))
    for c in range(cc.warmup):
        if not may(c):
            break
        llm.collective_rpc("tracekit_timer", args=(BEFORE if c >= skip else None,))
        if not step(c):
            break
    before = spec_metrics(llm.get_metrics())
    llm.collective_rpc("tracekit_start", args=(spec,))
    every(lambda r: Stage(r, WINDOW, "profiling window started"))
    done, aborted = 0, None
    total = cc.warmup + cc.cycles
    try:
        for c in range(cc.warmup, total):
            if not may(c):
                break
            if not step(c):
                aborted = f"every request finished after {done} of {cc.cycles} steps (--requests {cfg.requests})"
                break
            done += 1
    except Exception as exc:
        from tracekit.collectors.launcher import short_error

        aborted = short_error(f"{exc.__class__.__name__}: {exc}")
    after_m = spec_metrics(llm.get_metrics())
    stopped = llm.collective_rpc("tracekit_stop", args=(spec,))
    every(lambda r: Stage(r, WINDOW_DONE, f"window done: {done}/{cc.cycles} cycles"))
    if aborted:
        every(lambda r: Status(r, f"window ended early after {done}/{cc.cycles} cycles: {aborted[:200]}"))
    elif done == cc.cycles and (ctl is None or int(ctl.stop_at.value) < 0):
        llm.collective_rpc("tracekit_timer", args=(AFTER,))  # the unprofiled reference after the window
        for c in range(total, total + cc.after):
            if not step(c):
                break
        llm.collective_rpc("tracekit_timer", args=(None,))
    import json

    hf_config = json.loads((Path(model) / "config.json").read_text())  # what tracekit sol RUN reads
    engine_info = {"name": "vllm", "model": {"name": cfg.model, "hf_config": hf_config},
                   "vllm_version": vllm.__version__, "speculative_config": speculative, "tensor_parallel_size": world,
                   "requests_sent": reqs.sent,
                   "engine_metrics": {"source": "LLM.get_metrics() in the driver process, before and after the window",
                                      "window": metrics_delta(before, after_m), "before": before, "after": after_m},
                   "workers": [{"rank": s["rank"], **s["counts"]} for s in stopped]}
    events = llm.collective_rpc("tracekit_write", args=(spec, done, aborted, engine_info))
    for info, n in zip(infos, events, strict=True):  # a rank outside --ranks writes nothing: done with 0 rows
        q.put(Done(int(info["rank"]), int(n)))
    with contextlib.suppress(Exception):
        llm.llm_engine.engine_core.shutdown()
