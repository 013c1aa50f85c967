"""Collective recognition, grouping, ordering and cross-rank matching (tracekit.finalize.collectives)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tracekit.finalize.categories import COMM_CATEGORIES, match_name
from tracekit.finalize.collectives import (
    annotate_collectives,
    collective_issues,
    comm_mask,
    match_collectives,
)
from tracekit.schema import conform

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def k(rank: int, name: str, start: int, dur: int, stream: int = 20, **kw: Any) -> dict[str, Any]:
    return dict(rank=rank, kind="kernel", name=name, device=rank, stream=stream, start_ns=start, dur_ns=dur, **kw)


@pytest.mark.parametrize(
    ("name", "op"),
    [
        (AR, "allreduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "allgather"),
        ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "reducescatter"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv"),
        ("void cross_device_reduce_1stage<__nv_bfloat16, 2>(...)", "allreduce"),
        ("void vllm::all_reduce_two_shot_kernel<float>", "allreduce"),
        ("allreduce_fusion_kernel_oneshot_lamport<bf16>", "allreduce"),
        ("multimem_all_reduce_kernel", "allreduce"),
        ("void deep_ep::intranode::dispatch<8>(...)", "dispatch"),
        ("void deep_ep::intranode::combine<8>(...)", "combine"),
    ],
)
def test_comm_names_and_ops(name: str, op: str) -> None:
    """The one name -> op mapping is the category rule table's coll_op."""
    rule = match_name(name)
    assert rule is not None and rule.category in COMM_CATEGORIES and rule.coll_op == op
    ev = conform(pl.DataFrame([k(0, name, 0, 10)]))
    assert comm_mask(ev).to_list() == [True]  # no category yet: recognised through the same table
    assert annotate_collectives(ev).get_column("coll_op").to_list() == [op]


@pytest.mark.parametrize("name", ["flash::FlashAttnFwdCombine<...>", "nvjet_tst_64x8", "MergeStates", "fused_moe_kernel"])
def test_compute_names_are_not_comm(name: str) -> None:
    rule = match_name(name)
    assert rule is None or rule.category not in COMM_CATEGORIES
    assert comm_mask(conform(pl.DataFrame([k(0, name, 0, 10)]))).to_list() == [False]


def test_groups_and_order() -> None:
    rows = []
    for r in range(2):
        rows += [k(r, AR, 1000 * i + 7 * r, 100) for i in (2, 0, 1)]  # out of order on purpose
        rows.append(k(r, "cross_device_reduce_2stage<bf16>", 5000, 30, stream=7))
        rows.append(k(r, "ncclDevKernel_AllGather_RING_LL", 6000, 30, stream=30, args='{"Process Group Name": "tp_group", "Group size": 2}'))
        rows.append(k(r, "nvjet_gemm", 7000, 30, stream=7))
    out = annotate_collectives(conform(pl.DataFrame(rows)))
    ar = out.filter((pl.col("rank") == 0) & (pl.col("name") == AR))
    assert ar.get_column("group").unique().to_list() == ["stream:20"]
    assert ar.sort("start_ns").get_column("coll_seq").to_list() == [0, 1, 2]
    assert out.filter(pl.col("name").str.starts_with("ncclDevKernel_AllGather")).get_column("group").unique().to_list() == ["tp_group"]
    gemm = out.filter(pl.col("name") == "nvjet_gemm")
    assert gemm.get_column("coll_seq").null_count() == 2 and gemm.get_column("group").null_count() == 2


def test_category_column_decides_when_present() -> None:
    rows = [k(0, "my_custom_ar_kernel", 0, 10, category="allreduce"), k(0, AR, 20, 10, category="other")]
    out = annotate_collectives(conform(pl.DataFrame(rows)))
    assert out.get_column("coll_seq").to_list() == [0, None]


def test_stream_ids_that_differ_across_ranks_use_ordinals() -> None:
    rows = [k(0, AR, 0, 10, stream=20), k(1, AR, 0, 10, stream=24)]
    out = annotate_collectives(conform(pl.DataFrame(rows)))
    assert out.get_column("group").to_list() == ["stream#0", "stream#0"]
    assert match_collectives(out).get_column("matched").all()


def test_wait_and_transfer() -> None:
    # rank 1 arrives 60 ns late: rank 0 waits 60 of its 100 ns; rank 1 waits 0
    rows = [k(0, AR, 1000, 100), k(1, AR, 1060, 40), k(2, AR, 1010, 95)]
    m = match_collectives(annotate_collectives(conform(pl.DataFrame(rows)))).sort("rank")
    assert m.get_column("wait_ns").to_list() == [60, 0, 50]
    assert m.get_column("transfer_ns").to_list() == [40, 40, 45]
    assert m.get_column("last_rank").to_list() == [1, 1, 1]
    assert (m["wait_ns"] + m["transfer_ns"] == m["dur_ns"]).all()


def test_wait_is_clipped_to_the_kernel() -> None:
    rows = [k(0, AR, 0, 10), k(1, AR, 500, 10)]  # clock skew or a kernel that ends before the other starts
    m = match_collectives(annotate_collectives(conform(pl.DataFrame(rows)))).sort("rank")
    assert m.get_column("wait_ns").to_list() == [10, 0]


def test_count_and_op_mismatches_are_reported_not_matched() -> None:
    rows = [k(0, AR, 0, 10), k(0, AR, 100, 10), k(1, AR, 0, 10)]
    m = match_collectives(annotate_collectives(conform(pl.DataFrame(rows))))
    assert not m.get_column("matched").any() and m.get_column("wait_ns").null_count() == m.height
    assert collective_issues(m) == ["collective count differs across ranks in group stream:20 (rank 0: 2, rank 1: 1)"]
    rows = [k(0, AR, 0, 10), k(1, "ncclDevKernel_AllGather_RING_LL", 0, 10)]
    m = match_collectives(annotate_collectives(conform(pl.DataFrame(rows))))
    assert not m.get_column("matched").any()
    assert "different ops" in collective_issues(m)[0]


def test_no_collectives() -> None:
    out = annotate_collectives(conform(pl.DataFrame([k(0, "nvjet", 0, 10)])))
    assert match_collectives(out).height == 0
