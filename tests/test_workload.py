"""The built-in reference workload: shapes, attention semantics, MoE, accept model, cycles under the profiler."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from tracekit.collectors.session import ProfilerSession, finalize  # noqa: E402
from tracekit.collectors.workload.config import PRESETS, WorkloadConfig, make_config  # noqa: E402
from tracekit.collectors.workload.model import Attention, Comm, Gen, MoE, grouped_mm_works  # noqa: E402
from tracekit.collectors.workload.runner import Workload, accept_lengths  # noqa: E402


def _gen(seed: int = 0) -> Gen:
    g = torch.Generator().manual_seed(seed)
    return Gen(g, g, torch.device("cpu"), torch.float64)


def test_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match="heads=6"):
        make_config("tiny", heads=6).validate(4)
    with pytest.raises(ValueError, match="verify_graph"):
        make_config("tiny", verify_graph="sometimes").validate(1)
    with pytest.raises(ValueError, match="unknown preset"):
        make_config("llama-huge")
    kimi = make_config("kimi-k2-tiny")
    assert (kimi.experts, kimi.top_k, kimi.draft_steps) == (384, 8, 3)
    assert kimi.hidden * 8 == 7168 and kimi.vocab * 8 == 163840
    kimi.validate(8)  # the scaled model still splits over TP=8
    assert set(PRESETS) == {"tiny", "kimi-k2-tiny"}


def test_accept_model_is_deterministic_bounded_and_follows_probabilities() -> None:
    cfg = make_config("tiny", batch_size=50, accept_probs=(0.8, 0.5, 0.25))
    assert accept_lengths(cfg, 3) == accept_lengths(cfg, 3)
    draws = [a for c in range(80) for a in accept_lengths(cfg, c)]
    assert min(draws) >= 0 and max(draws) <= cfg.draft_steps
    p1 = sum(a >= 1 for a in draws) / len(draws)
    p2_given_1 = sum(a >= 2 for a in draws) / max(1, sum(a >= 1 for a in draws))
    assert abs(p1 - 0.8) < 0.04 and abs(p2_given_1 - 0.5) < 0.05


def test_extend_attention_equals_token_by_token_decode() -> None:
    """Verify-style attention over k+1 new tokens = k+1 decode steps (causal chain), float64."""
    cfg = WorkloadConfig(hidden=32, heads=4, head_dim=8, kv_latent=16)
    g = _gen()
    attn = Attention(cfg, 1, g, cfg.hidden)
    comm = Comm(1, cuda=False)
    b, t, ctx, max_ctx = 3, 4, 10, 32
    k0 = g.w(b, 4, max_ctx, 8, std=1.0)
    v0 = g.w(b, 4, max_ctx, 8, std=1.0)
    x = g.w(b, t, cfg.hidden, std=1.0)
    start = torch.tensor([ctx, ctx + 2, ctx + 5])
    kc, vc = k0.clone(), v0.clone()
    out_extend = attn(x, kc, vc, start, max_ctx, comm)
    kd, vd = k0.clone(), v0.clone()
    steps = [attn(x[:, i : i + 1], kd, vd, start + i, max_ctx, comm) for i in range(t)]
    out_decode = torch.cat(steps, dim=1)
    assert torch.allclose(out_extend, out_decode, atol=1e-10)
    assert torch.allclose(kc, kd, atol=1e-12)  # the new tokens' K/V landed at the same cache positions
    # eager window (live context only) gives the same result as the whole cache
    kw, vw = k0.clone(), v0.clone()
    out_window = attn(x, kw, vw, start, int(start.max()) + t, comm)
    assert torch.allclose(out_extend, out_window, atol=1e-10)


def test_moe_grouped_gemm_matches_per_token_reference() -> None:
    cfg = WorkloadConfig(hidden=32, experts=6, top_k=2, moe_inter=16, shared_experts=0)
    g = _gen(1)
    moe = MoE(cfg, 1, g, grouped=True)
    x = g.w(9, 32, std=1.0)
    w, ids = moe.route(x)
    assert torch.allclose(w.sum(-1), torch.ones(9, dtype=w.dtype))
    ref = torch.zeros_like(x)
    for n in range(9):
        for j in range(cfg.top_k):
            e = int(ids[n, j])
            gate, up = torch.nn.functional.linear(x[n], moe.w1[e]).chunk(2)
            ref[n] += float(w[n, j]) * torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, moe.w2[e])
    loop = moe.experts_loop(x, w, ids)
    assert torch.allclose(loop, ref, atol=1e-10)
    ok, why = grouped_mm_works(torch.device("cpu"), torch.float32)
    if not ok:
        pytest.skip(f"no usable torch._grouped_mm here: {why}")
    g32 = torch.Generator().manual_seed(1)
    moe32 = MoE(cfg, 1, Gen(g32, g32, torch.device("cpu"), torch.float32), grouped=True)
    x32 = x.float()
    w32, ids32 = moe32.route(x32)
    ids32[:, 0] = 2  # uneven groups, some experts get no token
    ids32[:, 1] = torch.where(ids32[:, 1] == 2, 4, ids32[:, 1])
    assert torch.allclose(moe32.experts_grouped(x32, w32, ids32), moe32.experts_loop(x32, w32, ids32), atol=1e-5)


def test_cycles_under_profiler_have_phases_facts_and_growing_context() -> None:
    cfg = make_config("tiny", batch_size=3, draft_steps=3, ctx_start=40)
    wl = Workload(cfg, 0, 1, torch.device("cpu"), cycles_total=6)
    wl.capture_graphs()  # no-op on CPU
    assert wl.graphs == {}
    for c in range(2):
        wl.run_cycle(c)
    seq_before = list(wl.seq)
    s = ProfilerSession(0, cuda=False)
    s.start()
    for c in range(2, 5):
        wl.run_cycle(c)
    s.stop()
    ev = finalize(s.events())
    ranges = ev.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
    k, b = cfg.draft_steps, cfg.batch_size
    for c in range(2, 5):
        cyc = ranges.filter(pl.col("cycle") == c)
        by = {r["phase"]: r for r in cyc.iter_rows(named=True)}
        assert set(by) == {"draft", "verify", "draft_extend", "decode"}
        assert by["verify"]["num_tokens"] == b * (k + 1)  # k+1 tokens per sequence
        assert by["draft"]["num_tokens"] == b * k
        assert by["decode"]["num_tokens"] == b
        assert all(r["graphed"] is False for r in by.values())  # no CUDA graphs on CPU
        assert by["verify"]["accept_len"] == pytest.approx(statistics.fmean(accept_lengths(cfg, c)), abs=1e-4)
    # SDPA ran inside verify
    sdpa = ev.filter(pl.col("name").str.contains("scaled_dot_product_attention"), pl.col("phase") == "verify")
    assert sdpa.height > 0
    grown = [s0 + sum(accept_lengths(cfg, c)[i] + 1 for c in range(2, 5)) for i, s0 in enumerate(seq_before)]
    assert wl.seq == grown
    assert wl.seq_t.tolist() == grown
    d = wl.describe()
    assert d["accept"]["modelled"] is True and d["graphs"] == []


def test_recorded_distinct_experts_equal_a_recount_of_the_router_outputs() -> None:
    """The speed-of-light model's measured distinct experts: the count the workload records per MoE layer per
    target phase instance equals a recount of the router's own top-k ids."""
    cfg = make_config("tiny", batch_size=3, draft_steps=3, ctx_start=40, layers=3, dense_layers=1, experts=16,
                      top_k=2)
    wl = Workload(cfg, 0, 1, torch.device("cpu"), cycles_total=4)
    seen: list[int] = []
    moes = [f for f in wl.target.ffn if isinstance(f, MoE)]
    assert len(moes) == 2
    for m in moes:
        orig = m.route

        def route(x: torch.Tensor, orig=orig) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
            w, ids = orig(x)
            seen.append(len(set(ids.flatten().tolist())))
            return w, ids

        m.route = route  # type: ignore[method-assign]
    for c in range(2):
        wl.run_cycle(c)
    counts = wl.describe()["distinct_experts"]["counts"]
    assert set(counts) == {"verify", "decode"}
    # per cycle: verify's two MoE layers, then decode's (the target forwards in run order)
    recount = [seen[i:i + 2] for i in range(0, len(seen), 2)]
    assert recount == [counts["verify"]["0"], counts["decode"]["0"], counts["verify"]["1"], counts["decode"]["1"]]
    assert all(1 <= n <= 16 for layer in recount for n in layer)
    assert max(n for layer in recount for n in layer) > 2  # more than one token's top-k: a real count
