"""Tiny real classes with SGLang's call shapes, doing real CPU torch work.

Not stand-ins for the contract (tests/test_sglang_contract.py checks the real
source): these only give tracekit's hooks something with the same method names,
parameters, batch fields and return shapes to wrap, and give the CPU profiler
real ops to record. Span names are SGLang's exact formats per version style:

- ``"0.5.9"``:  v1 EAGLEWorker, no SGLang spans
- ``"0.5.12"``: v2 worker, ``step[<MODE> bs=N]`` per ModelRunner.forward (draft steps ``step[DECODE``)
- ``"0.5.23"``: v2 worker, ``step[VERIFY bs=N]``, ``step[DRAFT bs=N]`` inside ``draft`` / ``draft_extend``

Used by the hook tests, the SGLang-format trace builders and the fake-free live
capture test server (tests/sglang_server.py).
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

HIDDEN = 64
# TK_SHAPES_DEVICE=cuda runs the forwards on GPU rank % device_count (the GPU check in
# bench/sglang_gpu_traces.sh); tests use the CPU.
DEVICE = os.environ.get("TK_SHAPES_DEVICE", "cpu")


class ForwardMode(enum.IntEnum):
    EXTEND = 1
    DECODE = 2
    MIXED = 3
    IDLE = 4
    TARGET_VERIFY = 5
    DRAFT_EXTEND = 6
    DRAFT_EXTEND_V2 = 7


@dataclass
class Req:
    rid: int


@dataclass
class ScheduleBatch:
    reqs: list[Req]
    forward_mode: ForwardMode
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor
    seq_lens_sum: int
    is_extend_in_batch: bool = False

    @classmethod
    def make(cls, bs: int, seq: int, mode: ForwardMode) -> ScheduleBatch:
        lens = torch.full((bs,), seq, dtype=torch.int64)
        return cls([Req(i) for i in range(bs)], mode, lens.clone(), lens, seq * bs)

    def batch_size(self) -> int:
        return len(self.reqs)


@dataclass
class ForwardBatch:
    forward_mode: ForwardMode
    batch_size: int
    seq_lens_sum: int
    extend_num_tokens: int | None = None


STYLE = {"style": "0.5.9"}


def _step_name(fb: ForwardBatch, is_draft: bool) -> str | None:
    style = STYLE["style"]
    if style == "0.5.12":
        if fb.forward_mode == ForwardMode.EXTEND:
            return f"step[EXTEND bs={fb.batch_size} toks={fb.extend_num_tokens or 0}]"
        return f"step[{fb.forward_mode.name} bs={fb.batch_size}]"
    if style == "0.5.23":
        stage = "DRAFT" if is_draft else ("VERIFY" if fb.forward_mode == ForwardMode.TARGET_VERIFY else fb.forward_mode.name)
        if fb.forward_mode == ForwardMode.EXTEND:
            return f"step[{stage} bs={fb.batch_size} toks={fb.extend_num_tokens or 0}]"
        return f"step[{stage} bs={fb.batch_size}]"
    return None


def _span(name: str | None) -> contextlib.AbstractContextManager[Any]:
    if name is None or not torch.autograd._profiler_enabled():
        return contextlib.nullcontext()
    return torch.profiler.record_function(name)


def stage_span(name: str) -> contextlib.AbstractContextManager[Any]:
    """0.5.23 spec_utils.spec_stage_span."""
    return _span(name if STYLE["style"] == "0.5.23" else None)


class ModelRunner:
    def __init__(self, tp_rank: int, is_draft_worker: bool, layers: int) -> None:
        self.tp_rank = tp_rank
        self.is_draft_worker = is_draft_worker
        g = torch.Generator().manual_seed(1 + tp_rank)
        self.device = torch.device(f"cuda:{tp_rank % torch.cuda.device_count()}") if DEVICE == "cuda" else torch.device("cpu")
        self.w = [(torch.randn(HIDDEN, HIDDEN, generator=g) / HIDDEN**0.5).to(self.device) for _ in range(layers)]
        self.graph_max_bs = 8

    def forward(self, forward_batch: ForwardBatch, skip_attn_backend_init: bool = False, pp_proxy_tensors: Any = None) -> tuple[torch.Tensor, bool]:
        with _span(_step_name(forward_batch, self.is_draft_worker)):
            rows = max(1, forward_batch.extend_num_tokens or forward_batch.batch_size)
            x = torch.ones(rows, HIDDEN, device=self.device)
            for w in self.w:
                x = torch.tanh(x @ w)
            graphed = forward_batch.forward_mode != ForwardMode.EXTEND and forward_batch.batch_size <= self.graph_max_bs
            return x, graphed


@dataclass
class EagleVerifyOutput:
    accept_length_per_req_cpu: list[int]


@dataclass
class GenerationBatchResult:
    next_token_ids: torch.Tensor | None = None
    accept_length_per_req_cpu: list[int] | None = None
    can_run_cuda_graph: bool = False
    accept_lens: torch.Tensor | None = None
    num_correct_drafts_per_req_cpu: list[int] | None = field(default=None)


def accepted(cycle: int, bs: int, steps: int) -> list[int]:
    """Deterministic accepted-draft counts per request for a cycle."""
    return [(cycle + i) % (steps + 1) for i in range(bs)]


class EAGLEWorker:
    """v1 shapes (0.5.4 - 0.5.10): forward_batch_generation / draft / verify(batch, spec_info) / extend."""

    def __init__(self, tp_rank: int, steps: int = 3, topk: int = 1, draft_tokens: int = 4) -> None:
        self.tp_rank = tp_rank
        self.topk = topk
        self.speculative_num_steps = steps
        self.speculative_num_draft_tokens = draft_tokens
        self.target = ModelRunner(tp_rank, False, layers=4)
        self.draft_runner = ModelRunner(tp_rank, True, layers=1)
        self.cycle = 0

    def forward_batch_generation(self, batch: ScheduleBatch) -> GenerationBatchResult:
        if batch.forward_mode == ForwardMode.EXTEND:
            out, _ = self.target.forward(ForwardBatch(ForwardMode.EXTEND, len(batch.reqs), batch.seq_lens_sum, batch.seq_lens_sum))
            self.forward_draft_extend(batch, out, None, batch.seq_lens_cpu)
            batch.forward_mode = ForwardMode.DECODE
            return GenerationBatchResult(can_run_cuda_graph=False)
        spec_info = self.draft(batch)
        _, res, _, graphed = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        self.cycle += 1
        return GenerationBatchResult(accept_length_per_req_cpu=res.accept_length_per_req_cpu, can_run_cuda_graph=graphed)

    def draft(self, batch: ScheduleBatch) -> torch.Tensor:
        bs = len(batch.reqs)
        x = torch.zeros(0)
        for _ in range(self.speculative_num_steps):
            x, _ = self.draft_runner.forward(ForwardBatch(ForwardMode.DECODE, bs * self.topk, batch.seq_lens_sum))
        return x

    def verify(self, batch: ScheduleBatch, spec_info: torch.Tensor) -> tuple[torch.Tensor, EagleVerifyOutput, None, bool]:
        bs = len(batch.reqs)
        fb = ForwardBatch(ForwardMode.TARGET_VERIFY, bs, batch.seq_lens_sum)
        out, graphed = self.target.forward(fb)
        acc = accepted(self.cycle, bs, self.speculative_num_steps)
        batch.seq_lens_sum += sum(acc) + bs
        return out, EagleVerifyOutput(acc), None, graphed

    def forward_draft_extend(self, batch: ScheduleBatch, hidden_states: torch.Tensor, next_token_ids: Any, seq_lens_cpu: Any, mm_input_embeds: Any = None) -> None:
        self.draft_runner.forward(ForwardBatch(ForwardMode.DRAFT_EXTEND, len(batch.reqs), batch.seq_lens_sum))

    def forward_draft_extend_after_decode(self, batch: ScheduleBatch) -> None:
        self.draft_runner.forward(ForwardBatch(ForwardMode.DRAFT_EXTEND, len(batch.reqs), batch.seq_lens_sum))


class EagleDraftWorker:
    def __init__(self, tp_rank: int, steps: int, topk: int) -> None:
        self.tp_rank = tp_rank
        self.topk = topk
        self.speculative_num_steps = steps
        self.draft_runner = ModelRunner(tp_rank, True, layers=1)

    def draft(self, batch: ScheduleBatch) -> torch.Tensor:
        x = torch.zeros(0)
        for _ in range(self.speculative_num_steps):
            x, _ = self.draft_runner.forward(ForwardBatch(ForwardMode.DECODE, len(batch.reqs) * self.topk, batch.seq_lens_sum))
        return x

    def _draft_extend_for_decode(self, batch: ScheduleBatch, batch_result: GenerationBatchResult) -> None:
        self.draft_runner.forward(ForwardBatch(ForwardMode.DRAFT_EXTEND_V2, len(batch.reqs), batch.seq_lens_sum))

    def _draft_extend_for_prefill(self, batch: ScheduleBatch, target_hidden_states: torch.Tensor, next_token_ids: Any) -> None:
        self.draft_runner.forward(ForwardBatch(ForwardMode.DRAFT_EXTEND_V2, len(batch.reqs), batch.seq_lens_sum))


class EAGLEWorkerV2:
    """v2 shapes (0.5.12 / 0.5.23): accept lens stay on the device; the scheduler hands
    them back one iteration later through on_verify_complete_cpu (overlap scheduling)."""

    def __init__(self, tp_rank: int, steps: int = 3, topk: int = 1, draft_tokens: int = 4) -> None:
        self.tp_rank = tp_rank
        self.topk = topk
        self.speculative_num_steps = steps
        self.speculative_num_draft_tokens = draft_tokens
        self.target = ModelRunner(tp_rank, False, layers=4)
        self.draft_worker = EagleDraftWorker(tp_rank, steps, topk)
        self.cycle = 0
        self.seen: list[list[int]] = []

    def forward_batch_generation(self, batch: ScheduleBatch, on_publish: Any = None) -> GenerationBatchResult:
        if batch.forward_mode == ForwardMode.EXTEND:
            out, _ = self.target.forward(ForwardBatch(ForwardMode.EXTEND, len(batch.reqs), batch.seq_lens_sum, batch.seq_lens_sum))
            with stage_span("draft_extend"):
                self.draft_worker._draft_extend_for_prefill(batch, out, None)
            batch.forward_mode = ForwardMode.DECODE
            return GenerationBatchResult(can_run_cuda_graph=False)
        with stage_span("draft"):
            self.draft_worker.draft(batch)
        res = self.verify(batch)
        with stage_span("draft_extend"):
            self.draft_worker._draft_extend_for_decode(batch, res)
        self.cycle += 1
        return res

    def verify(self, batch: ScheduleBatch, pp_proxy_tensors: Any = None, grammar_barrier: Any = None) -> GenerationBatchResult:
        bs = len(batch.reqs)
        _, graphed = self.target.forward(ForwardBatch(ForwardMode.TARGET_VERIFY, bs, batch.seq_lens_sum))
        acc = accepted(self.cycle, bs, self.speculative_num_steps)
        batch.seq_lens_sum += sum(acc) + bs
        # bonus included, like SGLang's accept_lens; a device tensor there, CPU here
        return GenerationBatchResult(accept_lens=torch.tensor([a + 1 for a in acc]), can_run_cuda_graph=graphed)

    def on_verify_complete_cpu(self, num_correct_drafts_per_req: list[int]) -> None:
        self.seen.append(list(num_correct_drafts_per_req))


def make_worker(style: str, tp_rank: int) -> EAGLEWorker | EAGLEWorkerV2:
    STYLE["style"] = style
    return EAGLEWorker(tp_rank) if style in ("0.5.2", "0.5.9") else EAGLEWorkerV2(tp_rank)


def drive(worker: EAGLEWorker | EAGLEWorkerV2, cycles: int, bs: int = 4, seq: int = 32) -> ScheduleBatch:
    """A scheduler loop: one prefill, then ``cycles`` decode cycles; v2 results processed one step late."""
    batch = ScheduleBatch.make(bs, seq, ForwardMode.EXTEND)
    worker.forward_batch_generation(batch)
    pending: list[GenerationBatchResult] = []
    for _ in range(cycles):
        res = worker.forward_batch_generation(batch)
        if isinstance(worker, EAGLEWorkerV2):
            pending.append(res)
            if len(pending) > 1:
                done = pending.pop(0)
                assert done.accept_lens is not None
                worker.on_verify_complete_cpu([int(x) - 1 for x in done.accept_lens.tolist()])
    if isinstance(worker, EAGLEWorkerV2):
        for done in pending:
            assert done.accept_lens is not None
            worker.on_verify_complete_cpu([int(x) - 1 for x in done.accept_lens.tolist()])
    return batch


@contextlib.contextmanager
def cpu_profile(path: str) -> Iterator[None]:
    """Record CPU activity and export a Kineto chrome trace (``.gz`` compresses)."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if DEVICE == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=acts)
    prof.start()
    try:
        yield
    finally:
        prof.stop()
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        prof.export_chrome_trace(path)


def trace_names(path: str) -> list[str]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    return [e.get("name", "") for e in doc.get("traceEvents", []) if e.get("cat") == "user_annotation"]


# --- private copies of these classes with tracekit's hook table pointed at them ---------------

# SGLang class (hook-table target) -> the class here with the same call shape
CLASS_MAP = {
    "sglang.srt.speculative.eagle_worker.EAGLEWorker": "EAGLEWorker",
    "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2": "EAGLEWorkerV2",
    "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker": "EagleDraftWorker",
    "sglang.srt.model_executor.model_runner.ModelRunner": "ModelRunner",
}


def fresh_copy(prefix: str = "sglang_shapes"):  # type: ignore[no-untyped-def]
    """A private copy of this module (patching it leaves every other copy's classes alone)."""
    import importlib.util
    import sys
    import uuid

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, __file__)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def retarget(specs, mod):  # type: ignore[no-untyped-def]
    """The hook-table rows ``specs`` with each SGLang class replaced by ``mod``'s counterpart."""
    import dataclasses

    out = []
    for s in specs:
        cls, _, method = s.target.rpartition(".")
        out.append(dataclasses.replace(s, target=f"{mod.__name__}.{CLASS_MAP[cls]}.{method}"))
    return out

