"""A real tensor-parallel MoE transformer (target) and a one-layer EAGLE-3-style draft model.

Everything here is torch; import this module only inside rank processes.

Target layer (per TP rank, Megatron/SGLang-style sharding):
  RMSNorm -> attention (q column-parallel over heads; MLA-style replicated KV
  down-projection to a latent, column-parallel up-projection to the local
  heads' K/V; K/V written into a per-rank KV cache; ``scaled_dot_product_attention``
  over the cache with a causal mask; row-parallel output projection) -> allreduce
  -> RMSNorm -> MoE (replicated sigmoid router, top-k, routed experts sharded on
  the intermediate dim: grouped GEMM ``torch._grouped_mm`` where it works, else a
  loop over experts; a shared expert) -> allreduce.  The first ``dense_layers``
  layers use a dense MLP instead of MoE.
Embedding: vocab-parallel lookup + allreduce.  LM head: vocab-parallel GEMM +
all-gather of the logits (every token of verify, as SGLang does).
Draft (EAGLE-3): fc(concat of 3 target hidden states) + embedding -> one layer
(attention + dense MLP) -> vocab-parallel draft LM head + all-gather.

All shapes are static for a given (batch, tokens, window) so forwards can be
captured in CUDA graphs; ``window`` (the attention length) is the whole cache
for graphs and the live context for eager calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tracekit.collectors.workload.config import WorkloadConfig


def _module(name: str) -> Any:
    """A record_function scope for attribution by module, only while a profiler records."""
    if torch.autograd._profiler_enabled():  # type: ignore[attr-defined]
        return torch.autograd.profiler.record_function(name)
    return _NULL


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _Null()


class Comm:
    """Collectives of the TP group (NCCL on GPU, gloo on CPU)."""

    def __init__(self, world: int, cuda: bool) -> None:
        self.world = world
        self.cuda = cuda

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t)
        return t

    def all_gather_last(self, t: torch.Tensor) -> torch.Tensor:
        """(N, v) on each rank -> (N, world*v), rank-major along the last dim."""
        if self.world == 1:
            return t
        t = t.contiguous()
        if self.cuda:
            out = t.new_empty((self.world * t.shape[0], t.shape[1]))
            dist.all_gather_into_tensor(out, t)
            return out.view(self.world, t.shape[0], t.shape[1]).permute(1, 0, 2).reshape(t.shape[0], -1)
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t)
        return torch.cat(parts, dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    with _module("norm"):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + eps)).to(x.dtype) * w


@dataclass
class Gen:
    """Random weights: replicated ones identical on all ranks, sharded ones per rank."""

    rep: torch.Generator
    shard: torch.Generator
    device: torch.device
    dtype: torch.dtype

    def w(self, *shape: int, rep: bool = False, std: float | None = None) -> torch.Tensor:
        g = self.rep if rep else self.shard
        s = std if std is not None else 1.0 / math.sqrt(shape[-1])
        t = torch.randn(*shape, generator=g, device=self.device, dtype=torch.float32) * s
        return t.to(self.dtype)

    def ones(self, n: int) -> torch.Tensor:
        return torch.ones(n, device=self.device, dtype=self.dtype)


class KVCache:
    """Per-rank K/V for the local heads: (batch, heads_local, max_ctx, head_dim) per layer."""

    def __init__(self, layers: int, batch: int, heads: int, max_ctx: int, head_dim: int, g: Gen) -> None:
        shape = (batch, heads, max_ctx, head_dim)
        # A random prefix stands in for the prompt (no prefill pass needed).
        self.k = [g.w(*shape, std=1.0) for _ in range(layers)]
        self.v = [g.w(*shape, std=1.0) for _ in range(layers)]
        self.max_ctx = max_ctx


class Attention:
    def __init__(self, cfg: WorkloadConfig, world: int, g: Gen, in_dim: int) -> None:
        self.h = cfg.heads // world
        self.d = cfg.head_dim
        self.wq = g.w(self.h * self.d, in_dim)
        self.w_kv_down = g.w(cfg.kv_latent, in_dim, rep=True)
        self.w_k_up = g.w(self.h * self.d, cfg.kv_latent)
        self.w_v_up = g.w(self.h * self.d, cfg.kv_latent)
        self.wo = g.w(cfg.hidden, self.h * self.d)

    def __call__(
        self, x: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, start: torch.Tensor, window: int, comm: Comm
    ) -> torch.Tensor:
        b, t, _ = x.shape
        with _module("attention"):
            q = F.linear(x, self.wq).view(b, t, self.h, self.d).transpose(1, 2)
            lat = F.linear(x, self.w_kv_down)
            k = F.linear(lat, self.w_k_up).view(b, t, self.h, self.d).transpose(1, 2)
            v = F.linear(lat, self.w_v_up).view(b, t, self.h, self.d).transpose(1, 2)
            qpos = start[:, None] + torch.arange(t, device=x.device)[None, :]  # (b, t)
            idx = qpos[:, None, :, None].expand(b, self.h, t, self.d)
            kc.scatter_(2, idx, k)
            vc.scatter_(2, idx, v)
            kpos = torch.arange(window, device=x.device)
            allowed = kpos[None, None, :] <= qpos[:, :, None]  # causal over cache + new tokens
            mask = torch.zeros(allowed.shape, device=x.device, dtype=x.dtype).masked_fill_(~allowed, float("-inf"))
            o = F.scaled_dot_product_attention(q, kc[:, :, :window], vc[:, :, :window], attn_mask=mask[:, None])
            o = F.linear(o.transpose(1, 2).reshape(b, t, self.h * self.d), self.wo)
        with _module("allreduce"):
            return comm.all_reduce(o)


class DenseMLP:
    def __init__(self, hidden: int, inter_local: int, g: Gen) -> None:
        self.w_gate_up = g.w(2 * inter_local, hidden)
        self.w_down = g.w(hidden, inter_local)

    def partial(self, x: torch.Tensor) -> torch.Tensor:
        gu = F.linear(x, self.w_gate_up)
        gate, up = gu.chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.w_down)

    def __call__(self, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        with _module("dense_mlp"):
            y = self.partial(x)
        with _module("allreduce"):
            return comm.all_reduce(y)


class MoE:
    """Routed experts sharded on the intermediate dim across ranks, plus shared experts."""

    def __init__(self, cfg: WorkloadConfig, world: int, g: Gen, grouped: bool) -> None:
        self.e = cfg.experts
        self.k = cfg.top_k
        inter = cfg.moe_inter // world
        self.router = g.w(cfg.experts, cfg.hidden, rep=True)
        self.bias = g.w(cfg.experts, rep=True, std=0.01).float()
        # (E, out, in) contiguous; _grouped_mm takes the transposed (column-major) view.
        self.w1 = g.w(cfg.experts, 2 * inter, cfg.hidden)
        self.w2 = g.w(cfg.experts, cfg.hidden, inter)
        self.shared = DenseMLP(cfg.hidden, inter * cfg.shared_experts, g) if cfg.shared_experts else None
        self.grouped = grouped
        # distinct experts the last forward routed to (all its tokens): a static buffer, so that a CUDA graph's
        # replay updates it too; read by the runner after the phase (the speed-of-light model's measured count)
        self.distinct = torch.zeros((), dtype=torch.int64, device=g.device)
        self._hit = torch.zeros(cfg.experts, dtype=torch.int64, device=g.device)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = F.linear(x.float(), self.router.float()).sigmoid()
        _, ids = (scores + self.bias).topk(self.k, dim=-1)
        w = scores.gather(1, ids)
        self._hit.zero_().index_fill_(0, ids.flatten(), 1)
        torch.sum(self._hit, dim=0, out=self.distinct)
        return w / w.sum(-1, keepdim=True), ids

    def experts_grouped(self, x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        flat = ids.flatten()
        order = flat.argsort(stable=True)
        tok = order // self.k
        counts = torch.zeros(self.e, device=x.device, dtype=torch.int32)
        counts.scatter_add_(0, flat.to(torch.int64), torch.ones_like(flat, dtype=torch.int32))
        offs = counts.cumsum(0, dtype=torch.int32)
        xs = x.index_select(0, tok)
        h = torch._grouped_mm(xs, self.w1.transpose(-2, -1), offs=offs)
        gate, up = h.chunk(2, dim=-1)
        y = torch._grouped_mm((F.silu(gate) * up).contiguous(), self.w2.transpose(-2, -1), offs=offs)
        y = y * w.flatten().index_select(0, order)[:, None].to(y.dtype)
        return torch.zeros(n, x.shape[1], device=x.device, dtype=y.dtype).index_add_(0, tok, y)

    def experts_loop(self, x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """Reference path: every expert over all tokens, weighted by its (possibly zero) routing weight."""
        dense_w = torch.zeros(x.shape[0], self.e, device=x.device, dtype=torch.float32).scatter_add_(1, ids, w)
        out = torch.zeros_like(x)
        for e in range(self.e):
            gate, up = F.linear(x, self.w1[e]).chunk(2, dim=-1)
            out += F.linear(F.silu(gate) * up, self.w2[e]) * dense_w[:, e : e + 1].to(x.dtype)
        return out

    def __call__(self, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        with _module("moe"):
            w, ids = self.route(x2)
            y = self.experts_grouped(x2, w, ids) if self.grouped else self.experts_loop(x2, w, ids)
            if self.shared is not None:
                y = y + self.shared.partial(x2)
        with _module("allreduce"):
            return comm.all_reduce(y.view(shape))


def grouped_mm_works(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Check ``torch._grouped_mm`` on this device/dtype against the expert loop (empty groups included)."""
    if not hasattr(torch, "_grouped_mm"):
        return False, "torch has no _grouped_mm"
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        g = Gen(gen, gen, device, dtype)
        cfg = WorkloadConfig(hidden=64, experts=8, top_k=2, moe_inter=32, shared_experts=0)
        moe = MoE(cfg, 1, g, grouped=True)
        x = g.w(24, 64, std=1.0)
        w, ids = moe.route(x)
        ids[:, 0] = 3  # force an uneven split with empty groups
        ids[:, 1] = torch.where(ids[:, 1] == 3, 5, ids[:, 1])
        a = moe.experts_grouped(x, w, ids).float()
        b = moe.experts_loop(x, w, ids).float()
        err = float((a - b).norm() / b.norm())
        tol = 2e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-4
        if not err < tol:
            return False, f"_grouped_mm disagrees with the expert loop (rel err {err:.2e})"
        return True, "torch._grouped_mm"
    except Exception as exc:  # any failure -> fall back, and say why in the manifest
        return False, f"_grouped_mm failed: {exc.__class__.__name__}: {str(exc)[:200]}"


