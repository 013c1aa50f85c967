"""The worker extension the vLLM capture drives: ``LLM(worker_extension_cls=...)`` mixes
:class:`TracekitWorker` into every vLLM worker, and the driver calls its methods on all of them
with ``LLM.collective_rpc(name, args=...)`` (arguments are plain dicts: vLLM serialises them).

Each worker is one rank of the capture: ``tracekit_start`` takes its manifest section (the
environment *this* worker process saw) and starts a ProfilerSession in it; ``tracekit_stop``
ends the window; ``tracekit_write`` finalizes its events and writes its shard through the same
code as a tracekit rank process (collectors/rank_process.py ``_Shard``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tracekit.collectors.capture import CaptureConfig, window_label
from tracekit.collectors.vllm import runtime
from tracekit.collectors.vllm.config import VllmConfig


def capture_spec(cc: CaptureConfig, shard_dir: str, world: int) -> dict[str, Any]:
    """The capture configuration as plain data for ``collective_rpc``."""
    return {"out": cc.out, "world": world, "ranks": cc.ranks, "cycles": cc.cycles, "warmup": cc.warmup,
            "after": cc.after, "device": cc.device, "keep_json": cc.keep_json, "profile": cc.profile,
            "timeout_s": cc.timeout_s, "workload": cc.workload.to_dict(), "shard_dir": shard_dir}


def _config(spec: dict[str, Any]) -> CaptureConfig:
    return CaptureConfig(out=spec["out"], world=spec["world"], ranks=spec["ranks"], cycles=spec["cycles"],
                         warmup=spec["warmup"], after=spec["after"], device=spec["device"],
                         keep_json=spec["keep_json"], profile=spec["profile"], timeout_s=spec["timeout_s"],
                         workload=VllmConfig(**spec["workload"]))


class _Described:
    """What a rank_process shard needs of a workload: its timer and its description."""

    def __init__(self, timer: Any, info: dict[str, Any]) -> None:
        self.timer = timer
        self.info = info

    def describe(self) -> dict[str, Any]:
        return self.info


class TracekitWorker:
    """Mixed into vLLM's worker class (``self`` is the worker: ``rank``, ``device``, ``model_runner``)."""

    _tk: dict[str, Any]

    def _tk_rank(self) -> int:
        rank = getattr(self, "rank", None)
        if isinstance(rank, int):
            return rank
        import torch.distributed as dist

        return dist.get_rank()

    def _tk_cuda(self) -> bool:
        dev = getattr(self, "device", None)
        return getattr(dev, "type", "cpu") == "cuda"

    def tracekit_setup(self) -> dict[str, Any]:
        from tracekit.collectors.timing import PhaseTimer

        hooks = runtime.install(by="worker extension")  # the plugin did it already when TRACEKIT_VLLM=1 (a no-op)
        runtime.STATE.timer = PhaseTimer(self._tk_cuda())
        self._tk = {}
        return {"rank": self._tk_rank(), "pid": os.getpid(), "hooks": hooks, "errors": list(runtime.STATE.errors),
                "installed_by": runtime.STATE.installed_by}

    def tracekit_timer(self, window: str | None) -> None:
        """Time the phases of the next steps under ``window`` (None: stop timing)."""
        runtime.flush()
        runtime.STATE.timer.window = window

    def tracekit_start(self, spec: dict[str, Any]) -> bool:
        from tracekit.collectors.manifest import rank_section
        from tracekit.collectors.session import ProfilerSession

        cc, rank = _config(spec), self._tk_rank()
        runtime.flush()
        runtime.STATE.counts = runtime.Counts()
        runtime.STATE.calls = {}
        runtime.STATE.graphed = {}
        if rank not in cc.captured(spec["world"]):
            self._tk = {}
            runtime.STATE.timer.window = window_label(cc.profile)
            return False
        cuda = self._tk_cuda()
        dev_index = getattr(getattr(self, "device", None), "index", None) if cuda else None
        self._tk = {"start": rank_section(rank, spec["world"], dev_index, "start"), "dev_index": dev_index,
                    "session": ProfilerSession(rank, cuda, mode=cc.profile)}
        self._tk["session"].start()
        runtime.STATE.timer.window = window_label(cc.profile)
        return True

    def tracekit_stop(self, spec: dict[str, Any]) -> dict[str, Any]:
        """End the window on this worker; returns what its hooks counted in it."""
        from tracekit.collectors.manifest import rank_section

        runtime.flush()
        runtime.STATE.timer.window = None
        if self._tk:
            self._tk["session"].stop()
            self._tk["end"] = rank_section(self._tk_rank(), spec["world"], self._tk["dev_index"], "end")
        self._tk_counts = {"counts": runtime.STATE.counts.to_dict(), "calls": dict(runtime.STATE.calls),
                           "graphed": dict(runtime.STATE.graphed)}
        return {"rank": self._tk_rank(), **self._tk_counts}

    def tracekit_write(self, spec: dict[str, Any], done: int, aborted: str | None,
                       engine: dict[str, Any]) -> int:
        """Finalize this worker's window and write its shard; returns its event count (0: not captured)."""
        from tracekit.collectors.rank_process import _Shard
        from tracekit.collectors.timing import REFERENCE_POOL

        runtime.flush()
        runtime.STATE.timer.window = None
        if not self._tk:
            return 0
        cc, rank = _config(spec), self._tk_rank()
        info = {**cc.workload.to_dict(), **engine, "hooks": list(runtime.STATE.installed),
                "hooks_installed_by": runtime.STATE.installed_by,
                "hook_errors": list(runtime.STATE.errors), "window_hooks": self._tk_counts}
        shard = _Shard(rank, spec["world"], cc, _Described(runtime.STATE.timer, info), self._tk["session"], None, None,
                       self._tk["start"], self._tk["end"], done, aborted, getattr(self, "device", "cpu"),
                       Path(spec["shard_dir"]))
        shard.write(runtime.STATE.timer.stats(pool=REFERENCE_POOL) if aborted is None else {})
        self._tk = {}
        return int(shard.rows)
