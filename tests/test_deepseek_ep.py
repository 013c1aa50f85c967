"""DeepSeek's expert-parallel traces (deepseek-ai/profile-data: train.json EP64, prefill.json EP32,
decode.json EP128; one GPU's PyTorch-profiler trace each, two micro-batches overlapping compute with
DeepEP's all-to-all). The files themselves are not readable here (only the repository's README is):
these tests build traces of the documented shape with real DeepEP kernel names.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import TraceBuilder

from tracekit import schema
from tracekit.cli import cli
from tracekit.errors import RankError
from tracekit.finalize.categories import match_name
from tracekit.ingest import ingest_traces

# real DeepEP kernel names as public traces show them (deepseek-ai/DeepEP csrc/kernels: intranode.cu,
# internode.cu, internode_ll.cu)
DISPATCH_LL = ("void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*, int*, long*, int*, void*, int*, "
               "void*, void const*, long const*, int*, int*, int*, int, int, int, int, int, int, int, int, int, int)")
COMBINE_LL = "void deep_ep::internode_ll::combine<(bool)0, (int)6144, (int)11>(void *, void *, int *, void *)"
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, int4 const*)"


@pytest.mark.parametrize(("name", "op"), [(DISPATCH_LL, "dispatch"), (COMBINE_LL, "combine"), (DISPATCH, "dispatch"),
                                          (COMBINE, "combine"), ("void deep_ep::internode::notify_dispatch<8>(int*)", "dispatch")])
def test_deepep_kernels_are_communication(name: str, op: str) -> None:
    rule = match_name(name)
    assert rule is not None and rule.category == "comm" and rule.coll_op == op


def _ep_rank(tmp_path: Path, rank: int = 5, world: int = 32) -> Path:
    """One GPU of an EP32 prefill: micro-batch 0 computes (stream 7) while micro-batch 1's dispatch and
    combine run on the communication stream (9), then the reverse."""
    b = TraceBuilder(rank=rank, world_size=world, device=rank % 8, pid=700, tid=700)
    t = 7_000_000_123  # ns resolution, as Kineto's three decimals give
    b.kernel("void deep_gemm::fp8_gemm_kernel<128, 128>(float*)", t, t + 10_000, 100_000, stream=7)  # mb0 GEMM
    b.kernel(DISPATCH, t + 1_000, t + 30_000, 60_000, stream=9)  # mb1 dispatch: 60 us, all under mb0's GEMM
    b.kernel("void deep_gemm::m_grouped_fp8_gemm_kernel<7168>(float*)", t + 2_000, t + 120_000, 80_000, stream=7)  # mb0 experts
    b.kernel(COMBINE, t + 3_000, t + 150_000, 70_000, stream=9)  # mb1 combine: 50 us under mb0's experts, 20 us exposed
    return b.write(tmp_path / f"prefill-rank-{rank}.json")


def test_a_single_ep_rank_is_a_partial_set_of_the_world_it_declares(tmp_path: Path) -> None:
    f = _ep_rank(tmp_path)
    with pytest.raises(RankError, match=r"missing rank\(s\) 0-4,6-31 of world size 32"):
        ingest_traces([str(f)])
    run = ingest_traces([str(f)], allow_missing_ranks=True)
    assert run.ranks == [5] and run.manifest["world_size"] == 32 and len(run.manifest["missing_ranks"]) == 31
    k = run.events.filter(pl.col("kind") == schema.KERNEL).sort("start_ns")
    assert k.get_column("category").cast(pl.String).to_list() == ["gemm", "comm", "moe", "comm"]
    assert k.get_column("coll_op").to_list() == [None, "dispatch", None, "combine"]


def test_overlapped_all_to_all_is_overlapped_communication(tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(_ep_rank(tmp_path)), "-o", str(out), "-q", "--allow-missing-ranks"])
    assert res.exit_code == 3, res.output  # a partial run
    res = CliRunner().invoke(cli, ["attribute", str(out), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    (ph,) = doc["phases"]
    assert ph["phase"] == "trace"
    # comm kernels: 60 us + 70 us = 130 us; under compute: 60 us + 50 us = 110 us (overlapped), 20 us exposed
    assert ph["overlapped_comm_ns"] == 110_000
    assert ph["buckets_ns"]["comm"] == 20_000
