"""NCCL settings from kernel names (tracekit.nccl), the per-rank mix (analyzers.nccl_mix), and what
info / diff print of it and of the environment.

Name sources: the committed samples (NCCL 2.28.9 on 2x H200); NCCL's own generators
(NVIDIA/nccl src/device/generate.py, src/device/symmetric/generate.py: the lists below are theirs);
NCCL <= 2.18's NCCL_KERN_NAME (src/collectives/device/common.h) as it appears in real traces
(pytorch/kineto tb_plugin's distributed test trace: ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem));
RCCL 2.30's generic kernels (ncclDevKernel_Generic_4).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import TraceBuilder

from tracekit.analyzers.nccl_mix import mix_changes, nccl_mix
from tracekit.cli import cli
from tracekit.nccl import FAMILY_DEV, FAMILY_LEGACY, FAMILY_SYMMETRIC, parse_nccl_kernel
from tracekit.store import load_run, read_manifest
from tracekit.summary import manifest_differences

ROOT = Path(__file__).resolve().parent.parent
MAINJOB = ROOT / "samples" / "h200x2-mainjob" / "eager.parquet"


def test_real_names_of_the_samples() -> None:
    names = set(load_run(MAINJOB).events.filter(pl.col("name").cast(pl.String).str.starts_with("ncclDevKernel"))
                .get_column("name").cast(pl.String).unique().to_list())
    assert names == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                     "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                     "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}
    k = parse_nccl_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert k is not None
    assert (k.collective, k.reduction, k.dtype, k.algorithm, k.protocol, k.family, k.exact) == (
        "AllReduce", "Sum", "bf16", "RING", "LL", FAMILY_DEV, False)
    g = parse_nccl_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    assert g is not None and (g.collective, g.dtype, g.setting) == ("AllGather", None, "RING/LL")


# NVIDIA/nccl src/device/generate.py (2.19 - 2.28): every kernel name its template can produce
_COLLS = ["Broadcast", "Reduce", "AllGather", "AllGatherV", "ReduceScatter", "AllReduce"]
_REDOPS = ["Sum", "Prod", "MinMax", "PreMulSum", "SumPostDiv"]
_TYS = ["i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"]
_PROTOS = ["LL", "LL128", "SIMPLE"]
_ALGOS = ["TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"]


def test_every_name_of_ncclDevKernels_template_parses() -> None:
    n = 0
    for coll in _COLLS:
        for algo in _ALGOS:
            for proto in _PROTOS:
                if coll in ("AllGather", "AllGatherV", "Broadcast"):
                    k = parse_nccl_kernel(f"ncclDevKernel_{coll}_{algo}_{proto}(ncclDevKernelArgs4K)")
                    assert k is not None and (k.collective, k.algorithm, k.protocol) == (coll, algo, proto)
                    n += 1
                    continue
                for op in _REDOPS:
                    for ty in _TYS:
                        k = parse_nccl_kernel(f"ncclDevKernel_{coll}_{op}_{ty}_{algo}_{proto}")
                        assert k is not None, (coll, op, ty, algo, proto)
                        assert (k.collective, k.reduction, k.dtype, k.algorithm, k.protocol) == (coll, op, ty, algo, proto)
                        n += 1
    assert n > 3000
    for name in ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic",
                 "ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)"):
        k = parse_nccl_kernel(name)
        assert k is not None and k.algorithm is None and k.setting == "-"


@pytest.mark.parametrize(("name", "fields"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", ("AllReduce", "Sum", "float", "RING", "LL")),
    ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)", ("Broadcast", "Sum", "int8_t", "RING", "LL")),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclDevComm*, unsigned long, ncclWork*)", ("AllReduce", "Sum", "half", "RING", "LL")),
    ("ncclKernel_AllReduce_TREE_LL_Sum___nv_bfloat16(ncclDevComm*, unsigned long, ncclWork*)",
     ("AllReduce", "Sum", "__nv_bfloat16", "TREE", "LL")),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", ("SendRecv", "Sum", "int8_t", "RING", "SIMPLE")),
])
def test_legacy_names(name: str, fields: tuple[str, ...]) -> None:
    k = parse_nccl_kernel(name)
    assert k is not None and k.family == FAMILY_LEGACY and not k.exact
    assert (k.collective, k.reduction, k.dtype, k.algorithm, k.protocol) == fields


@pytest.mark.parametrize(("name", "fields"), [
    ("ncclSymkDevKernel_AllReduce_AGxLL_R_sum_f8e5m2(ncclSymkDevWorkArgs4K)", ("AllReduce", "sum", "f8e5m2", "AGxLL_R")),
    ("ncclSymkDevKernel_ReduceScatter_LL_sum_f32", ("ReduceScatter", "sum", "f32", "LL")),
    ("ncclSymkDevKernel_AllReduce_RSxLDMC_AGxSTMC_sum_bf16_profile", ("AllReduce", "sum", "bf16", "RSxLDMC_AGxSTMC")),
    ("ncclSymkDevKernel_ReduceScatter_RailA2A_LsaLD_avg_bf16", ("ReduceScatter", "avg", "bf16", "RailA2A_LsaLD")),
    ("ncclSymkDevKernel_AllGather_STMC", ("AllGather", None, None, "STMC")),
])
def test_symmetric_names_say_the_algorithm_that_ran(name: str, fields: tuple[str | None, ...]) -> None:
    k = parse_nccl_kernel(name)
    assert k is not None and k.family == FAMILY_SYMMETRIC and k.exact and k.protocol is None
    assert (k.collective, k.reduction, k.dtype, k.algorithm) == fields


@pytest.mark.parametrize("name", ["nccl:all_reduce", "cross_device_reduce_1stage", "ncclDevKernel", "ncclKernel_AllReduce",
                                  "ncclDevKernel_AllReduce_Sum_bf16_RING"])
def test_not_nccl_kernel_names(name: str) -> None:
    assert parse_nccl_kernel(name) is None


def test_mix_of_the_real_capture() -> None:
    mix = nccl_mix(load_run(MAINJOB).events)
    assert mix.ranks() == [0, 1]
    for rank in (0, 1):
        assert mix.settings(rank) == {"AllReduce RING/LL": 461, "AllGather RING/LL": 60}
    row = next(r for r in mix.of_rank(0) if r.dtype == "bf16")
    assert (row.collective, row.setting, row.count) == ("AllReduce", "RING/LL", 460)
    assert mix_changes(mix, mix) == []


def _run(tmp_path: Path, name: str, algo: str) -> Path:
    out = tmp_path / f"{name}.parquet"
    files = []
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, device=rank, pid=100 + rank, tid=100 + rank)
        t = 5_000_000_000
        b.range("tracekit:verify|cycle=0|bs=1", t, 400_000)
        b.kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", t + 1_000, t + 10_000, 20_000)
        b.kernel(f"ncclDevKernel_AllReduce_Sum_bf16_{algo}_LL(ncclDevKernelArgsStorage<4096ul>)", t + 40_000, t + 50_000, 9_000)
        files.append(b.write(tmp_path / f"{name}-rank-{rank}.json"))
    res = CliRunner().invoke(cli, ["ingest", *map(str, files), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return out


def test_diff_says_when_the_nccl_kernels_changed(tmp_path: Path) -> None:
    old, new = _run(tmp_path, "old", "RING"), _run(tmp_path, "new", "TREE")
    res = CliRunner().invoke(cli, ["diff", str(old), str(new), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["nccl"]["changes"] == [
        {"rank": r, "old": {"AllReduce RING/LL": 1}, "new": {"AllReduce TREE/LL": 1}} for r in (0, 1)]
    text = CliRunner().invoke(cli, ["diff", str(old), str(new)]).output
    assert "NCCL kernels changed on rank 0 (from their names): AllReduce RING/LL x1 -> AllReduce TREE/LL x1" in text
    same = CliRunner().invoke(cli, ["diff", str(old), str(old)]).output
    assert "NCCL kernel settings: the same on every rank in both runs" in same


def test_info_shows_the_nccl_mix_and_every_variable_each_rank_saw() -> None:
    res = CliRunner().invoke(cli, ["info", str(MAINJOB), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {(r["rank"], r["collective"], r["dtype"], r["setting"], r["count"]) for r in doc["nccl"]} >= {
        (0, "AllReduce", "bf16", "RING/LL", 460), (1, "AllGather", None, "RING/LL", 60)}
    env = doc["environment"]
    assert env["by_rank"]["0"]["NCCL_NVLS_ENABLE"] == "0" and env["by_rank"]["1"]["NCCL_DEBUG"] == "WARN"
    assert env["set_by_tracekit"] == {"NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1",
                                      "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    text = CliRunner().invoke(cli, ["info", str(MAINJOB)], terminal_width=200).output
    assert "NCCL kernels per rank" in text and "NCCL_ALGO, NCCL_PROTO: set on no rank" in text
    line = next(ln for ln in text.splitlines() if "NCCL_NVLS_ENABLE" in ln)
    assert "0 *" in line and "ranks 0-1" in line


def test_cycle_time_is_a_measurement_not_a_difference() -> None:
    man = read_manifest(MAINJOB)
    ranks = {r: {**sec, "cycle_time": {"unprofiled": {"median_ns": 1_000 + int(r)}}} for r, sec in man["ranks"].items()}
    assert not [d for d in manifest_differences({**man, "ranks": ranks}) if "cycle_time" in d.key]
