"""Configuration of the built-in reference workload, with model-shaped presets.

``WorkloadConfig`` is a plain dataclass (picklable: it travels to every spawned
rank).  Presets:

- ``tiny``: CPU-sized (CI: 8 gloo ranks well under a minute).
- ``kimi-k2-tiny``: Kimi-K2 / DeepSeek-V3 shapes scaled down by 8 on the hidden
  side while keeping the routing ratios: 384 routed experts, top-8, one shared
  expert, first layer dense, MLA-style latent KV projection (kv_lora 512/8),
  vocab 163840/8, EAGLE-3 draft vocab 32000/8, 3 draft steps (SGLang's default
  for DeepSeek/Kimi: steps 3, topk 1, 4 draft tokens).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tracekit.errors import ConfigError

VERIFY_GRAPH_MODES = ("on", "off", "auto", "mixed")


@dataclass
class WorkloadConfig:
    hidden: int = 64
    heads: int = 8  # attention heads (split across TP ranks)
    head_dim: int = 16
    kv_latent: int = 32  # MLA-style latent dim of the KV down-projection
    layers: int = 2
    dense_layers: int = 1  # leading dense (non-MoE) layers, as in DeepSeek-V3/Kimi-K2
    dense_inter: int = 128
    experts: int = 8
    top_k: int = 2
    moe_inter: int = 32  # per-expert intermediate size (split across TP ranks)
    shared_experts: int = 1
    vocab: int = 512
    draft_vocab: int = 256
    draft_steps: int = 3  # k: draft tokens per sequence per cycle
    batch_size: int = 4
    ctx_start: int = 64  # context length at the first cycle (grows by accept+1 per cycle)
    verify_graph: str = "auto"  # on | off | auto (graph when bs <= graph_max_bs) | mixed (alternate)
    graph_max_bs: int = 32
    decode_every: int = 1  # a plain decode step every N cycles (0: never)
    accept_probs: tuple[float, ...] = (0.8, 0.6, 0.45)  # P(accept draft token i | tokens < i accepted)
    seed: int = 1234
    dtype: str = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    preset: str = "tiny"
    extra: dict[str, Any] = field(default_factory=dict)
    engine: ClassVar[str] = "builtin"  # collectors/engines.py

    def build(self, rank: int, world: int, device: Any, cycles_total: int) -> Any:
        """This rank's workload (collectors/workload/runner.py; imports torch)."""
        from tracekit.collectors.workload.runner import Workload

        return Workload(self, rank, world, device, cycles_total)

    def validate(self, world: int) -> None:
        """Raise ConfigError with a clear message when the shapes cannot be split over ``world`` ranks."""
        if self.verify_graph not in VERIFY_GRAPH_MODES:
            raise ConfigError(f"verify_graph must be one of {VERIFY_GRAPH_MODES}, not {self.verify_graph!r}")
        for name in ("heads", "moe_inter", "dense_inter", "vocab", "draft_vocab"):
            val = getattr(self, name)
            if val % world:
                raise ConfigError(f"{name}={val} is not divisible by the world size {world}")
        if self.top_k > self.experts:
            raise ConfigError(f"top_k={self.top_k} exceeds experts={self.experts}")
        if self.draft_steps < 1 or self.batch_size < 1 or self.layers < 1:
            raise ConfigError("draft_steps, batch_size and layers must be >= 1")
        if not 0 <= self.dense_layers <= self.layers:
            raise ConfigError("dense_layers must lie in [0, layers]")
        if any(not 0.0 <= p <= 1.0 for p in self.accept_probs):
            raise ConfigError("accept probabilities must lie in [0, 1]")

    def max_ctx(self, cycles: int) -> int:
        """KV-cache length that holds ``cycles`` cycles of growth (worst case k+1 per cycle) plus slack."""
        per_cycle = self.draft_steps + 1
        need = self.ctx_start + (cycles + 2) * per_cycle + per_cycle
        return ((need + 63) // 64) * 64

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["accept_probs"] = list(self.accept_probs)
        return d


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {},
    "kimi-k2-tiny": {
        "hidden": 896,  # 7168 / 8
        "heads": 8,  # 64 / 8
        "head_dim": 128,
        "kv_latent": 64,  # kv_lora_rank 512 / 8
        "layers": 8,  # 61 / ~8
        "dense_layers": 1,  # first_k_dense_replace = 1
        "dense_inter": 2304,  # 18432 / 8
        "experts": 384,
        "top_k": 8,
        "moe_inter": 256,  # 2048 / 8
        "shared_experts": 1,
        "vocab": 20480,  # 163840 / 8
        "draft_vocab": 4096,  # EAGLE-3 draft vocab 32000 / 8 (rounded)
        "draft_steps": 3,
        "batch_size": 16,
        "ctx_start": 1024,
        "accept_probs": (0.75, 0.55, 0.4),
    },
}


def make_config(preset: str = "tiny", **overrides: Any) -> WorkloadConfig:
    """A config from a preset name plus overrides (None values are ignored)."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    values: dict[str, Any] = dict(PRESETS[preset])
    values.update({k: v for k, v in overrides.items() if v is not None})
    if "accept_probs" in values:
        values["accept_probs"] = tuple(float(p) for p in values["accept_probs"])
    return WorkloadConfig(preset=preset, **values)
