"""ROCm traces: HIP launches joined to their kernels, HIP graph replays, ROCm library kernel names.

Real data: samples/rocm-mi300x (AMD TraceLens's MI300X BERT trace, MIT). Kernel names are real,
each cited where it was read. Edge cases are synthetic traces in the real shape (Kineto on ROCm
writes HIP API calls under cat "cuda_runtime", as that trace does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest
from kineto_synth import TraceBuilder

from tracekit import schema
from tracekit.finalize.categories import match_name
from tracekit.ingest import ingest_traces

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "rocm-mi300x" / "mi300x-bert-small.json.gz"

# (kernel name, category, where the name comes from)
REAL_NAMES: list[tuple[str, str, str]] = [
    ("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1"
     "_CADS0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMB_GLS0_ISA942_IU1_K1_LBSPPA256_LBSPPB256_LBSPPM0"
     "_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1"
     "_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW1_SK0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA1"
     "_VWB1_WSGRA0_WSGRB0_WS64_WG16_4_4", "gemm", "samples/rocm-mi300x (hipBLASLt / Tensile)"),
    ("attn_fwd", "attention", "samples/rocm-mi300x (Triton flash attention on ROCm)"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
     "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)", "norm",
     "samples/rocm-mi300x"),
    ("__amd_rocclr_copyBuffer", "memory", "AMD-AGI/TraceLens TraceLens/Agent/Analysis/utils/classify_kernels.py"),
    ("__amd_rocclr_fillBufferAligned", "memory", "ROCm CLR blit kernel (fill), named in public rocprofv3 traces"),
    ("_ZN5aiter39mla_dec_stage1_bf16_a16w16_subQ16_mqa16E", "attention", "ROCm/aiter hsa/gfx942/mla/mla_asm.csv"),
    ("_ZN5aiter36mla_a8w8_qh16_qseqlen1_gqaratio16_psE", "attention", "ROCm/aiter hsa/gfx942/mla/mla_asm.csv"),
    ("_ZN5aiter39mla_pfl_bf16_a16w16_causal_subQ16_mqa16E", "attention", "ROCm/aiter hsa/gfx942/mla/mla_asm.csv"),
    ("_ZN5aiter32pa_bf16_pertokenFp8_gqa16_2tg_4wE", "attention", "ROCm/aiter hsa/gfx942/pa/pa_asm.csv"),
    ("_ZN5aiter42PA_A16W8_BLK1024_1TG_4W_16mx1_64nx4_MTP_PSE", "attention", "ROCm/aiter hsa/gfx942/pa/pa_asm.csv"),
    ("_ZN5aiter24fmha_fwd_hd128_bf16_rtneE", "attention", "ROCm/aiter hsa/gfx942/fmha_v3_fwd/fmha_fwd.csv"),
    ("_ZN5aiter49fmoe_stage1_bf16_pertokenInt8_g1u1_32x128_3tg_pf3E", "moe",
     "ROCm/aiter hsa/gfx942/fmoe_2stages/fmoe_stage1_bf16_pertokenInt8_g1u1.csv"),
    ("_ZN5aiter19topksoftmax_4x128x6E", "moe", "ROCm/aiter hsa/gfx942/topksoftmax/topksoftmax.csv"),
    ("_ZN5aiter37bf16gemm_fp32bf16_tn_32x64_pf3_splitkE", "gemm", "ROCm/aiter hsa/gfx942/bf16gemm/bf16gemm_fp32bf16.csv"),
    ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_", "norm",
     "aiter fused add + RMSNorm + quant (a public trace-analysis test of a real kernel event)"),
    ("void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(int, int, int, int, int, int, int, "
     "__hip_bfloat16 const*, __hip_bfloat16 const*, __hip_bfloat16*, int)", "gemm", "vllm csrc/rocm/skinny_gemms.cu"),
    ("paged_attention_ll4mi_QKV_mfma16_kernel", "attention", "vllm csrc/rocm/attention.cu"),
    ("kernel_unified_attention_2d", "attention", "vllm vllm/attention/ops/triton_unified_attention.py"),
    ("reduce_segments", "attention", "vllm vllm/attention/ops/triton_unified_attention.py"),
    ("cross_device_reduce_1stage", "allreduce", "vllm / sglang custom allreduce (csrc/custom_all_reduce.cuh, hipified on ROCm)"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "comm", "RCCL generic device kernel"),
    ("_fwd_grouped_kernel_stage1", "attention", "sglang srt/layers/attention/triton_ops/decode_attention.py (CUDA and ROCm)"),
    ("fused_moe_kernel", "moe", "sglang / vllm Triton fused_moe (CUDA and ROCm)"),
    # Composable Kernel / ck_tile and aiter names as public MI3xx kernel-time tables print them
    # (found with find_string; CK name patterns also in AMD-AGI/TraceLens classify_kernels.py)
    ("void ck_tile::kentry<2, ck_tile::MoeFlatmmKernel<ck_tile::GemmSpatiallyLocalTilePartitioner<", "moe", "CK tile MoE flatmm"),
    ("void ck_tile::kentry<2, ck_tile::MoeSortingKernel<ck_tile::MoeSortingProblemEx<int, float, 2, true, false, false, true, 0> >, "
     "ck_tile::MoeSortingKernel<ck_t..., true, 0> >::Kargs)", "moe", "CK tile MoE sorting"),
    ("void aiter::opus_moe_sorting_entry", "moe", "aiter MoE sorting"),
    ("aiter::fmoe_bf16_pertokenFp8_g1u1_vs_silu_1tg_ps_32x512", "moe", "aiter fused MoE"),
    ("void ck_tile::kentry<1, ck_tile::Rmsnorm2dFwd<ck_tile::Rmsnorm2dFwdPipelineOnePass<ck_tile::Rmsnorm2dFwdPipelineProblem<",
     "norm", "CK tile RMSNorm"),
    ("void ck_tile::kentry<256, 1, ck_tile::FmhaBwdDQDKDVK", "attention", "CK tile FMHA backward (flash_attn on ROCm)"),
    ("ck_tile::kentry<2, UnifiedAttentionKernel>", "attention", "CK tile unified attention"),
    ("void aiter::swiglu_act_and_mul_kernel<s", "elementwise", "aiter SwiGLU activation"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<", "gemm",
     "CK gridwise_gemm_xdl_cshuffle_v3 (TraceLens pattern kernel_gemm_xdl_cshuffle)"),
    ("void rocprim::ROCPRIM_400400_NS::detail::trampoline_kernel<rocprim::ROCPRIM_400400_NS::detail::reduce_impl<",
     "elementwise", "rocPRIM reduction"),
]


@pytest.mark.parametrize(("name", "category", "source"), REAL_NAMES, ids=[n[:40] for n, _, _ in REAL_NAMES])
def test_rocm_kernel_names_have_their_category(name: str, category: str, source: str) -> None:
    rule = match_name(name)
    assert rule is not None, f"no rule matches {name!r} ({source})"
    assert rule.category == category, f"{name!r} ({source}) is {rule.category}, rule {rule.pattern!r}"


def _frac_other(ev: pl.DataFrame) -> float:
    k = ev.filter(pl.col("kind") == schema.KERNEL)
    total = int(k.get_column("dur_ns").sum())
    other = int(k.filter(pl.col("category").cast(pl.String) == "other").get_column("dur_ns").sum() or 0)
    return other / total


def test_mi300x_sample_every_hip_launch_joins_its_kernel() -> None:
    ev = ingest_traces([str(SAMPLE)]).events
    kind = pl.col("kind").cast(pl.String)
    gpu = ev.filter(kind.is_in(list(schema.GPU_KINDS)))
    launches = ev.filter(kind == schema.LAUNCH)
    assert gpu.height == 61
    # every GPU event of this trace was made by a HIP call (hipLaunchKernel, hipExtModuleLaunchKernel,
    # hipModuleLaunchKernel, hipMemcpyWithStream): all of them join a launch row
    joined = gpu.join(launches.select("rank", "correlation"), on=["rank", "correlation"], how="semi")
    assert joined.height == gpu.height
    assert set(launches.get_column("name").unique().to_list()) == {
        "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel", "hipMemcpyWithStream"}
    syncs = ev.filter(kind == schema.SYNC).get_column("name").unique().to_list()
    assert syncs == ["hipDeviceSynchronize"]
    assert _frac_other(ev) < 0.10


def _hip(b: TraceBuilder, name: str, start: int, dur: int, corr: int, tid: int | None = None) -> None:
    b._x("cuda_runtime", name, b.pid, b.tid if tid is None else tid, start, dur, {"cid": 48, "correlation": corr})


def _kernel(b: TraceBuilder, name: str, start: int, dur: int, corr: int, ext: bool = True) -> None:
    args: dict[str, Any] = {"device": b.device, "stream": 0, "correlation": corr, "kind": "Dispatch Kernel"}
    if ext:
        args["External id"] = corr
    b._x("kernel", name, b.device, 0, start, dur, args)


def _ingest(tmp_path: Path, b: TraceBuilder) -> pl.DataFrame:
    return ingest_traces([str(b.write(tmp_path / "rocm.json"))]).events


def test_hip_graph_replay_kernels_are_graph_kernels_of_the_phase(tmp_path: Path) -> None:
    b = TraceBuilder(rank=None, device=2, pid=6240, tid=6240)
    t = 2_204_338_329_867_780
    b.range("step[DECODE bs=32]", t, 400_000)
    _hip(b, "hipGraphLaunch", t + 1_000, 30_000, 900)
    for i, name in enumerate(["_ZN5aiter39mla_dec_stage1_bf16_a16w16_subQ16_mqa16E",
                              "_ZN5aiter49fmoe_stage1_bf16_pertokenInt8_g1u1_32x128_3tg_pf3E",
                              "cross_device_reduce_1stage"]):
        _kernel(b, name, t + 40_000 + i * 20_000, 15_000, 900, ext=False)
    ev = _ingest(tmp_path, b)
    launch = ev.filter(pl.col("kind") == schema.LAUNCH)
    assert launch.get_column("name").to_list() == ["hipGraphLaunch"]
    assert launch.get_column("graph").to_list() == [True]
    k = ev.filter(pl.col("kind") == schema.KERNEL).sort("start_ns")
    assert k.get_column("graph").to_list() == [True, True, True]
    assert k.get_column("phase").cast(pl.String).to_list() == ["decode"] * 3
    assert k.get_column("category").cast(pl.String).to_list() == ["attention", "moe", "allreduce"]


def test_hip_launch_on_another_thread_joins_the_phase(tmp_path: Path) -> None:
    b = TraceBuilder(rank=None, device=0, pid=77, tid=77)
    t = 1_000_000_000
    b.range("step[DECODE bs=4]", t, 200_000)
    _hip(b, "hipExtModuleLaunchKernel", t + 5_000, 4_000, 11, tid=78)  # a second thread of the process
    _kernel(b, "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1", t + 20_000, 9_000, 11)
    ev = _ingest(tmp_path, b)
    k = ev.filter(pl.col("kind") == schema.KERNEL)
    assert k.get_column("phase").cast(pl.String).to_list() == ["decode"]
    assert k.get_column("category").cast(pl.String).to_list() == ["gemm"]


def test_integer_microsecond_hip_trace_keeps_exact_ns(tmp_path: Path) -> None:
    b = TraceBuilder(rank=None, device=0, pid=5, tid=5, integer_us=True, base=False)
    t = 1_751_410_836_000_000_000 // 1000 * 1000
    b.range("step[DECODE bs=1]", t, 100_000)
    _hip(b, "hipLaunchKernel", t + 2_000, 3_000, 21)
    _kernel(b, "attn_fwd", t + 10_000, 7_000, 21)
    _hip(b, "hipMemsetAsync", t + 20_000, 1_000, 22)
    b._x("gpu_memset", "Memset (Device)", b.device, 0, t + 30_000, 1_000, {"device": 0, "stream": 0, "correlation": 22})
    ev = _ingest(tmp_path, b)
    k = ev.filter(pl.col("kind") == schema.KERNEL)
    assert k.get_column("start_ns").to_list() == [t + 10_000]
    assert k.get_column("dur_ns").to_list() == [7_000]
    assert sorted(ev.filter(pl.col("kind") == schema.LAUNCH).get_column("name").to_list()) == ["hipLaunchKernel", "hipMemsetAsync"]
    gpu = ev.filter(pl.col("kind").is_in(list(schema.GPU_KINDS)))
    assert gpu.get_column("phase").cast(pl.String).to_list() == ["decode", "decode"]


def test_info_names_the_mi300x_and_the_hip_version(tmp_path: Path) -> None:
    from tracekit.store import read_manifest, write_run
    from tracekit.summary import run_summary

    run = ingest_traces([str(SAMPLE)])
    doc = run_summary(run.events, run.manifest)
    # deviceProperties lists the one visible device as id 0 while the kernels say device 2
    assert doc["ranks"][0]["devices"] == ["AMD Instinct MI300X VF"]
    assert doc["versions"]["hip"] == {"0": 60443483} and doc["versions"]["roctracer"] == {"0": 4.1}
    out = tmp_path / "run.parquet"
    write_run(run.events, out, run.manifest)  # the versions survive the run file
    assert run_summary(run.events, read_manifest(out))["versions"]["hip"] == {"0": 60443483}
