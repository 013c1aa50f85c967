"""Bytes and FLOPs one GPU must move and compute for one forward, by what is read.

Inputs: a ``ModelShape`` (analyzers/sol/config.py), the parallel layout (``Layout``: TP degree,
the engine whose sharding rules apply, DP-attention, expert parallelism) and the step
(``Step``: batch, tokens per sequence, context length, distinct experts per MoE layer).

Sharding rules (SGLang and vLLM agree on every rule used here; the built-in workload follows
them too):
- ``tp`` weights (column / row parallel: q_b / q / k / v / kv_b / o projections, dense MLP,
  shared experts, lm_head) hold 1/TP of their parameters on each rank;
- ``replicated`` weights (MLA's ``q_a_proj`` and ``kv_a_proj_with_mqa``, the MoE router, the
  workload's KV down-projection and draft fc) are whole on every rank;
- routed experts: each rank reads 1/TP of every distinct expert the step routes to (TP), or the
  whole of the distinct experts it holds (EP: E/EP experts per rank, U/EP of them hit in
  expectation): the same bytes per rank either way;
- KV cache: MLA's latent (kv_lora + rope values per token per layer) is whole on every TP rank;
  GQA/MHA K/V are split by KV head (one head per rank when there are fewer KV heads than ranks);
- DP-attention: attention weights are whole on every rank and each rank runs attention for
  its batch / DP share of the requests (and holds only their KV); the MoE still sees every token.
Distinct experts per MoE layer: the measured count where the run recorded one, else the
expectation under uniform routing U(T) = E (1 - (1 - k/E)^T) for T tokens in the forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from tracekit.analyzers.sol.config import READ_BUCKET, READS, ModelShape
from tracekit.errors import AnalysisError

ENGINES: Final = ("sglang", "vllm", "workload")


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    engine: str = "sglang"
    dp_attention: bool = False
    ep: int = 1  # 1: routed experts split like the other TP weights; > 1: expert parallel over ep ranks

    def check(self) -> None:
        if self.tp < 1 or self.ep < 1:
            raise AnalysisError(f"parallel layout: tp={self.tp}, ep={self.ep} must be >= 1")
        if self.engine not in ENGINES:
            raise AnalysisError(f"engine {self.engine!r}: the sharding rules known are {', '.join(ENGINES)}")


@dataclass(frozen=True)
class Step:
    phase: str
    batch: int  # sequences
    tokens: int  # new tokens per sequence (verify: draft tokens + 1; decode: 1)
    seq_len: int  # context per sequence already in the KV cache
    distinct_experts: float | None = None  # per MoE layer (mean over layers); None: U(batch * tokens)
    distinct_source: str = "uniform routing U(T)"

    @property
    def total_tokens(self) -> int:
        return self.batch * self.tokens


@dataclass(frozen=True)
class Work:
    """What one GPU reads and computes in one forward, per read kind (config.READS)."""

    bytes: dict[str, float]
    flops: dict[tuple[str, str], float]  # (read kind, precision) -> FLOPs
    distinct_experts: float
    distinct_source: str

    def bucket_bytes(self, bucket: str) -> float:
        return sum(v for k, v in self.bytes.items() if READ_BUCKET[k] == bucket)

    def bucket_flops(self, bucket: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (k, p), v in self.flops.items():
            if READ_BUCKET[k] == bucket:
                out[p] = out.get(p, 0.0) + v
        return out


def expected_distinct_experts(experts: int, top_k: int, tokens: int) -> float:
    """U(T) = E (1 - (1 - k/E)^T): expected distinct experts T tokens of top-k among E route to (uniform)."""
    if experts <= 0 or tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def work(shape: ModelShape, layout: Layout, step: Step) -> Work:
    """Bytes and FLOPs per GPU (see module doc)."""
    layout.check()
    tp = layout.tp
    t_all = step.total_tokens
    dp = tp if layout.dp_attention else 1
    batch_rank = math.ceil(step.batch / dp)
    t_attn = batch_rank * step.tokens
    if step.distinct_experts is not None:
        u, usrc = float(step.distinct_experts), step.distinct_source
    else:
        u, usrc = expected_distinct_experts(shape.experts, shape.top_k, t_all), "uniform routing U(T)"
    u = min(u, float(shape.experts))
    by: dict[str, float] = dict.fromkeys(READS, 0.0)
    fl: dict[tuple[str, str], float] = {}

    def flop(read: str, prec: str, v: float) -> None:
        fl[(read, prec)] = fl.get((read, prec), 0.0) + v

    for w in shape.weights:
        attn = w.read == "attention_weights"
        if w.shard == "expert":
            per_rank = w.params / (tp if layout.ep == 1 else layout.ep)
            by[w.read] += u * per_rank * w.bytes_per_param * w.count
            flop(w.read, w.compute, 2.0 * t_all * shape.top_k * per_rank * w.count)
            continue
        split = tp if w.shard == "tp" and not (attn and layout.dp_attention) else 1
        local = w.params / split
        by[w.read] += local * w.bytes_per_param * w.count
        flop(w.read, w.compute, 2.0 * (t_attn if attn else t_all) * local * w.count)
    a = shape.attention
    if a.kind == "mla" or layout.dp_attention:
        kv_share = 1.0
        heads_rank = a.heads if layout.dp_attention else a.heads / tp
    else:
        kv_share = max(1.0, a.kv_heads / tp) / a.kv_heads
        heads_rank = a.heads / tp
    ctx = step.seq_len + step.tokens
    by["kv_cache"] = batch_rank * ctx * a.kv_values * kv_share * shape.kv_bytes * a.layers
    flop("kv_cache", "bf16", 2.0 * t_attn * ctx * heads_rank * (a.qk_dim + a.v_dim) * a.layers)
    return Work(by, fl, u, usrc)
