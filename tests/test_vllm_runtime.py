"""The vLLM hooks (collectors/vllm/runtime.py) on stand-ins with the hooked methods' signatures.

The contract tests check the real signatures (tests/test_vllm_contract.py); the capture tests
run the hooks inside real vLLM workers (tests/test_vllm_capture.py). Here: which phase a step
is, the ranges and facts the hooks record, and the accept counts against vLLM's definitions.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tracekit.collectors.hooks import start_recording, stop_recording
from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.ranges import RangeRecorder
from tracekit.collectors.vllm import runtime
from tracekit.finalize.phases import parse_label


class Runner:  # GPUModelRunner's hooked methods
    def __init__(self) -> None:
        self.input_batch = SimpleNamespace(num_reqs=2, num_computed_tokens_cpu=np.array([40, 60, 0]))
        self.forwards = 0

    def execute_model(self, scheduler_output, intermediate_tensors=None):  # type: ignore[no-untyped-def]
        return self._model_forward(input_ids=None, positions=None)

    def _model_forward(self, input_ids=None, positions=None, **kw):  # type: ignore[no-untyped-def]
        self.forwards += 1
        return "hidden"

    def propose_draft_token_ids(self, scheduler_output, *args):  # type: ignore[no-untyped-def]
        return [[1, 2]]


class Sampler:  # RejectionSampler
    def forward(self, metadata, draft_probs, logits, sampling_metadata):  # type: ignore[no-untyped-def]
        return SimpleNamespace(sampled_token_ids=metadata.out)


ROWS = [HookSpec(f"{__name__}.Runner.execute_model", "step"), HookSpec(f"{__name__}.Runner._model_forward", "forward"),
        HookSpec(f"{__name__}.Runner.propose_draft_token_ids", "draft"), HookSpec(f"{__name__}.Sampler.forward", "accept")]


def so(tokens: dict[str, int], spec: dict[str, list[int]] | None = None, new: bool = False) -> SimpleNamespace:
    return SimpleNamespace(total_num_scheduled_tokens=sum(tokens.values()), num_scheduled_tokens=tokens,
                           scheduled_spec_decode_tokens=spec or {},
                           scheduled_new_reqs=[SimpleNamespace(req_id=r) for r in tokens] if new else [])


def iteration_details(s: SimpleNamespace) -> SimpleNamespace:
    """vllm.v1.utils.compute_iteration_details for these stand-ins: a new request is a context request."""
    new = {r.req_id for r in s.scheduled_new_reqs}
    ctx = [n for r, n in s.num_scheduled_tokens.items() if r in new]
    gen = [n for r, n in s.num_scheduled_tokens.items() if r not in new]
    return SimpleNamespace(num_ctx_requests=len(ctx), num_ctx_tokens=sum(ctx), num_generation_requests=len(gen),
                           num_generation_tokens=sum(gen))


@pytest.fixture
def hooked(monkeypatch: pytest.MonkeyPatch) -> Iterator[RangeRecorder]:
    fake = types.ModuleType("vllm.v1.sample.rejection_sampler")
    fake.PLACEHOLDER_TOKEN_ID = -1  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.sample"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.rejection_sampler", fake)
    utils = types.ModuleType("vllm.v1.utils")
    utils.compute_iteration_details = iteration_details  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.v1.utils", utils)
    monkeypatch.setattr(runtime, "STATE", runtime.State())
    for cls in (Runner, Sampler):
        for attr, fn in list(vars(cls).items()):
            if callable(fn):
                monkeypatch.setattr(cls, attr, fn)  # restored after the test
    assert runtime.install(ROWS) == [r.target for r in ROWS]
    assert runtime.install(ROWS) == [r.target for r in ROWS]  # idempotent
    rec = RangeRecorder()
    start_recording(rec, record_function=False)
    try:
        yield rec
    finally:
        stop_recording()


def test_steps_become_phases_with_facts_and_accept_lengths(hooked: RangeRecorder) -> None:
    runner, sampler = Runner(), Sampler()
    runner.execute_model(so({"a": 5, "b": 7}, new=True))  # prompts: prefill
    runner.execute_model(so({"a": 1, "b": 1}))  # one token each: decode
    runner.propose_draft_token_ids(so({"a": 1, "b": 1}))
    runner.execute_model(so({"a": 4, "b": 3}, {"a": [9, 9, 9], "b": [9, 9]}))  # drafts: verify
    # request a: 2 of 3 drafts accepted (+ bonus), b: 0 of 2 (its first token only)
    sampler.forward(SimpleNamespace(num_draft_tokens=[3, 2], out=torch.tensor([[5, 6, 7, -1], [8, -1, -1, -1]])),
                    None, None, None)
    runner._model_forward()  # outside a step (a dummy run): no phase
    runtime.flush()
    assert runner.forwards == 4
    labels = [lab for n in hooked.frame(0, 1)["name"].to_list() if (lab := parse_label(n)) is not None]
    phases = [lab for lab in labels if not lab.is_facts]
    assert [lab.phase for lab in phases] == ["prefill", "decode", "draft", "verify"]
    assert dict(phases[3].facts) == {"cycle": 3, "batch_size": 2, "num_tokens": 7, "seq_len": 50}
    assert dict(phases[0].facts) == {"cycle": 1, "batch_size": 2, "num_tokens": 12, "seq_len": 50}
    facts = [lab for lab in labels if lab.is_facts]
    assert [(f.phase, dict(f.facts)) for f in facts] == [("verify", {"cycle": 3, "accept_len": 1.0})]  # mean of 2, 0
    c = runtime.STATE.counts
    assert (c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos) == (2, 5, 2, [1, 1, 0])
    assert runtime.STATE.calls == {"prefill": 1, "decode": 1, "draft": 1, "verify": 1}


def test_counts_follow_vllm_definitions() -> None:
    c = runtime.Counts()
    c.add([3, 0, 1], [3, 3, 0])  # the third request carried no drafts: not a draft
    c.add([1], [2])
    assert c.to_dict() == {"num_drafts": 3, "num_draft_tokens": 8, "num_accepted_tokens": 4,
                           "num_accepted_tokens_per_pos": [2, 1, 1]}


def test_an_empty_step_is_no_phase(hooked: RangeRecorder) -> None:
    assert runtime._classify(so({})) is None
