"""The speed-of-light model (analyzers/sol): the seed's case against an independent computation,
config and quantization parsing, U(T), the ring fit, the GPU table, the CLI's what-if form."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.analyzers.sol.allreduce import fit_ring, ring_model
from tracekit.analyzers.sol.config import load_config, model_shape
from tracekit.analyzers.sol.floor import phase_floor
from tracekit.analyzers.sol.gpus import gpu_spec, gpu_table
from tracekit.analyzers.sol.model import Layout, Step, expected_distinct_experts
from tracekit.cli import cli
from tracekit.documents import SOL
from tracekit.errors import AnalysisError

ROOT = Path(__file__).resolve().parent.parent
KIMI = ROOT / "samples" / "sol" / "kimi-k2.5.config.json"


def _seed_reference(tokens: int) -> dict[str, float]:
    """The seed's case computed by hand from the facts (reference/logs-and-sol.md), not by the code under test:
    Kimi-K2.5, TP 8, SGLang sharding, 2,048 context, RTX PRO 6000 (1,792 GB/s x 0.9), 24 us per allreduce."""
    H, L, dense_layers, moe_layers, heads = 7168, 61, 1, 60, 64
    q_lora, kv_lora, rope, nope, v = 1536, 512, 64, 128, 128
    E, k, moe_i, dense_i, vocab, tp = 384, 8, 2048, 18432, 163840, 8
    bf16, int4_g32 = 2.0, 0.5 + 2.0 / 32
    replicated = H * q_lora + H * (kv_lora + rope)
    split = q_lora * heads * (nope + rope) + kv_lora * heads * (nope + v) + heads * v * H
    attn = L * (replicated + split / tp) * bf16
    u = E * (1 - (1 - k / E) ** tokens)
    expert = 3 * H * moe_i
    routed = moe_layers * u * expert / tp * int4_g32
    shared = moe_layers * expert / tp * bf16
    router = moe_layers * E * H * bf16
    dense = dense_layers * 3 * H * dense_i / tp * bf16
    lm_head = vocab * H / tp * bf16
    kv = (2048 + tokens) * (kv_lora + rope) * bf16 * L  # the whole latent on every rank
    total = attn + routed + shared + router + dense + lm_head + kv
    mem_ns = total / (1792e9 * 0.9) * 1e9
    ar_ns = (2 * L + 1) * 24_000
    return {"attention_weights": attn, "routed_experts": routed, "shared_experts": shared, "router": router,
            "dense_mlp": dense, "lm_head": lm_head, "kv_cache": kv, "total": total, "mem_ns": mem_ns, "ar_ns": ar_ns,
            "u": u}


@pytest.mark.parametrize("tokens", [1, 3])
def test_seed_case_bytes_and_floor_match_an_independent_computation(tokens: int) -> None:
    shape = model_shape(load_config(str(KIMI)))
    gpu = gpu_spec("RTX PRO 6000 Blackwell")
    ring = ring_model(8, gpu.alpha_ns, gpu.link_Bps, gpu.link, None, "none", fixed_ns=24_000)
    f = phase_floor(shape, Layout(8, "sglang"), Step("x", 1, tokens, 2048), gpu, ring)
    ref = _seed_reference(tokens)
    for read in ("attention_weights", "routed_experts", "shared_experts", "router", "dense_mlp", "lm_head", "kv_cache"):
        assert f.bytes_by_read[read] == pytest.approx(ref[read], abs=1), read
    assert f.total_bytes == pytest.approx(ref["total"], abs=8)
    assert f.distinct_experts == pytest.approx(ref["u"])
    assert f.memory_ns == pytest.approx(ref["mem_ns"], abs=1)
    assert f.bound == "HBM bytes"
    assert f.allreduce_count == 123 and f.allreduce_ns == ref["ar_ns"]
    # floor = memory + allreduce chain + the logits all-gather (small: ~0.3%)
    assert f.floor_ns - f.gather_ns == pytest.approx(ref["mem_ns"] + ref["ar_ns"], abs=2)
    assert 0 < f.gather_ns < 0.005 * f.floor_ns
    # the facts file's worked numbers
    if tokens == 1:
        assert f.total_bytes / 1e9 == pytest.approx(6.17, abs=0.01)
        assert f.floor_ns / 1e6 == pytest.approx(6.8, abs=0.05)
    else:
        assert f.total_bytes / 1e9 == pytest.approx(9.05, abs=0.01)
        assert f.floor_ns / 1e6 == pytest.approx(8.6, abs=0.05)


def test_seed_case_verify_over_decode_at_the_floor() -> None:
    shape = model_shape(load_config(str(KIMI)))
    gpu = gpu_spec("RTX PRO 6000 Blackwell")
    ring = ring_model(8, gpu.alpha_ns, gpu.link_Bps, gpu.link, None, "none", fixed_ns=24_000)
    dec = phase_floor(shape, Layout(8), Step("decode", 1, 1, 2048), gpu, ring)
    ver = phase_floor(shape, Layout(8), Step("verify", 1, 3, 2048), gpu, ring)
    assert ver.floor_ns / dec.floor_ns == pytest.approx(1.26, abs=0.01)
    assert 29e6 / ver.floor_ns == pytest.approx(3.4, abs=0.05)
    assert 20e6 / ver.floor_ns == pytest.approx(2.3, abs=0.05)


def test_expected_distinct_experts_matches_the_facts() -> None:
    for t, want in ((1, 8.0), (3, 23.5), (8, 59.5), (32, 188), (128, 358)):
        assert expected_distinct_experts(384, 8, t) == pytest.approx(want, rel=0.01)


def test_quantization_blocks() -> None:
    shape = model_shape(load_config(str(KIMI)))
    by = {w.read: w for w in shape.weights}
    assert by["routed_experts"].bytes_per_param == 0.5625
    assert by["shared_experts"].bytes_per_param == 2.0  # ignored: re:.*shared_experts.*
    assert by["attention_weights"].bytes_per_param == 2.0
    assert by["router"].bytes_per_param == 2.0  # the gate is not a Linear
    assert by["lm_head"].bytes_per_param == 2.0
    cfg = json.loads(KIMI.read_text())["text_config"]
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    fp8 = {w.read: w for w in model_shape(cfg).weights}
    assert fp8["routed_experts"].bytes_per_param == pytest.approx(1 + 4 / 16384)
    assert fp8["routed_experts"].compute == "fp8"
    assert fp8["lm_head"].bytes_per_param == 2.0
    cfg["quantization_config"] = {"quant_method": "awq"}
    with pytest.raises(AnalysisError, match="awq"):
        model_shape(cfg)


def test_other_architectures() -> None:
    qwen = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
            "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144, "vocab_size": 151936,
            "torch_dtype": "bfloat16"}
    s = model_shape(qwen)
    assert s.moe_layers == 48 and s.experts == 128 and s.attention.kind == "gqa"
    # GQA: 4 KV heads over TP 8 -> one head per rank (replicated), K and V of 128 each per layer
    f = phase_floor(s, Layout(8), Step("d", 1, 1, 1000), gpu_spec("H200"),
                    ring_model(8, 800, 450e9, "nvlink", None, "none"))
    assert f.bytes_by_read["kv_cache"] == 1001 * 2 * 128 * 2 * 48
    mixtral = {"architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
               "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
               "intermediate_size": 14336, "vocab_size": 32000}
    m = model_shape(mixtral)
    assert m.experts == 8 and m.moe_layers == 32
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    d = model_shape(llama)
    params = sum(w.params * w.count for w in d.weights)
    assert params == pytest.approx(8.03e9 - 128256 * 4096, rel=0.01)  # Llama-3-8B without its embedding
    with pytest.raises(AnalysisError, match="architecture"):
        model_shape({"architectures": ["MambaForCausalLM"], "hidden_size": 1})


def test_ring_fit_recovers_known_alpha_beta() -> None:
    rng = random.Random(7)
    n, alpha, beta = 8, 1_700.0, 53e9
    sizes = [s for s in (14_336, 43_008, 131_072, 1 << 20, 4 << 20, 16 << 20) for _ in range(20)]
    # a transfer is the link's time plus non-negative jitter (a transfer is never faster than the link),
    # with a 1% measurement error either way
    times = [(2 * (n - 1) * alpha + 2 * (n - 1) / n * m / beta * 1e9) * (1 + abs(rng.gauss(0, 0.05)))
             * (1 + rng.gauss(0, 0.01)) for m in sizes]
    fit = fit_ring(n, sizes, times)
    assert fit is not None
    assert fit.alpha_ns == pytest.approx(alpha, rel=0.05)
    assert fit.beta_Bps == pytest.approx(beta, rel=0.05)
    assert 0 < fit.rel_residual < 0.2  # every transfer about the line (jitter included)
    line = [2 * (n - 1) * fit.alpha_ns + 2 * (n - 1) / n * m / fit.beta_Bps * 1e9 for m in sizes]
    assert all(t >= 0.95 * y for t, y in zip(times, line, strict=True))  # the line runs under the transfers
    assert fit_ring(n, [1000] * 5, [1.0] * 5) is None  # one size: not determined
    # every size latency-bound (no rise with the size): beta from the link, alpha under every fastest transfer
    flat = fit_ring(n, [14_336, 43_008] * 10, [24_000.0, 23_500.0] * 10, fallback_beta_Bps=53e9)
    assert flat is not None and flat.beta_from_table and flat.beta_Bps == 53e9
    assert 2 * (n - 1) * flat.alpha_ns + 2 * (n - 1) / n * 43_008 / 53e9 * 1e9 == pytest.approx(23_500)
    model = ring_model(n, 1.0, 1.0, "pcie", fit, "unused")
    assert model.source == "fit" and "residual" in model.detail
    fallback = ring_model(n, 1_700.0, 64e9, "pcie", None, "one message size")
    assert fallback.source == "gpu table" and "one message size" in fallback.detail


def test_gpu_table_has_every_gpu_with_a_source() -> None:
    names = {g.name for g in gpu_table()}
    for want in ("H100 SXM", "H100 PCIe", "H200", "B200", "GB200", "RTX PRO 6000 Blackwell", "L40S", "A100 SXM 80GB",
                 "MI300X", "MI325X", "MI355X"):
        assert want in names
    for g in gpu_table():
        assert g.source and g.hbm_Bps > 0 and g.flops["bf16"] > 0 and g.link_Bps > 0
    assert gpu_spec("NVIDIA H200").name == "H200"
    assert gpu_spec("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert gpu_spec("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert gpu_spec("AMD Instinct MI300X").name == "MI300X"
    assert gpu_spec("NVIDIA RTX PRO 6000 Blackwell Server Edition").name == "RTX PRO 6000 Blackwell"
    with pytest.raises(AnalysisError, match="not in the GPU table"):
        gpu_spec("Voodoo 2")


def test_gpu_spec_file(tmp_path: Path) -> None:
    p = tmp_path / "mine.toml"
    p.write_text('[[gpu]]\nname = "mine"\nhbm_gbps = 1000\nbf16_tflops = 100\nlink = "pcie"\nlink_gbps = 20\n'
                 'achievable = 1.0\nsource = "measured"\n')
    g = gpu_spec(str(p))
    assert g.name == "mine" and g.hbm_Bps == 1e12 and g.achievable == 1.0 and g.alpha_ns == 1700.0
    p.write_text('[[gpu]]\nname = "bad"\n')
    with pytest.raises(AnalysisError, match="missing"):
        gpu_spec(str(p))


def test_cli_what_if_text_and_json() -> None:
    args = ["sol", "--model", str(KIMI), "--gpu", "RTX PRO 6000 Blackwell", "--tp", "8", "--tokens", "1",
            "--tokens", "3", "--seq-len", "2048", "--allreduce-us", "24"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "floor 6.80 ms" in res.output and "floor 8.59 ms" in res.output
    assert "1.26 x 1-token step" in res.output
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert SOL.problems(doc) == []
    assert [p["tokens"] for p in doc["phases"]] == [1, 3]
    assert doc["phases"][1]["bytes"] == pytest.approx(9.05e9, rel=1e-3)


def test_cli_usage_and_bad_input(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["sol", "--gpu", "H200"])
    assert res.exit_code == 2 and "--model" in res.output
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    res = CliRunner().invoke(cli, ["sol", "--model", str(bad), "--gpu", "H200", "--tokens", "1", "--seq-len", "10"])
    assert res.exit_code == 1
    assert "not readable JSON" in res.output and "Traceback" not in res.output


MAIN = ROOT / "samples" / "h200x2-mainjob"


@pytest.mark.parametrize("name", ["graphed.parquet", "eager.parquet"])
def test_h200_captures_never_beat_their_floor(name: str) -> None:
    """The committed 2x H200 captures of the built-in workload: no phase (unprofiled median, or any
    instance's profiled window) and no bucket of any instance below its floor; the fit is printed."""
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(MAIN / name))
    rep = sol_of_run(r.events, r.manifest, run=name)
    assert rep.gpu.name == "H200" and rep.layout.tp == 2 and rep.layout.engine == "workload"
    assert not rep.beaten
    assert [p.phase for p in rep.phases] == ["verify", "decode", "draft", "draft_extend"]
    for p in rep.phases:
        assert p.measured_ns is not None and p.pct is not None and 0 < p.pct <= 100
        assert p.clock == "unprofiled timer, cuda_event"
        assert p.floor.bound == "HBM bytes"  # batch 16: memory-bound
    # the fit: two message sizes (from the model: the capture records none), latency-bound on NVLink
    assert rep.ring.source == "fit" and "rms residual" in rep.ring.detail and "2 message sizes" in rep.ring.detail
    print(rep.ring.detail)
    assert 1_000 < rep.ring.alpha_ns < 5_000  # a ring step of a 2-rank NCCL LL allreduce: a few us


