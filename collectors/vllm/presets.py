"""Random-weight models for ``tracekit capture --engine vllm`` (no download), and the ``--spec`` grammar.

A preset is a ``config.json`` written into a directory; vLLM loads it with
``load_format="dummy"`` (random weights from the config alone) and ``skip_tokenizer_init``
(prompts are token ids). Presets:

- ``llama-tiny``: a 6-layer Llama (hidden 256, 4 heads, 2 KV heads); its EAGLE-3 head (``--spec
  eagle3``) is a 1-layer ``LlamaForCausalLMEagle3`` reading aux hidden states of layers 1, 3, 5
  (the default aux layers of so small a target do not fit the head's input projection).
- ``deepseek-v3-tiny``: DeepSeek-V3 (MLA attention, 8 routed experts top-2 plus a shared one,
  first layer dense) with one MTP layer (``num_nextn_predict_layers=1``), for ``--spec mtp``. Its
  MLA cache width kv_lora_rank + qk_rope_head_dim = 256 + 64 = 320 is one vLLM's MLA accepts
  (320, 512, 576; 64 + 16 was refused: "Head dimension 80 is not supported by MLA").

Random EAGLE-3 or MTP heads accept almost nothing; ``--spec ngram`` on the greedy random target
(which falls into a repeating continuation) gives real, non-trivial accept lengths.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tracekit.errors import ConfigError

_COMMON: Final[dict[str, Any]] = {
    "torch_dtype": "bfloat16", "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": 2,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
}

LLAMA_TINY: Final[dict[str, Any]] = {
    **_COMMON, "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 64, "vocab_size": 2048, "hidden_act": "silu",
}

EAGLE3_HEAD: Final[dict[str, Any]] = {
    **LLAMA_TINY, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 2048,
    "eagle_aux_hidden_state_layer_ids": [1, 3, 5],
}

DEEPSEEK_V3_TINY: Final[dict[str, Any]] = {
    **_COMMON, "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 256,
    "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 4, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 1.0,
    "norm_topk_prob": True, "scoring_func": "sigmoid", "topk_method": "noaux_tc", "kv_lora_rank": 256,
    "q_lora_rank": 128, "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32, "vocab_size": 2048,
    "hidden_act": "silu", "num_nextn_predict_layers": 1, "rope_scaling": None,
}

PRESETS: Final[dict[str, dict[str, Any]]] = {"llama-tiny": LLAMA_TINY, "deepseek-v3-tiny": DEEPSEEK_V3_TINY}
SPEC_METHODS: Final = ("eagle3", "mtp", "ngram", "draft:DIR", "none")
DEFAULT_SPEC: Final[dict[str, str]] = {"llama-tiny": "eagle3", "deepseek-v3-tiny": "mtp"}


@dataclass(frozen=True)
class Spec:
    method: str  # eagle3 | mtp | ngram | draft | none
    path: str | None = None  # draft:DIR's directory


def parse_spec(text: str) -> Spec:
    """``eagle3``, ``mtp``, ``ngram``, ``draft:DIR`` or ``none``. Raises ConfigError."""
    if text.startswith("draft:"):
        path = text.removeprefix("draft:")
        if not path:
            raise ConfigError("--spec draft:DIR needs a directory")
        return Spec("draft", path)
    if text not in ("eagle3", "mtp", "ngram", "none"):
        raise ConfigError(f"--spec {text!r}: use one of {', '.join(SPEC_METHODS)}")
    return Spec(text)


def check_model(model: str) -> None:
    if model not in PRESETS and not (Path(model) / "config.json").is_file():
        raise ConfigError(f"--model {model!r} is neither a preset ({', '.join(PRESETS)}) nor a directory "
                         "with a config.json")


def check_spec(model: str, spec: Spec) -> None:
    if spec.method == "eagle3" and model not in PRESETS:
        raise ConfigError("--spec eagle3 makes a random EAGLE-3 head for a preset target only: for your own model "
                         "use --spec draft:DIR or ngram")
    if spec.method == "eagle3" and model != "llama-tiny":
        raise ConfigError(f"--spec eagle3 has a head for llama-tiny only, not {model}")
    if spec.method == "mtp" and model in PRESETS and not PRESETS[model].get("num_nextn_predict_layers"):
        raise ConfigError(f"--spec mtp needs a model with MTP layers (deepseek-v3-tiny), not {model}")
    if spec.method == "draft" and not (Path(spec.path or "") / "config.json").is_file():
        raise ConfigError(f"--spec draft:{spec.path}: no config.json there")


def _write(directory: Path, config: dict[str, Any]) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    return str(directory)


def materialize(model: str, spec: Spec, k: int, workdir: Path) -> tuple[str, dict[str, Any] | None, bool]:
    """(model directory, vLLM speculative_config or None, dummy weights) for ``model`` and ``spec``."""
    dummy = model in PRESETS
    target = _write(workdir / model, PRESETS[model]) if dummy else model
    if spec.method == "none":
        return target, None, dummy
    if spec.method == "ngram":
        return target, {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 3,
                        "prompt_lookup_min": 1}, dummy
    if spec.method == "eagle3":
        head = _write(workdir / f"{model}-eagle3", EAGLE3_HEAD)
        return target, {"method": "eagle3", "model": head, "num_speculative_tokens": k}, dummy
    if spec.method == "mtp":
        return target, {"method": "mtp", "num_speculative_tokens": k}, dummy
    return target, {"method": "draft_model", "model": spec.path, "num_speculative_tokens": k}, dummy
