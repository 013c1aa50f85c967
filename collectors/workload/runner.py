"""EAGLE-style speculative cycles of the reference workload, the way SGLang runs them.

One cycle (``Workload.run_cycle``):
- ``draft``: k draft-model decode steps, 1 token per sequence each (one CUDA graph
  for all k steps on GPU, like SGLang's draft graph runner);
- ``verify``: the target over k+1 tokens per sequence (last verified token + k draft
  tokens) at positions seq..seq+k, extend-style attention over the KV cache with a
  causal (chain) mask; graphed or eager per ``verify_graph``; the target's tokens
  are copied to the host (as SGLang's v1 worker does with ``.tolist()``), then the
  accept length per sequence is drawn from the per-position accept model;
- ``draft_extend``: the draft model over the k+1 verified positions fed the
  target's hidden states (eager), then the bookkeeping that advances the
  context by accept+1 per sequence;
- ``decode`` (every ``decode_every`` cycles): a plain target decode step, 1 token
  per sequence, graphed, at the same context length (the baseline verify is
  compared with).  Its KV write is overwritten by the next verify.

Accept lengths are modelled (random, identical on every rank), never measured:
the weights are random.  The manifest says so (``"modelled": true``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from tracekit.collectors.hooks import emit_facts, phase
from tracekit.collectors.timing import CYCLE, PhaseTimer
from tracekit.collectors.workload.config import WorkloadConfig
from tracekit.collectors.workload.model import (
    Comm,
    DraftModel,
    Gen,
    KVCache,
    MoE,
    TargetModel,
    grouped_mm_works,
)


def accept_lengths(cfg: WorkloadConfig, cycle: int) -> list[int]:
    """Accepted draft tokens per sequence (bonus excluded) for ``cycle``; same on every rank."""
    rng = random.Random(cfg.seed * 1_000_003 + cycle)
    probs = list(cfg.accept_probs) or [0.0]
    out = []
    for _ in range(cfg.batch_size):
        a = 0
        for i in range(cfg.draft_steps):
            if rng.random() < probs[min(i, len(probs) - 1)]:
                a += 1
            else:
                break
        out.append(a)
    return out


class Workload:
    def __init__(self, cfg: WorkloadConfig, rank: int, world: int, device: torch.device, cycles_total: int) -> None:
        self.cfg = cfg
        self.rank = rank
        self.cuda = device.type == "cuda"
        self.device = device
        if cfg.dtype == "auto":
            self.dtype = torch.bfloat16 if self.cuda else torch.float32
        else:
            self.dtype = getattr(torch, cfg.dtype)
        self.comm = Comm(world, self.cuda)
        rep = torch.Generator(device=device).manual_seed(cfg.seed)
        shard = torch.Generator(device=device).manual_seed(cfg.seed * 7919 + rank + 1)
        g = Gen(rep, shard, device, self.dtype)
        grouped, self.moe_impl = grouped_mm_works(device, self.dtype)
        if not grouped:
            self.moe_impl = f"expert loop ({self.moe_impl})"
        self.target = TargetModel(cfg, world, rank, g, grouped)
        self.draft = DraftModel(cfg, world, rank, g, self.target.vp)
        b, k, h = cfg.batch_size, cfg.draft_steps, cfg.heads // world
        self.max_ctx = cfg.max_ctx(cycles_total)
        self.tcache = KVCache(cfg.layers, b, h, self.max_ctx, cfg.head_dim, g)
        self.dcache = KVCache(1, b, h, self.max_ctx, cfg.head_dim, g)
        self.seq = [cfg.ctx_start] * b
        self.seq_t = torch.tensor(self.seq, device=device, dtype=torch.int64)
        tok_gen = torch.Generator(device=device).manual_seed(cfg.seed + 17)
        self.tokens = torch.randint(0, cfg.vocab, (b,), generator=tok_gen, device=device)
        self.feat = g.w(b, 3 * cfg.hidden, rep=True, std=1.0)
        self.verify_ids = torch.zeros(b, k + 1, dtype=torch.int64, device=device)
        self.timer = PhaseTimer(self.cuda)
        self.graphs: dict[str, tuple[Any, Any]] = {}
        self.graph_error: str | None = None
        self._pending: tuple[list[int], torch.Tensor, torch.Tensor] | None = None
        self.accepts: list[float] = []
        # (phase, cycle, per-MoE-layer distinct expert counts on the device), read at describe()
        self.distinct: list[tuple[str, int, torch.Tensor]] = []
        self.hooks = True  # False: no phase ranges at all (the overhead benchmark's baseline)

    # ---- the four forwards (static buffers in, tensors out) -------------------------------
    def _draft_fn(self, window: int) -> torch.Tensor:
        ids, hid = self.tokens[:, None], self.feat[:, None]
        outs = []
        for i in range(self.cfg.draft_steps):
            tok, y = self.draft.forward(ids, hid, self.seq_t + i, window, self.dcache, self.comm, from_target=i == 0)
            outs.append(tok[:, -1])
            ids, hid = tok[:, -1:], y[:, -1:]
        return torch.stack(outs, dim=1)

    def _verify_fn(self, window: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits, feats = self.target.forward(self.verify_ids, self.seq_t, window, self.tcache, self.comm)
        return logits.argmax(-1), feats

    def _decode_fn(self, window: int) -> torch.Tensor:
        logits, _ = self.target.forward(self.tokens[:, None], self.seq_t, window, self.tcache, self.comm)
        return logits.argmax(-1)[:, 0]

    def _eager_window(self, tokens: int) -> int:
        """Live context + new tokens, rounded up to 16 keys (aligned mask rows for SDPA; extra keys are masked)."""
        return min(self.max_ctx, (max(self.seq) + tokens + 15) // 16 * 16)

    # ---- CUDA graphs -----------------------------------------------------------------------
    def capture_graphs(self) -> None:
        """Capture decode, draft and (unless verify_graph=off) verify graphs over the whole cache."""
        if not self.cuda:
            return
        fns: dict[str, Callable[[], Any]] = {
            "decode": lambda: self._decode_fn(self.max_ctx),
            "draft": lambda: self._draft_fn(self.max_ctx),
        }
        if self.cfg.verify_graph != "off":
            fns["verify"] = lambda: self._verify_fn(self.max_ctx)
        try:
            pool = None
            for name, fn in fns.items():
                s = torch.cuda.Stream()  # type: ignore[no-untyped-call]
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(2):
                        fn()
                torch.cuda.current_stream().wait_stream(s)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = fn()
                pool = graph.pool()
                self.graphs[name] = (graph, out)
            torch.cuda.synchronize()
        except Exception as exc:  # fall back to eager everywhere, and say why
            self.graphs.clear()
            self.graph_error = f"{exc.__class__.__name__}: {str(exc)[:300]}"

    def graphed(self, name: str, cycle: int) -> bool:
        if name not in self.graphs:
            return False
        if name != "verify":
            return True
        mode = self.cfg.verify_graph
        if mode == "on":
            return True
        if mode == "auto":
            return self.cfg.batch_size <= self.cfg.graph_max_bs
        if mode == "mixed":
            return cycle % 2 == 0
        return False

    # ---- phases ----------------------------------------------------------------------------
    @contextmanager
    def _phase(self, name: str, cycle: int, tok: int, graphed: bool) -> Iterator[None]:
        token = self.timer.begin(name)
        if self.hooks:
            seq = round(statistics.fmean(self.seq))
            with phase(name, cycle=cycle, bs=self.cfg.batch_size, tok=tok, seq=seq, graphed=graphed):
                yield
        else:
            yield
        self.timer.end(token)

    def run_cycle(self, cycle: int) -> None:
        cfg = self.cfg
        b, k = cfg.batch_size, cfg.draft_steps
        if max(self.seq) + 2 * (k + 1) > self.max_ctx:
            raise RuntimeError(f"KV cache full at cycle {cycle} (max_ctx={self.max_ctx})")
        cyc = self.timer.begin(CYCLE)
        g = self.graphed("draft", cycle)
        with self._phase("draft", cycle, b * k, g):
            if g:
                graph, out = self.graphs["draft"]
                graph.replay()
                draft_tokens = out
            else:
                draft_tokens = self._draft_fn(self._eager_window(k))
        g = self.graphed("verify", cycle)
        with self._phase("verify", cycle, b * (k + 1), g):
            self.verify_ids[:, 0].copy_(self.tokens)
            self.verify_ids[:, 1:].copy_(draft_tokens)
            if g:
                graph, (target_tokens, feats) = self.graphs["verify"]
                graph.replay()
            else:
                target_tokens, feats = self._verify_fn(self._eager_window(k + 1))
            host_tokens = target_tokens.cpu()  # v1 verify blocks on the device-to-host copy
            acc = accept_lengths(cfg, cycle)
            self._pending = (acc, host_tokens, feats)
        self._record_distinct("verify", cycle)
        mean_acc = statistics.fmean(acc)
        self.accepts.append(mean_acc)
        if self.hooks:
            emit_facts("verify", cycle, accept=mean_acc)
        with self._phase("draft_extend", cycle, b * (k + 1), False):
            _, _, feats = self._pending
            self.draft.forward(
                self.verify_ids, feats, self.seq_t, self._eager_window(k + 1), self.dcache, self.comm, from_target=True
            )
            idx = torch.tensor(acc, device=self.device, dtype=torch.int64)
            rows = torch.arange(b, device=self.device)
            self.tokens.copy_(torch.tensor([int(host_tokens[i, a]) for i, a in enumerate(acc)], device=self.device))
            self.feat.copy_(feats[rows, idx])
            self.seq_t.add_(idx + 1)
            self.seq = [s + a + 1 for s, a in zip(self.seq, acc, strict=True)]
        self.timer.end(cyc)
        if cfg.decode_every and cycle % cfg.decode_every == 0:
            g = self.graphed("decode", cycle)
            with self._phase("decode", cycle, b, g):
                if g:
                    graph, out = self.graphs["decode"]
                    graph.replay()
                    out.cpu()
                else:
                    self._decode_fn(self._eager_window(1)).cpu()
            self._record_distinct("decode", cycle)

    def _record_distinct(self, name: str, cycle: int) -> None:
        """Snapshot the MoE layers' distinct-expert counts of the target forward just run (one small device copy,
        after the phase's range: no host sync)."""
        moes = [f for f in self.target.ffn if isinstance(f, MoE)]
        if moes and self.hooks:
            self.distinct.append((name, cycle, torch.stack([m.distinct for m in moes])))

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def _distinct_facts(self) -> dict[str, Any]:
        counts: dict[str, dict[str, list[int]]] = {}
        for name, cycle, t in self.distinct:
            counts.setdefault(name, {})[str(cycle)] = [int(x) for x in t.tolist()]
        return {
            "definition": "distinct routed experts the target's router chose for all tokens of one forward, per MoE "
                          "layer (the layers after dense_layers), per phase instance: counted on the device from the "
                          "router's top-k ids",
            "counts": counts,
        }

    def describe(self) -> dict[str, Any]:
        """Workload facts for the manifest."""
        return {
            "name": "builtin",
            "config": self.cfg.to_dict(),
            "dtype": str(self.dtype).removeprefix("torch."),
            "moe_impl": self.moe_impl,
            "max_ctx": self.max_ctx,
            "graphs": sorted(self.graphs),
            "distinct_experts": self._distinct_facts(),
            "graph_error": self.graph_error,
            "attention": "torch scaled_dot_product_attention, additive causal mask; graphs attend over the whole cache",
            "accept": {
                "modelled": True,
                "model": "per-position accept probability, draws identical on all ranks",
                "accept_probs": list(self.cfg.accept_probs),
                "definition": "accepted draft tokens per sequence, bonus token excluded",
                "mean": statistics.fmean(self.accepts) if self.accepts else None,
            },
        }
