"""A model's shape for the speed-of-light model, read from a Hugging Face ``config.json``.

``model_shape(cfg)`` turns the config (a dict; a nested ``text_config`` as Kimi-K2.5 and
other multimodal checkpoints have it is used when present) into a ``ModelShape``: every
weight the forward reads, per layer, with its parameter count, the engine rule that
shards it (``Weight.shard``), the bytes per parameter its checkpoint stores
(``analyzers/sol/quant.py``) and the precision its GEMM runs in; the attention core
(heads, the dot-product widths, the KV cache values per token per layer); the MoE
(experts, top-k) and the number of allreduces per forward.

Architectures: DeepSeek-V2/V3, Kimi-K2 / K2.5 (MLA, routed + shared experts,
``first_k_dense_replace``), Qwen2/3-MoE, Mixtral, Llama-style dense models (Llama, Qwen2/3,
Mistral, ...) and tracekit's own built-in workload (``TracekitWorkload``, the config its
capture records in the manifest). An unknown architecture is one error line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tracekit.analyzers.sol.quant import QuantScheme, parse_quant
from tracekit.errors import AnalysisError

# what a weight's bytes are reported under ("bytes split by what is read")
READS: Final = ("attention_weights", "kv_cache", "router", "routed_experts", "shared_experts", "dense_mlp", "lm_head")
# the attribution bucket whose kernels do each read, as tracekit's category rules sort kernels
# (tracekit/data/categories.toml, by kernel name): the attention kernels read the KV cache; the
# routed experts run in MoE kernels (fused_moe, grouped GEMMs); every other weight is multiplied
# by a dense (cuBLAS-class) GEMM, the attention projections, router and shared experts included
READ_BUCKET: Final = {
    "attention_weights": "gemm", "kv_cache": "attention", "router": "gemm", "routed_experts": "moe",
    "shared_experts": "gemm", "dense_mlp": "gemm", "lm_head": "gemm",
}
# sharding rules a weight can have (applied by analyzers/sol/sharding.py)
SHARDS: Final = ("tp", "replicated", "expert")


@dataclass(frozen=True)
class Weight:
    """One weight matrix of the forward."""

    name: str  # Hugging Face module name of one instance (matched against a quantization block's ignore list)
    read: str  # one of READS
    params: int  # parameters of one instance (one layer; one expert for routed experts)
    count: int  # instances per forward (layers that have it)
    shard: str  # "tp": column/row parallel, 1/TP per rank; "replicated": whole on every rank; "expert": routed expert
    bytes_per_param: float
    compute: str  # precision of its GEMM: bf16 | fp8 | int8 | fp32


@dataclass(frozen=True)
class AttentionCore:
    """The attention itself (not its projections): per layer, for one token against one context token."""

    kind: str  # mla | gqa
    heads: int
    qk_dim: int  # dot-product width per head (MLA absorbed: kv_lora + rope)
    v_dim: int  # value width per head (MLA absorbed: kv_lora)
    kv_values: int  # KV cache values per token per layer, whole model (MLA: kv_lora + rope, one latent)
    kv_heads: int  # KV heads (MLA: 1 latent shared by all heads); sharded over TP when >= TP
    layers: int


@dataclass(frozen=True)
class ModelShape:
    name: str
    architecture: str
    family: str  # deepseek | qwen_moe | mixtral | dense | workload
    hidden: int
    layers: int
    vocab: int
    weights: tuple[Weight, ...]
    attention: AttentionCore
    experts: int  # routed experts per MoE layer (0: dense model)
    top_k: int
    moe_layers: int
    act_bytes: int  # bytes per activation value (allreduce messages)
    kv_bytes: float  # bytes per KV cache value
    quant: QuantScheme

    @property
    def allreduces(self) -> int:
        """Allreduces on the critical path of one forward under TP: after attention and after the MLP/MoE
        of every layer, plus the vocab-parallel embedding."""
        return 2 * self.layers + 1


ARCH_FAMILY: Final = {
    "DeepseekV3ForCausalLM": "deepseek", "DeepseekV2ForCausalLM": "deepseek", "KimiK2ForCausalLM": "deepseek",
    "KimiK25ForConditionalGeneration": "deepseek", "DeepseekV32ForCausalLM": "deepseek",
    "Qwen3MoeForCausalLM": "qwen_moe", "Qwen2MoeForCausalLM": "qwen_moe",
    "MixtralForCausalLM": "mixtral",
    "LlamaForCausalLM": "dense", "MistralForCausalLM": "dense", "Qwen2ForCausalLM": "dense",
    "Qwen3ForCausalLM": "dense",
    "TracekitWorkload": "workload", "TracekitWorkloadDraft": "workload",
}
MODEL_TYPE_FAMILY: Final = {
    "deepseek_v3": "deepseek", "deepseek_v2": "deepseek", "kimi_k2": "deepseek", "kimi_k25": "deepseek",
    "qwen3_moe": "qwen_moe", "qwen2_moe": "qwen_moe", "mixtral": "mixtral", "llama": "dense",
    "mistral": "dense", "qwen2": "dense", "qwen3": "dense", "tracekit_workload": "workload",
}
DTYPE_BYTES: Final = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "fp8": 1, "fp8_e4m3": 1,
                      "fp8_e5m2": 1, "auto": 2, "bf16": 2, "fp16": 2, "fp32": 4}


def load_config(path: str) -> dict[str, Any]:
    """A ``config.json`` (a file, or a checkpoint directory holding one) as a dict; one error line otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise AnalysisError(f"model config {p} does not exist", path=str(p)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise AnalysisError(f"model config is not readable JSON: {exc}", path=str(p)) from None
    if not isinstance(data, dict):
        raise AnalysisError("model config is not a JSON object", path=str(p))
    return data


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The language model's part of a config: ``text_config`` when nested (its own keys win), else the config."""
    inner = cfg.get("text_config")
    if isinstance(inner, dict):
        merged = {k: v for k, v in cfg.items() if k != "text_config"}
        merged.update(inner)
        if "quantization_config" not in inner and "quantization_config" in cfg:
            merged["quantization_config"] = cfg["quantization_config"]
        return merged
    return cfg


def _family(cfg: dict[str, Any]) -> tuple[str, str]:
    for arch in cfg.get("architectures") or []:
        if arch in ARCH_FAMILY:
            return arch, ARCH_FAMILY[arch]
    mt = str(cfg.get("model_type", ""))
    if mt in MODEL_TYPE_FAMILY:
        return mt, MODEL_TYPE_FAMILY[mt]
    if "kv_lora_rank" in cfg:
        return mt or "mla", "deepseek"
    known = ", ".join(sorted(ARCH_FAMILY))
    raise AnalysisError(f"model config: architecture {cfg.get('architectures')} / model_type {mt!r} is not one the "
                        f"speed-of-light model knows ({known})")


def _int(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int:
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise AnalysisError(f"model config: {k} = {v!r} is not a non-negative number")
            return int(v)
    if default is None:
        raise AnalysisError(f"model config: missing {' / '.join(keys)}")
    return default


def model_shape(config: dict[str, Any], *, kv_dtype: str | None = None) -> ModelShape:
    """The ``ModelShape`` of a Hugging Face config dict (see module doc). ``kv_dtype``: the KV cache's
    dtype when it differs from the model's (``fp8``, ``bfloat16``)."""
    cfg = text_config(config)
    arch, family = _family(cfg)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    base = DTYPE_BYTES.get(dtype, 2)
    quant = parse_quant(cfg.get("quantization_config"), base)
    h = _int(cfg, "hidden_size", "hidden")
    layers = _int(cfg, "num_hidden_layers", "layers")
    vocab = _int(cfg, "vocab_size", "vocab")
    heads = _int(cfg, "num_attention_heads", "heads")
    if not (h and layers and vocab and heads):
        raise AnalysisError("model config: hidden size, layers, vocabulary and attention heads must be positive")
    w: list[Weight] = []

    def add(name: str, read: str, params: int, count: int, shard: str) -> None:
        if count > 0 and params > 0:
            bpp, compute = quant.for_module(name)
            w.append(Weight(name, read, params, count, shard, bpp, compute))

    if family == "workload":
        return _workload_shape(cfg, arch, quant, base, kv_dtype)
    # MoE layout
    if family == "deepseek":
        experts = _int(cfg, "n_routed_experts", default=0)
        top_k = _int(cfg, "num_experts_per_tok", default=0)
        moe_inter = _int(cfg, "moe_intermediate_size", default=0)
        shared_inter = moe_inter * _int(cfg, "n_shared_experts", default=0)
        freq = max(1, _int(cfg, "moe_layer_freq", default=1))
        first = _int(cfg, "first_k_dense_replace", default=0)
        moe_ids = [i for i in range(layers) if experts and i >= first and i % freq == 0]
    elif family == "qwen_moe":
        experts = _int(cfg, "num_experts")
        top_k = _int(cfg, "num_experts_per_tok")
        moe_inter = _int(cfg, "moe_intermediate_size")
        shared_inter = _int(cfg, "shared_expert_intermediate_size", default=0)
        step = max(1, _int(cfg, "decoder_sparse_step", default=1))
        only = set(cfg.get("mlp_only_layers") or [])
        moe_ids = [i for i in range(layers) if i not in only and (i + 1) % step == 0]
    elif family == "mixtral":
        experts = _int(cfg, "num_local_experts")
        top_k = _int(cfg, "num_experts_per_tok")
        moe_inter = _int(cfg, "intermediate_size")
        shared_inter = 0
        moe_ids = list(range(layers))
    else:
        experts = top_k = moe_inter = shared_inter = 0
        moe_ids = []
    n_moe = len(moe_ids)
    n_dense = layers - n_moe
    dense_inter = _int(cfg, "intermediate_size", default=0) if n_dense else 0
    d0 = next((i for i in range(layers) if i not in moe_ids), 0)
    m0 = moe_ids[0] if moe_ids else 0
    # attention
    if family == "deepseek":
        q_lora = _int(cfg, "q_lora_rank", default=0)
        kv_lora = _int(cfg, "kv_lora_rank")
        rope = _int(cfg, "qk_rope_head_dim")
        nope = _int(cfg, "qk_nope_head_dim")
        v = _int(cfg, "v_head_dim")
        a = f"model.layers.{d0}.self_attn"
        if q_lora:
            add(f"{a}.q_a_proj", "attention_weights", h * q_lora, layers, "replicated")
            add(f"{a}.q_b_proj", "attention_weights", q_lora * heads * (nope + rope), layers, "tp")
        else:
            add(f"{a}.q_proj", "attention_weights", h * heads * (nope + rope), layers, "tp")
        add(f"{a}.kv_a_proj_with_mqa", "attention_weights", h * (kv_lora + rope), layers, "replicated")
        add(f"{a}.kv_b_proj", "attention_weights", kv_lora * heads * (nope + v), layers, "tp")
        add(f"{a}.o_proj", "attention_weights", heads * v * h, layers, "tp")
        core = AttentionCore("mla", heads, kv_lora + rope, kv_lora, kv_lora + rope, 1, layers)
    else:
        kvh = _int(cfg, "num_key_value_heads", default=heads)
        hd = _int(cfg, "head_dim", default=h // heads)
        a = f"model.layers.{d0}.self_attn"
        add(f"{a}.q_proj", "attention_weights", h * heads * hd, layers, "tp")
        add(f"{a}.k_proj", "attention_weights", h * kvh * hd, layers, "tp")
        add(f"{a}.v_proj", "attention_weights", h * kvh * hd, layers, "tp")
        add(f"{a}.o_proj", "attention_weights", heads * hd * h, layers, "tp")
        core = AttentionCore("gqa", heads, hd, hd, 2 * kvh * hd, kvh, layers)
    # MLPs
    md = f"model.layers.{d0}.mlp"
    add(f"{md}.gate_proj", "dense_mlp", 2 * h * dense_inter, n_dense, "tp")  # gate + up
    add(f"{md}.down_proj", "dense_mlp", dense_inter * h, n_dense, "tp")
    if n_moe:
        mm = f"model.layers.{m0}.mlp" if family != "mixtral" else f"model.layers.{m0}.block_sparse_moe"
        add(f"{mm}.gate", "router", experts * h, n_moe, "replicated")
        ex = f"{mm}.experts.0.w1" if family == "mixtral" else f"{mm}.experts.0.gate_proj"
        add(ex, "routed_experts", 3 * h * moe_inter, n_moe, "expert")
        sh = f"{mm}.shared_expert.gate_proj" if family == "qwen_moe" else f"{mm}.shared_experts.gate_proj"
        add(sh, "shared_experts", 3 * h * shared_inter, n_moe, "tp")
    add("lm_head", "lm_head", vocab * h, 1, "tp")
    kvb = DTYPE_BYTES[kv_dtype] if kv_dtype else base
    return ModelShape(str(cfg.get("name_or_path") or cfg.get("_name_or_path") or arch), arch, family, h, layers, vocab,
                      tuple(w), core, experts, top_k, n_moe, base, float(kvb), quant)


def _workload_shape(cfg: dict[str, Any], arch: str, quant: QuantScheme, base: int, kv_dtype: str | None) -> ModelShape:
    """tracekit's built-in workload (collectors/workload/model.py): per-head K/V cache, replicated KV
    down-projection to a latent, column-parallel up-projections; the draft (``TracekitWorkloadDraft``) is one
    dense layer over 2x hidden input after a replicated fc of 3x hidden."""
    h = _int(cfg, "hidden")
    heads = _int(cfg, "heads")
    hd = _int(cfg, "head_dim")
    lat = _int(cfg, "kv_latent")
    draft = arch == "TracekitWorkloadDraft"
    layers = 1 if draft else _int(cfg, "layers")
    n_dense = 1 if draft else _int(cfg, "dense_layers")
    n_moe = layers - n_dense
    experts = _int(cfg, "experts") if n_moe else 0
    top_k = _int(cfg, "top_k") if n_moe else 0
    vocab = _int(cfg, "draft_vocab") if draft else _int(cfg, "vocab")
    in_dim = 2 * h if draft else h
    w: list[Weight] = []

    def add(name: str, read: str, params: int, count: int, shard: str) -> None:
        if count > 0 and params > 0:
            w.append(Weight(name, read, params, count, shard, float(base), "bf16" if base == 2 else "fp32"))

    if draft:
        add("fc", "attention_weights", 3 * h * h, 1, "replicated")
    add("attn.wq", "attention_weights", in_dim * heads * hd, layers, "tp")
    add("attn.w_kv_down", "attention_weights", in_dim * lat, layers, "replicated")
    add("attn.w_k_up+w_v_up", "attention_weights", 2 * lat * heads * hd, layers, "tp")
    add("attn.wo", "attention_weights", heads * hd * h, layers, "tp")
    add("mlp.dense", "dense_mlp", 3 * h * _int(cfg, "dense_inter"), n_dense, "tp")
    moe_inter = _int(cfg, "moe_inter", default=0)
    add("moe.router", "router", experts * h, n_moe, "replicated")
    add("moe.experts", "routed_experts", 3 * h * moe_inter, n_moe, "expert")
    add("moe.shared", "shared_experts", 3 * h * moe_inter * _int(cfg, "shared_experts", default=0), n_moe, "tp")
    add("lm_head", "lm_head", vocab * h, 1, "tp")
    core = AttentionCore("gqa", heads, hd, hd, 2 * heads * hd, heads, 1 if draft else layers)
    kvb = DTYPE_BYTES[kv_dtype] if kv_dtype else base
    return ModelShape(f"tracekit workload {cfg.get('preset', '')}".strip() + (" (draft)" if draft else ""), arch,
                      "workload", h, layers, vocab, tuple(w), core, experts, top_k, n_moe, base, float(kvb), quant)