def test_fit_on_ingested_kineto_traces_with_recorded_sizes(tmp_path: Path) -> None:
    """Ingested Kineto traces carry each collective's message size: the fit reads them (this capture kept one
    allreduce size only, so the GPU table's link is used, and the output says why)."""
    from tracekit.analyzers.sol.run import collective_fit
    from tracekit.store import load_run

    out = tmp_path / "ing.parquet"
    traces = sorted(str(p) for p in (ROOT / "samples" / "h200x2-builtin").glob("eager-rank-*.trace.json.gz"))
    res = CliRunner().invoke(cli, ["ingest", *traces, "-o", str(out)])
    assert res.exit_code == 0, res.output
    r = load_run(str(out))
    fit, why = collective_fit(r.events, 2, fallback_beta_Bps=450e9)
    assert fit is None and "1 allreduce message size" in why and "recorded message sizes" in why


def test_cli_on_a_run_text_json_and_errors() -> None:
    res = CliRunner().invoke(cli, ["sol", str(MAIN / "graphed.parquet")])
    assert res.exit_code == 0, res.output
    assert "% of SOL" in res.output and "WRONG FLOOR" not in res.output
    assert "SOL break-even" in res.output
    res = CliRunner().invoke(cli, ["sol", str(MAIN / "graphed.parquet"), "--json"])
    assert res.exit_code == 0
    doc = json.loads(res.stdout)
    assert SOL.problems(doc) == [] and doc["floor_beaten"] is False
    assert {p["phase"] for p in doc["phases"]} == {"verify", "decode", "draft", "draft_extend"}
    res = CliRunner().invoke(cli, ["sol", str(MAIN / "graphed.parquet"), "--tokens", "3"])
    assert res.exit_code == 2
    cpu = ROOT / "samples" / "cpu8-builtin" / "run.parquet"
    res = CliRunner().invoke(cli, ["sol", str(cpu)])
    assert res.exit_code == 1 and "--gpu" in res.output and "Traceback" not in res.output


