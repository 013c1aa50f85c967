"""Kernel categories: the built-in table covers the SGLang families, in the right order."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.errors import TracekitError
from tracekit.finalize.categories import (
    categorize,
    default_rules,
    load_rules,
    match_name,
    unmatched_kernels,
)
from tracekit.finalize.names import normalize_kernel_name

CASES = [
    # allreduce: NCCL and every custom family
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce", "allreduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)", "allreduce", "allreduce"),
    ("void cross_device_reduce_1stage<__nv_bfloat16, 8>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)", "allreduce", "allreduce"),
    ("void cross_device_reduce_2stage<half, 4>(RankData*)", "allreduce", "allreduce"),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)", "allreduce", "allreduce"),
    ("all_reduce_two_shot_kernel", "allreduce", "allreduce"),
    ("all_reduce_one_shot_push_kernel", "allreduce", "allreduce"),
    ("void all_reduce_2shot_pull_kernel<float>(float*)", "allreduce", "allreduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(Params)", "allreduce", "allreduce"),
    ("allreduce_fusion_kernel_twoshot_sync", "allreduce", "allreduce"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(float**)", "allreduce", "allreduce"),
    ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<bf16, 8>()", "allreduce", "allreduce"),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<bf16>()", "allreduce", "allreduce"),
    ("void allreduce_1shotLL_1node<__nv_bfloat16>(...)", "allreduce", "allreduce"),
    ("void mscclpp::allreduce8<half>(half*)", "allreduce", "allreduce"),
    # other collectives
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "comm", "allgather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(x)", "comm", "reducescatter"),
    ("ncclDevKernel_Broadcast_RING_LL(x)", "comm", "broadcast"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "comm", "sendrecv"),
    ("void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", "comm", "dispatch"),
    ("void deep_ep::internode_ll::combine<true>(void*)", "comm", "combine"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*)", "comm", "dispatch"),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "comm", None),
    # attention
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>>, cutlass::bfloat16_t>>>>(Params)", "attention", None),
    ("void flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>>, 7, 256>(Params)", "attention", None),
    ("void flash::prepare_varlen_num_blocks_kernel(int)", "attention", None),
    ("void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<KTraits, Params>(Params)", "attention", None),
    ("void flashinfer::BatchPrefillWithPagedKVCacheKernel<KTraits, Params>(Params)", "attention", None),
    ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<Params>(Params)", "attention", None),
    ("void flashinfer::MergeStatesKernel<8u, 16u>(half*)", "attention", None),
    ("_fwd_grouped_kernel_stage1", "attention", None),
    ("_fwd_kernel_stage2", "attention", None),
    ("_fwd_kernel", "attention", None),  # Triton extend/verify attention (collides with prefill)
    ("_fwd_kernel_unified", "attention", None),
    ("void flash_fwd_splitkv_mla_kernel<Traits, true>(Flash_fwd_mla_params)", "attention", None),
    ("flash_fwd_mla_combine_kernel", "attention", None),
    ("get_mla_metadata_kernel", "attention", None),
    ("fmhaSm100Kernel_QkvE4m3OBfloat16", "attention", None),
    ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<>)", "attention", None),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128", "attention", None),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>(Flash_fwd_params)", "attention", None),
    ("void at::native::(anonymous namespace)::efficient_attention_forward(x)", "attention", None),
    # MoE
    ("kimi_k2_moe_fused_gate_kernel", "moe", None),
    ("void moe_fused_gate_kernel<float>(float*)", "moe", None),
    ("void deepseek_v3_topk_kernel<float>()", "moe", None),
    ("void vllm::moe::topkGatingSoftmax<8, 128>(float const*)", "moe", None),
    ("void moe_align_block_size_kernel<int>(int*)", "moe", None),
    ("void count_and_sort_expert_tokens_kernel<int>(int*)", "moe", None),
    ("fused_moe_kernel", "moe", None),
    ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 4, 8>(int4 const*)", "moe", None),
    ("void deep_gemm::sm90_fp8_m_grouped_gemm_contiguous<128>(x)", "moe", None),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<cute::tuple<int>>>>(Params)", "moe", None),
    ("void tensorrt_llm::kernels::expandInputRowsKernel<bf16>()", "moe", None),
    ("void tensorrt_llm::kernels::finalizeMoeRoutingKernel<bf16>()", "moe", None),
    ("act_and_mul_kernel", "moe", None),
    ("void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, silu>(bf16*)", "elementwise", None),
    ("moe_sum_reduce_kernel", "moe", None),
    # dense GEMM (after FA3 / grouped checks)
    ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "gemm", None),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "gemm", None),
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>>>(Params)", "gemm", None),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm", None),
    ("void gemv2T_kernel_val<int, int, float>(float)", "gemm", None),
    ("void cublasLt::splitKreduce_kernel<32, 16>(x)", "gemm", None),
    ("void deep_gemm::fp8_gemm_kernel<128>(x)", "gemm", None),
    # norm, sampling, elementwise
    ("void flashinfer::norm::FusedAddRMSNormKernel<8u, bf16>(x)", "norm", None),
    ("void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true>(x)", "norm", None),
    ("void vllm::rotary_embedding_kernel<bf16, true>(x)", "norm", None),
    ("void build_tree_efficient<int>(x)", "sampling", None),
    ("void flashinfer::sampling::TreeSpeculativeSamplingTargetOnly<1024u>(x)", "sampling", None),
    ("verify_tree_greedy", "sampling", None),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(x)", "sampling", None),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)", "sampling", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int)", "elementwise", None),
    ("triton_poi_fused_add_0", "elementwise", None),
    ("void at_cuda_detail::cub::detail::scan::DeviceScanKernel<Policy, long*>(long*)", "elementwise", None),
    ("void cudnn::fusion::lean_reduction_kernel<float, 4>(x)", "elementwise", None),
    ("void at::native::reduce_kernel<512, 1>(x)", "elementwise", None),
    ("some_unknown_thing", None, None),
]


@pytest.mark.parametrize(("name", "category", "coll_op"), CASES)
def test_builtin_table(name: str, category: str | None, coll_op: str | None) -> None:
    rule = match_name(name)
    if category is None:
        assert rule is None
        return
    assert rule is not None, name
    assert rule.category == category, (name, rule.pattern)
    assert rule.coll_op == coll_op


def _events() -> pl.DataFrame:
    names = [c[0] for c in CASES]
    n = len(names)
    return pl.DataFrame({
        "rank": [0] * (n + 3),
        "kind": ["kernel"] * n + ["memcpy", "memset", "op"],
        "name": [*names, "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "aten::mm"],
        "category": [None] * (n + 3),
        "coll_op": [None] * (n + 1) + [None, None],
        "start_ns": list(range(n + 3)),
        "dur_ns": [10] * (n + 3),
    }, schema_overrides={"category": pl.String, "coll_op": pl.String})


def test_categorize_frame_fills_gpu_rows_only() -> None:
    ev = categorize(_events())
    by = dict(zip(ev["name"], ev["category"], strict=True))
    assert by["Memcpy HtoD (Pageable -> Device)"] == "memory"
    assert by["Memset (Device)"] == "memory"
    assert by["aten::mm"] is None
    assert by["some_unknown_thing"] == "other"
    # the vectorised (polars regex) path agrees with the rule table on every case
    for name, category, coll_op in CASES:
        assert by[name] == (category or "other"), name
        got_op = ev.filter(pl.col("name") == name)["coll_op"].to_list()
        assert got_op == [coll_op], name
    ops = dict(zip(ev["name"], ev["coll_op"], strict=True))
    assert ops["ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"] == "allgather"
    assert ev.height == _events().height


def test_unmatched_report() -> None:
    ev = categorize(_events())
    un = unmatched_kernels(ev)
    assert un["name"].to_list() == ["some_unknown_thing"]
    assert un["count"].to_list() == [1] and un["total_ns"].to_list() == [10]


def test_every_builtin_pattern_compiles_in_python_re() -> None:
    import re

    for rule in default_rules():
        re.compile(rule.pattern)
    assert {r.category for r in default_rules()} >= {"attention", "moe", "gemm", "allreduce", "comm", "norm", "elementwise", "sampling", "memory"}


def test_python_only_pattern_falls_back(tmp_path: Path) -> None:
    f = tmp_path / "look.toml"
    f.write_text('[[rule]]\ncategory = "sampling"\npattern = "^some_(?=unknown)"\n')  # look-ahead: Python re only
    ev = categorize(_events(), load_rules(f))
    assert dict(zip(ev["name"], ev["category"], strict=True))["some_unknown_thing"] == "sampling"


def test_user_rules_come_first(tmp_path: Path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text('[[rule]]\ncategory = "attention"\npattern = "^some_unknown"\nnote = "my kernel"\n'
                 '[[rule]]\ncategory = "comm"\npattern = "nvjet_tst_128"\ncoll_op = "allgather"\n')
    rules = load_rules(f)
    assert len(rules) == len(default_rules()) + 2
    ev = categorize(_events(), rules)
    by = dict(zip(ev["name"], ev["category"], strict=True))
    assert by["some_unknown_thing"] == "attention"
    assert by["nvjet_tst_128x64_64x8_1x1_v_bz_TNT"] == "comm"
    assert unmatched_kernels(ev, rules).height == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not toml [[[", "not valid TOML"),
        ("x = 1\n", r"no \[\[rule\]\] entries"),
        ('[[rule]]\ncategory = "attention"\npattern = "("\n', "bad regular expression"),
        ('[[rule]]\ncategory = "attention"\npattern = "x"\ncoll_op = "gossip"\n', "coll_op"),
        ('[[rule]]\ncategory = "attention"\npattern = "x"\ncolour = "red"\n', "unknown key"),
    ],
)
def test_bad_rule_files(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(TracekitError, match=message) as exc:
        load_rules(f)
    assert exc.value.path == str(f)


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("void at::native::vectorized_elementwise_kernel<4, F, A>(int, F, A)", "at::native::vectorized_elementwise_kernel"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<int>, 128>>>(flash::Params)", "flash::FlashAttnFwdSm90"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)", "at::native::anon::cunn_SoftMaxForward"),
        ("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "nvjet_tst_128x64_64x8_1x1_v_bz_TNT"),
        ("void foo<" + "a, " * 1000, "foo"),  # truncated template: still a short key
        ('kernel "quoted"', 'kernel "quoted"'),
    ],
)
def test_normalize_kernel_name(name: str, normalized: str) -> None:
    assert normalize_kernel_name(name) == normalized
    assert len(normalize_kernel_name("x" * 5000)) <= 200


def test_rule_table_memo_serves_no_stale_table(tmp_path: Path) -> None:
    """Names are matched once per process and rule table: the same names under other rules, then
    under the first rules again, in one process, give each table's own answer."""
    from tracekit.finalize.categories import rule_table

    name = "nvjet_tst_128x64_64x8_1x1_v_bz_TNT"
    first = rule_table([name, "some_unknown_thing"])  # built-in: gemm, unmatched
    assert first["_cat"].to_list() == ["gemm", "other"] and first["_matched"].to_list() == [True, False]
    f = tmp_path / "mine.toml"
    f.write_text('[[rule]]\ncategory = "comm"\npattern = "nvjet_tst"\ncoll_op = "allgather"\n')
    mine = rule_table([name, "some_unknown_thing"], load_rules(f))
    assert mine["_cat"].to_list() == ["comm", "other"] and mine["_op"].to_list() == ["allgather", None]
    g = tmp_path / "other.toml"  # the same pattern, another category: another table
    g.write_text('[[rule]]\ncategory = "attention"\npattern = "nvjet_tst"\n')
    other = categorize(_events(), load_rules(g))
    assert dict(zip(other["name"], other["category"], strict=True))[name] == "attention"
    again = categorize(_events())
    assert dict(zip(again["name"], again["category"], strict=True))[name] == "gemm"
    assert rule_table([name])["_cat"].to_list() == ["gemm"]


def test_one_query_matches_rule_by_rule() -> None:
    """The one-query matcher (a when/then chain over every rule) and the rule-by-rule reference
    (``_rule_mask``, first match wins) agree on every case and on the kernels of the samples."""
    from tracekit.finalize import categories as cats

    samples = Path(__file__).resolve().parent.parent / "samples"
    names = {c[0] for c in CASES}
    for run in sorted(samples.glob("*/*.parquet")):
        ev = pl.read_parquet(run, columns=["kind", "name"])
        names |= set(ev.filter(pl.col("kind").cast(pl.String) == "kernel")["name"].cast(pl.String).drop_nulls().to_list())
    ordered = sorted(names)
    rules = default_rules()
    one_query = cats._first_match(ordered, rules)
    s = pl.Series("name", ordered, dtype=pl.String)
    ref = []
    masks = [cats._rule_mask(s, r).to_list() for r in rules]
    for j in range(len(ordered)):
        ref.append(next((i for i, m in enumerate(masks) if m[j]), -1))
    assert one_query == ref
    assert len(ordered) > len(CASES) and -1 in ref and len(set(ref)) > 10