class VocabParallel:
    """Vocab-parallel embedding (masked lookup + allreduce) and LM head (GEMM + all-gather)."""

    def __init__(self, vocab: int, hidden: int, world: int, rank: int, g: Gen, embed: bool = True) -> None:
        self.local = vocab // world
        self.lo = rank * self.local
        self.emb = g.w(self.local, hidden, std=1.0) if embed else None
        self.head = g.w(self.local, hidden)

    def embed(self, ids: torch.Tensor, comm: Comm) -> torch.Tensor:
        assert self.emb is not None
        with _module("embed"):
            rel = ids - self.lo
            ok = (rel >= 0) & (rel < self.local)
            e = F.embedding(rel.clamp(0, self.local - 1), self.emb) * ok[..., None].to(self.emb.dtype)
        with _module("allreduce"):
            return comm.all_reduce(e)

    def logits(self, x: torch.Tensor, comm: Comm) -> torch.Tensor:
        shape = x.shape
        with _module("lm_head"):
            part = F.linear(x.reshape(-1, shape[-1]), self.head)
        with _module("allgather"):
            full = comm.all_gather_last(part)
        return full.view(*shape[:-1], -1)


class TargetModel:
    def __init__(self, cfg: WorkloadConfig, world: int, rank: int, g: Gen, grouped: bool) -> None:
        self.cfg = cfg
        self.vp = VocabParallel(cfg.vocab, cfg.hidden, world, rank, g)
        self.attn = [Attention(cfg, world, g, cfg.hidden) for _ in range(cfg.layers)]
        self.norm1 = [g.ones(cfg.hidden) for _ in range(cfg.layers)]
        self.norm2 = [g.ones(cfg.hidden) for _ in range(cfg.layers)]
        self.ffn: list[DenseMLP | MoE] = [
            DenseMLP(cfg.hidden, cfg.dense_inter // world, g) if i < cfg.dense_layers else MoE(cfg, world, g, grouped)
            for i in range(cfg.layers)
        ]
        self.final_norm = g.ones(cfg.hidden)
        n = cfg.layers
        self.aux_layers = sorted({min(1, n - 1), n // 2, n - 1})  # EAGLE-3: low, mid, high features
        while len(self.aux_layers) < 3:
            self.aux_layers.append(self.aux_layers[-1])

    def forward(
        self, ids: torch.Tensor, start: torch.Tensor, window: int, cache: KVCache, comm: Comm
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) at positions start+0..T-1 -> (logits (B, T, vocab), aux hidden (B, T, 3*hidden))."""
        x = self.vp.embed(ids, comm)
        aux: dict[int, torch.Tensor] = {}
        for i in range(self.cfg.layers):
            x = x + self.attn[i](rms_norm(x, self.norm1[i]), cache.k[i], cache.v[i], start, window, comm)
            x = x + self.ffn[i](rms_norm(x, self.norm2[i]), comm)
            if i in self.aux_layers:
                aux[i] = x
        feats = torch.cat([aux[i] for i in self.aux_layers], dim=-1)
        return self.vp.logits(rms_norm(x, self.final_norm), comm), feats


class DraftModel:
    """EAGLE-3 draft: fc(3H -> H) of target features, concat with the embedding, one layer."""

    def __init__(self, cfg: WorkloadConfig, world: int, rank: int, g: Gen, target_vp: VocabParallel) -> None:
        self.cfg = cfg
        self.target_vp = target_vp  # EAGLE shares the target's embedding
        self.fc = g.w(cfg.hidden, 3 * cfg.hidden, rep=True)
        self.attn = Attention(cfg, world, g, 2 * cfg.hidden)
        self.norm_in = g.ones(2 * cfg.hidden)
        self.norm2 = g.ones(cfg.hidden)
        self.mlp = DenseMLP(cfg.hidden, cfg.dense_inter // world, g)
        self.final_norm = g.ones(cfg.hidden)
        self.head = VocabParallel(cfg.draft_vocab, cfg.hidden, world, rank, g, embed=False)

    def forward(
        self, ids: torch.Tensor, hidden: torch.Tensor, start: torch.Tensor, window: int, cache: KVCache, comm: Comm,
        from_target: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (draft token ids (B, T), draft hidden (B, T, H)).  ``hidden`` is 3H target features or H draft state."""
        h = F.linear(hidden, self.fc) if from_target else hidden
        e = self.target_vp.embed(ids.clamp(max=self.cfg.vocab - 1), comm)
        x = rms_norm(torch.cat([e, h], dim=-1), self.norm_in)
        y = h + self.attn(x, cache.k[0], cache.v[0], start, window, comm)
        y = y + self.mlp(rms_norm(y, self.norm2), comm)
        logits = self.head.logits(rms_norm(y, self.final_norm), comm)
        return logits.argmax(-1), y