def test_a_floor_a_measurement_beats_is_said_loudly() -> None:
    """A GPU spec far slower than the H200 the run ran on makes floors the measurements beat."""
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.render.sol import render
    from tracekit.store import load_run

    r = load_run(str(MAIN / "graphed.parquet"))
    rep = sol_of_run(r.events, r.manifest, run="graphed.parquet", gpu="L40S", achievable=0.01)
    assert rep.beaten
    from rich.console import Console

    console = Console(record=True, width=200)
    render(rep, console)
    assert "WRONG FLOOR" in console.export_text()


def test_measured_distinct_experts_replace_uniform_routing() -> None:
    """Where the manifest records distinct experts per layer per instance (the built-in workload since this
    model), the floor uses them (median over instances of the mean over layers) and says so."""
    import copy

    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(MAIN / "graphed.parquet"))
    man = copy.deepcopy(r.manifest)
    cycles = sorted({int(c) for c in r.events.filter(r.events["phase"] == "verify").get_column("cycle").drop_nulls()})
    for sec in man["ranks"].values():
        sec["workload"]["distinct_experts"] = {"counts": {"verify": {str(c): [100] * 7 for c in cycles}}}
    rep = sol_of_run(r.events, man, run="x")
    base = sol_of_run(r.events, r.manifest, run="x")
    v, v0 = rep.phase("verify"), base.phase("verify")
    assert v is not None and v0 is not None
    assert v.floor.distinct_experts == 100 and v.floor.distinct_source.startswith("measured")
    assert v0.floor.distinct_source == "uniform routing U(T)" and v0.floor.distinct_experts > 280
    assert v.floor.bytes_by_read["routed_experts"] == pytest.approx(v0.floor.bytes_by_read["routed_experts"] * 100
                                                                   / v0.floor.distinct_experts, rel=1e-6)
    d = rep.phase("decode")
    assert d is not None and d.floor.distinct_source == "uniform routing U(T)"  # no count recorded for decode


