"""Built-in random-weight models for the transformers engine, and the ``--assistant`` grammar.

Presets are transformers config arguments (data; transformers is imported only
when a model is built). Weights are random (``from_config`` under a fixed seed),
so every rank builds bit-identical weights; no download is needed.

- ``deepseek-v3-tiny``: ``DeepseekV3ForCausalLM`` (MLA attention with q/kv LoRA
  ranks, first layer dense, routed + shared experts, group-limited top-k routing),
  CPU-sized: 4 layers, hidden 64, 8 routed experts top-2.
- ``deepseek-v3-small``: the same architecture at GPU size: 8 layers, hidden 1024,
  64 routed experts top-8, vocab 16384.
- ``llama-tiny``: ``LlamaForCausalLM``, the dense model (GQA attention, SwiGLU MLP).

``--assistant`` (what proposes the draft tokens):
- ``early-exit:L``: the target itself, exiting after L layers
  (transformers' ``EarlyExitCandidateGenerator``; the default for presets);
- ``same``: the target model object as its own assistant (every draft accepted);
- ``noisy:S``: an unsharded copy of the target whose every weight tensor gets
  Gaussian noise of S times that tensor's standard deviation (seeded): the
  engine's greedy comparison then accepts some drafts and rejects others;
- ``prompt-lookup:N``: n-gram lookup in the sequence, N tokens
  (``PromptLookupCandidateGenerator``; the default for ``--model DIR``);
- a preset name or a checkpoint directory: a separate assistant model, unsharded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Final

from tracekit.errors import ConfigError

# family -> (config class, model class) names inside transformers
FAMILIES: Final[dict[str, tuple[str, str]]] = {
    "deepseek_v3": ("DeepseekV3Config", "DeepseekV3ForCausalLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
}

_NO_SPECIAL: Final = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": 0}

PRESETS: Final[dict[str, tuple[str, dict[str, Any]]]] = {
    "deepseek-v3-tiny": ("deepseek_v3", {
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
        "n_shared_experts": 1, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1,
        "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8,
        "qk_nope_head_dim": 16, "v_head_dim": 16, "max_position_embeddings": 1024, **_NO_SPECIAL,
    }),
    "deepseek-v3-small": ("deepseek_v3", {
        "vocab_size": 16384, "hidden_size": 1024, "intermediate_size": 2816, "moe_intermediate_size": 256,
        "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16,
        "n_shared_experts": 1, "n_routed_experts": 64, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
        "first_k_dense_replace": 1, "kv_lora_rank": 128, "q_lora_rank": 384, "qk_rope_head_dim": 32,
        "qk_nope_head_dim": 64, "v_head_dim": 64, "max_position_embeddings": 4096, **_NO_SPECIAL,
    }),
    "llama-tiny": ("llama", {
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 1024, **_NO_SPECIAL,
    }),
}
# which config sizes must divide by the tensor-parallel world (transformers' own plans shard these)
TP_DIVISORS: Final[dict[str, tuple[str, ...]]] = {
    "deepseek_v3": ("intermediate_size", "moe_intermediate_size", "vocab_size"),
    "llama": ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"),
}


def default_model(device_kind: str) -> str:
    return "deepseek-v3-small" if device_kind == "cuda" else "deepseek-v3-tiny"


def default_assistant(model: str) -> str:
    return "early-exit:1" if model in PRESETS else "prompt-lookup:3"


@dataclass(frozen=True)
class Assistant:
    kind: str  # early-exit | same | noisy | prompt-lookup | model
    value: float | int | str | None = None  # layers, noise scale, n-gram tokens, preset name or directory

    @property
    def generator(self) -> str:
        """The hooktable.GENERATORS key of the candidate generator transformers picks."""
        return self.kind if self.kind in ("early-exit", "prompt-lookup") else "model"


def parse_assistant(text: str) -> Assistant:
    """``early-exit:2`` -> Assistant("early-exit", 2). Raises ConfigError with the accepted forms."""
    head, sep, arg = text.partition(":")
    try:
        if head == "same" and not sep:
            return Assistant("same")
        if head in ("early-exit", "prompt-lookup") and sep:
            n = int(arg)
            if n < 1:
                raise ValueError
            return Assistant(head, n)
        if head == "noisy" and sep:
            s = float(arg)
            if not s >= 0:
                raise ValueError
            return Assistant("noisy", s)
    except ValueError:
        raise ConfigError(f"--assistant {text!r}: expected a positive number after ':'") from None
    if text in PRESETS or os.path.isdir(text):
        return Assistant("model", text)
    raise ConfigError(f"--assistant {text!r}: expected same, early-exit:L, noisy:S, prompt-lookup:N, "
                     f"a preset ({', '.join(PRESETS)}) or a checkpoint directory")


def preset_family(name: str) -> str:
    return PRESETS[name][0]


def check_model(model: str) -> None:
    if model not in PRESETS and not os.path.isdir(model):
        raise ConfigError(f"--model {model!r}: not a preset ({', '.join(PRESETS)}) nor a checkpoint directory")


def check_tp(model: str, world: int) -> None:
    """ConfigError when a preset's sizes cannot be split by transformers' plan over ``world`` ranks."""
    if model not in PRESETS or world == 1:
        return
    family, args = PRESETS[model]
    for key in TP_DIVISORS[family]:
        if args[key] % world:
            raise ConfigError(f"--model {model}: {key}={args[key]} is not divisible by the world size {world}")


def build_config(name: str) -> Any:
    """The transformers config object of a preset."""
    import transformers

    family, args = PRESETS[name]
    return getattr(transformers, FAMILIES[family][0])(**args)


def _auto() -> Any:
    """transformers' ``AutoModelForCausalLM`` (typed Any: transformers' own annotations are partial)."""
    import transformers

    return transformers.AutoModelForCausalLM


def random_model(name: str, seed: int, dtype: Any) -> Any:
    """A preset with random weights, identical for a given seed on every rank (initialised on the CPU)."""
    import torch

    torch.manual_seed(seed)
    return _auto().from_config(build_config(name), dtype=dtype).eval()


def load_model(name: str, seed: int, dtype: Any, **kwargs: Any) -> Any:
    """A preset (random weights, ``seed``) or a checkpoint directory (``from_pretrained(name, **kwargs)``)."""
    if name in PRESETS:
        return random_model(name, seed, dtype)
    return _auto().from_pretrained(name, dtype=dtype, **kwargs).eval()


def add_noise(model: Any, scale: float, seed: int) -> None:
    """Every weight tensor += N(0, (scale * its std)^2), seeded (identical on every rank)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() < 2:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            p.add_((noise * (p.float().std() * scale)).to(device=p.device, dtype=p.dtype))