def test_calibrate_without_cuda_is_one_line_exit_1(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    out = tmp_path / "gpu.toml"
    res = CliRunner().invoke(cli, ["sol", "--calibrate", "-o", str(out)])
    assert res.exit_code == 1, res.output
    assert "has none" in res.output and "Traceback" not in res.output
    assert not out.exists()
    assert CliRunner().invoke(cli, ["sol", "--calibrate"]).exit_code == 2


def test_calibration_arithmetic_and_spec_file_on_the_cpu_path(tmp_path: Path) -> None:
    """The measurement code on torch's CPU path with a wall-clock timer (the command refuses a CPU: this checks the
    arithmetic and the spec file, not a CPU's rates): the rates are 2 x bytes / time and 2 n^3 / time of the
    timings taken, and the file is a --gpu spec that reads back with them."""
    torch = pytest.importorskip("torch")
    import time

    from tracekit.collectors.calibrate import measure, spec_toml

    timings: list[float] = []

    def timer(fn):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter_ns()
        fn()
        dt = float(time.perf_counter_ns() - t0)
        timings.append(dt)
        return dt

    cal = measure(torch.device("cpu"), copy_bytes=1 << 20, gemm_n=64, reps=3, warmup=1, timer=timer)
    copies, gemms = timings[:3], timings[3:6]
    assert cal.copy_ns == sorted(copies)[1] and cal.gemm_ns == sorted(gemms)[1]
    assert cal.hbm_Bps == pytest.approx(2 * (1 << 20) / cal.copy_ns * 1e9)
    assert cal.bf16_flops == pytest.approx(2 * 64 ** 3 / cal.gemm_ns * 1e9)
    base = gpu_spec("H200")
    p = tmp_path / "cal.toml"
    p.write_text(spec_toml(cal, base))
    spec = gpu_spec(str(p))
    assert spec.achievable == 1.0 and spec.link == "nvlink" and spec.link_Bps == base.link_Bps
    assert spec.hbm_Bps == pytest.approx(cal.hbm_Bps, rel=1e-3, abs=1e8)
    assert spec.flops["bf16"] == pytest.approx(cal.bf16_flops, rel=1e-3, abs=1e11)
    assert "measured by tracekit sol --calibrate" in spec.source


def test_percent_of_sol_in_attribute_gap_spec_and_diff() -> None:
    """Every phase analysis carries the floor beside its measurement, from the same model as tracekit sol."""
    from tracekit.analyzers import analyses
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(MAIN / "eager.parquet"))
    g = load_run(str(MAIN / "graphed.parquet"))
    sol = sol_of_run(r.events, r.manifest, run="x")
    att = analyses.attribute(r.events, r.manifest)
    assert att.sol is not None and att.sol_why is None
    for p in sol.phases:
        q = att.sol.phase(p.phase)
        assert q is not None and q.floor.floor_ns == p.floor.floor_ns and q.pct == p.pct
    gap = analyses.gap(r.events, r.manifest, a="verify", b="decode")
    assert gap.sol and gap.sol_why is None
    by = {s.bucket: s for s in gap.sol}
    for s in gap.sol:  # the parts add up: measured = floor difference + excess, bucket by bucket
        assert s.floor_delta_ns + s.excess_ns == pytest.approx(s.measured_delta_ns)
    v, d = sol.phase("verify"), sol.phase("decode")
    assert v is not None and d is not None
    assert by["phase"].floor_delta_ns == v.floor.floor_ns - d.floor.floor_ns
    assert by["phase"].measured_delta_ns == pytest.approx(float(gap.total_delta_ns))
    assert by["launch_overhead"].floor_delta_ns == 0  # not modelled: all of it is excess
    assert by["moe"].floor_delta_ns > 0  # 64 tokens route to more experts than 16
    spec = analyses.spec(r.events, r.manifest)
    assert spec.sol is not None
    parts = [p for p in ("draft", "verify", "draft_extend") if sol.phase(p) is not None]
    assert spec.sol.cycle_floor_ns == pytest.approx(sum(sol.phase(p).floor.floor_ns for p in parts), abs=1)  # type: ignore[union-attr]
    assert spec.sol.break_even_tokens == pytest.approx(spec.sol.cycle_floor_ns / d.floor.floor_ns)
    diff = analyses.diff(g.events, g.manifest, r.events, r.manifest)
    assert diff.sol_old is not None and diff.sol_new is not None
    res = CliRunner().invoke(cli, ["gap", str(MAIN / "eager.parquet")])
    assert res.exit_code == 0 and "floor difference" in res.output and "excess" in res.output
    res = CliRunner().invoke(cli, ["spec", str(MAIN / "eager.parquet")])
    assert res.exit_code == 0 and "SOL break-even" in res.output


def test_no_model_in_the_run_says_why(tmp_path: Path) -> None:
    from tracekit.analyzers import analyses
    from tracekit.store import load_run

    out = tmp_path / "ing.parquet"
    traces = sorted(str(p) for p in (ROOT / "samples" / "h200x2-builtin").glob("eager-rank-*.trace.json.gz"))
    assert CliRunner().invoke(cli, ["ingest", *traces, "-o", str(out)]).exit_code == 0
    r = load_run(str(out))
    att = analyses.attribute(r.events, r.manifest)
    assert att.sol is None and att.sol_why is not None and "--model" in att.sol_why
    res = CliRunner().invoke(cli, ["attribute", str(out)])
    assert res.exit_code == 0 and "% of SOL: not shown" in res.output
    # with the model given, tracekit sol works on the same run
    from tracekit.analyzers.sol.run import workload_config

    cfg = tmp_path / "workload.json"
    cfg.write_text(json.dumps(workload_config(load_run(str(MAIN / "eager.parquet")).manifest)))
    res = CliRunner().invoke(cli, ["sol", str(out), "--model", str(cfg), "--gpu", "H200", "--engine", "workload"])
    assert res.exit_code == 0, res.output
    assert "verify" in res.output and "% of SOL" in res.output
    # on the capture itself, the file gives the floors its manifest's own config gives (and no draft floors)
    own = CliRunner().invoke(cli, ["sol", str(MAIN / "eager.parquet"), "--json"])
    with_cfg = CliRunner().invoke(cli, ["sol", str(MAIN / "eager.parquet"), "--model", str(cfg), "--engine", "workload",
                                        "--json"])
    assert with_cfg.exit_code == own.exit_code == 0, (with_cfg.output, own.output)
    floors = {p["phase"]: p["floor_ns"] for p in json.loads(own.stdout)["phases"]}
    assert {p["phase"]: p["floor_ns"] for p in json.loads(with_cfg.stdout)["phases"]} == \
        {k: v for k, v in floors.items() if k in ("verify", "decode")}


def test_what_if_cycle_with_a_draft_model_gives_the_sol_break_even() -> None:
    """The seed's question at the floor: with the EAGLE-3 draft (1 dense layer, vocab 32000, as assumed in
    samples/sol), a 3-token verify cycle breaks even at ~1.4 tokens per cycle (the facts file), not 2.46."""
    draft_cfg = ROOT / "samples" / "sol" / "kimi-k2.5-eagle3-draft.config.json"
    base = ["sol", "--gpu", "RTX PRO 6000 Blackwell", "--tp", "8", "--seq-len", "2048", "--allreduce-us", "24", "--json"]
    res = CliRunner().invoke(cli, [*base, "--model", str(KIMI), "--draft-model", str(draft_cfg), "--tokens", "3"])
    assert res.exit_code == 0, res.output
    ph = {p["phase"]: p for p in json.loads(res.stdout)["phases"]}
    assert set(ph) == {"draft", "verify", "draft_extend", "decode"}
    one = json.loads(CliRunner().invoke(cli, [*base, "--model", str(draft_cfg), "--tokens", "1", "--tokens", "3"]).stdout)
    d1, d3 = (p["floor_ns"] for p in one["phases"])
    assert ph["draft"]["floor_ns"] == 2 * d1 and ph["draft_extend"]["floor_ns"] == d3  # 2 draft steps, 1 extend
    be = (ph["draft"]["floor_ns"] + ph["verify"]["floor_ns"] + ph["draft_extend"]["floor_ns"]) / ph["decode"]["floor_ns"]
    assert be == pytest.approx(1.4, abs=0.1)
    res = CliRunner().invoke(cli, [*base, "--model", str(KIMI), "--draft-model", str(draft_cfg), "--tokens", "1"])
    assert res.exit_code == 2


def test_transformers_capture_manifest_config_is_read() -> None:
    """A transformers capture records its model's whole config (``workload.model.hf_config``): sol reads it;
    the committed H200 transformers sample (older: the preset's ``model.config``) reads too."""
    from tracekit.analyzers.sol.run import run_model
    from tracekit.store import read_manifest

    cfg = json.loads(KIMI.read_text())
    man = {"ranks": {"0": {"workload": {"name": "transformers", "model": {"name": "kimi", "hf_config": cfg}}}}}
    rm = run_model(man, None, None, None)
    assert rm.target.experts == 384 and "config.json" in rm.source
    old = read_manifest(str(ROOT / "samples" / "h200-transformers" / "spec.parquet"))
    rm = run_model(old, None, None, None)
    assert rm.target.family == "deepseek" and rm.target.experts == 64 and rm.target.layers == 8


def test_sglang_capture_manifest_config_and_server_args(tmp_path: Path) -> None:
    """A live SGLang capture records the server's config.json (when its model_path is a local directory) and the
    server args: sol takes the model, TP and DP-attention from them."""
    from tracekit.analyzers.sol.run import run_model
    from tracekit.collectors.sglang.live import model_config

    (tmp_path / "config.json").write_text(KIMI.read_text())
    cfg = model_config(str(tmp_path))
    assert cfg is not None and cfg["text_config"]["n_routed_experts"] == 384
    assert model_config(str(tmp_path / "absent")) is None and model_config("moonshotai/Kimi-K2.5") is None
    man = {"world_size": 8, "capture": {"mode": "sglang-live", "model_config": cfg,
                                        "server_args": {"tp_size": 8, "enable_dp_attention": True}}}
    rm = run_model(man, None, None, None)
    assert rm.engine == "sglang" and "SGLang server" in rm.source and rm.target.layers == 61


def test_dp_attention_and_expert_parallel_sharding() -> None:
    """DP-attention: attention weights whole on every rank, each rank holds the latent KV of its own requests;
    EP: each rank reads U/EP whole experts, the same bytes as TP's 1/TP of U experts."""
    from tracekit.analyzers.sol.model import work

    shape = model_shape(load_config(str(KIMI)))
    step = Step("d", 16, 1, 4096)
    tp = work(shape, Layout(8), step)
    dp = work(shape, Layout(8, dp_attention=True), step)
    ep = work(shape, Layout(8, ep=8), step)
    H, L = 7168, 61
    whole_attn = L * (H * 1536 + 1536 * 64 * 192 + H * 576 + 512 * 64 * 256 + 64 * 128 * H) * 2
    assert dp.bytes["attention_weights"] == pytest.approx(whole_attn)
    assert tp.bytes["attention_weights"] < whole_attn / 3  # q_a and kv_a replicated, the rest 1/8
    per_token_kv = 576 * 2 * L
    assert tp.bytes["kv_cache"] == pytest.approx(16 * 4097 * per_token_kv)  # every request's latent on every rank
    assert dp.bytes["kv_cache"] == pytest.approx(2 * 4097 * per_token_kv)  # 16 requests over 8 DP ranks
    assert ep.bytes["routed_experts"] == pytest.approx(tp.bytes["routed_experts"])
    assert tp.distinct_experts == pytest.approx(expected_distinct_experts(384, 8, 16))


def test_draft_model_on_a_run_gives_its_draft_phases_floors(tmp_path: Path) -> None:
    """An engine's run records no draft model: --draft-model gives its draft and draft_extend phases a floor
    (a draft phase: one-token forwards, as many as its tokens per sequence)."""
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(ROOT / "samples" / "h200-transformers" / "spec.parquet"))
    base = sol_of_run(r.events, r.manifest, run="x")
    assert base.phase("draft") is None and any("draft" in n for n in base.notes)
    draft = json.loads((ROOT / "samples" / "sol" / "kimi-k2.5-eagle3-draft.config.json").read_text())
    draft.update(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=16,
                 head_dim=64, vocab_size=16384)
    rep = sol_of_run(r.events, r.manifest, run="x", draft_config=draft)
    d = rep.phase("draft")
    assert d is not None and d.floor.floor_ns > 0 and d.floor.step.tokens == 1


@pytest.mark.parametrize("path", ["h200-lite/lite-on.parquet", "h200-lite/full-off.parquet",
                                  "h200-transformers/spec.parquet", "h200-transformers/base.parquet",
                                  "h200x2-forensics/run.parquet", "h200-sol/eager.parquet",
                                  "h200-sol/graphed.parquet", "h200-sol/transformers.parquet"])
def test_other_committed_h200_captures_never_beat_their_floor(path: str) -> None:
    """Every committed H200 capture of the built-in workload (lite and full profiles, one GPU; two GPUs) and of
    the transformers engine (deepseek-v3-small on one H200): no phase and no bucket of any instance below its
    floor, on the table's H200."""
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(ROOT / "samples" / path))
    rep = sol_of_run(r.events, r.manifest, run=path)
    assert rep.gpu.name == "H200" and rep.phases
    assert not rep.beaten
    assert all(p.pct is not None and 0 < p.pct < 100 for p in rep.phases)


H200_SOL = ROOT / "samples" / "h200-sol"


def test_h200_calibration_lies_within_the_datasheet() -> None:
    """``tracekit sol --calibrate`` on the H200 (samples/h200-sol/h200.toml, bench/h200_sol.sh): the measured
    copy bandwidth and GEMM rates are below the datasheet's peaks and above half of them (a calibration that
    beats the datasheet, or reaches a small fraction, measured something else)."""
    from tracekit.analyzers.sol.gpus import gpu_spec

    cal, sheet = gpu_spec(str(H200_SOL / "h200.toml")), gpu_spec("H200")
    assert cal.origin.endswith("h200.toml") and sheet.origin == "table" and cal.achievable == 1.0
    assert 0.5 * sheet.hbm_Bps < cal.hbm_Bps < sheet.hbm_Bps  # 4,015 of 4,800 GB/s
    for prec in ("bf16", "fp8"):  # 755 of 989, 1,315 of 1,979 TFLOP/s
        assert 0.5 * sheet.flops[prec] < cal.flops[prec] < sheet.flops[prec], prec


@pytest.mark.parametrize("name", ["eager", "graphed", "transformers"])
def test_h200_sol_captures_never_beat_the_calibrated_floor(name: str) -> None:
    """The H200 captures of bench/h200_sol.sh against the GPU's measured rates (achievable 1.0 of the
    calibration: floors ~7% above the table's 0.9 x 4.8 TB/s): still no phase and no bucket below its floor;
    the memory-bound buckets of the built-in workload's verify reach a plausible fraction (attention and MoE
    between 30% and 100% of SOL at batch 16, samples/h200-sol/README.md)."""
    from tracekit.analyzers.sol.run import sol_of_run
    from tracekit.store import load_run

    r = load_run(str(H200_SOL / f"{name}.parquet"))
    rep = sol_of_run(r.events, r.manifest, run=name, gpu=str(H200_SOL / "h200.toml"))
    assert rep.gpu.name == "NVIDIA H200 (calibrated)" and rep.phases
    assert not rep.beaten
    assert all(p.pct is not None and 0 < p.pct < 100 for p in rep.phases)
    if name != "transformers":
        verify = rep.phase("verify")
        assert verify is not None
        pct = {b.bucket: b.pct for b in verify.buckets}
        assert all(p is not None and 30 < p < 100 for p in (pct["attention"], pct["moe"])), pct
