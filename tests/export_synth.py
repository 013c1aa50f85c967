"""Synthetic multi-rank runs for export tests and benchmarks.

The shape follows what the collectors record for EAGLE-3 on TP ranks: per cycle a
draft, a verify and a draft-extend phase range (tracekit labels, membership
already assigned), verify either from a CUDA graph (one ``cudaGraphLaunch`` and
many kernels with its correlation) or eager (an aten op around each
``cudaLaunchKernel``); kernels of several categories on a compute stream, some
overlapping the previous one (programmatic dependent launch), allreduce kernels
with ``group``/``coll_seq``, a memcpy on a copy stream, a late-facts marker, a
host range that partially overlaps another, and a GPU clock counter per cycle.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl

from tracekit.finalize.phases import format_facts, format_label
from tracekit.schema import conform

KERNELS: list[tuple[str, str]] = [
    ("void flash::FlashAttnFwdSm90<flash::kernel_traits<128, 64>, true>(flash::Params)", "attention"),
    ("fused_moe_kernel", "moe"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "allreduce"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, float)", "elementwise"),
    ("RMSNormKernel", "norm"),
]


def make_events(ranks: int = 2, cycles: int = 4, kernels: int = 12, seed: int = 0, t0: int = 1_700_000_000_000_000_000) -> pl.DataFrame:
    """An event table (schema columns) for ``ranks`` ranks and ``cycles`` speculative cycles."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    phase_id = 0
    for r in range(ranks):
        pid, tid, tid2 = 1000 + r, 1000 + r, 2000 + r
        t = t0 + r * 1_337 + int(rng.integers(0, 500))
        corr = 10_000 * (r + 1)
        coll_seq = 0
        for c in range(cycles):
            for phase in ("draft", "verify", "draft_extend"):
                phase_id += 1
                graphed = phase != "verify" or c % 2 == 0
                host_start = t
                pr: dict[str, Any] = dict(
                    rank=r, kind="range", pid=pid, tid=tid, device=-1, phase=phase, phase_id=phase_id, cycle=c,
                    batch_size=4, num_tokens=16 if phase == "verify" else 4, seq_len=1000 + 20 * c, graphed=graphed,
                    accept_len=2.5 if phase == "verify" else None,
                    name=format_label(phase, cycle=c, bs=4, tok=16 if phase == "verify" else 4, seq=1000 + 20 * c, graphed=graphed),
                )
                host: list[dict[str, Any]] = []
                gpu: list[dict[str, Any]] = []
                gt = t + 5_000
                if graphed:
                    corr += 1
                    host.append(dict(kind="launch", name="cudaGraphLaunch", start_ns=t + 1_000, dur_ns=4_000,
                                     correlation=corr, graph=True))
                n_k = kernels if phase == "verify" else max(2, kernels // 3)
                ht = t + 6_000
                for k in range(n_k):
                    name, cat = KERNELS[(k + c) % len(KERNELS)]
                    if not graphed:
                        corr += 1
                        host.append(dict(kind="op", name="aten::mm", start_ns=ht, dur_ns=3_000, external_id=corr))
                        host.append(dict(kind="launch", name="cudaLaunchKernel", start_ns=ht + 500, dur_ns=2_000,
                                         correlation=corr, external_id=corr, graph=False))
                        ht += 3_500
                    d = int(rng.integers(1_500, 9_000))
                    overlap = 300 if k % 5 == 4 else 0  # programmatic dependent launch
                    kr: dict[str, Any] = dict(kind="kernel", name=name, category=cat, device=r, stream=7,
                                              start_ns=gt - overlap, dur_ns=d, correlation=corr, graph=graphed,
                                              args=json.dumps({"grid": [132, 1, 1], "block": [128, 1, 1]}))
                    if cat == "allreduce":
                        kr.update(coll_op="allreduce", coll_bytes=4096 * 16, coll_seq=coll_seq, group="tp")
                        coll_seq += 1
                    gpu.append(kr)
                    gt += d - overlap + int(rng.integers(200, 1_500))
                if phase == "verify":
                    corr += 1
                    host.append(dict(kind="launch", name="cudaMemcpyAsync", start_ns=ht, dur_ns=1_500, correlation=corr))
                    gpu.append(dict(kind="memcpy", name="Memcpy DtoH (Device -> Pinned)", category="memory", device=r,
                                    stream=9, start_ns=gt, dur_ns=2_000, correlation=corr))
                    host.append(dict(kind="sync", name="cudaStreamSynchronize", start_ns=ht + 1_500, dur_ns=gt + 2_000 - ht - 1_000))
                    ht = gt + 2_600
                end = max(ht, t + 6_000) + 1_000
                pr.update(start_ns=host_start, dur_ns=end - host_start)
                rows.append(pr)
                for h in host:
                    h.update(rank=r, pid=pid, tid=tid, device=-1, phase=phase, phase_id=phase_id, cycle=c)
                    rows.append(h)
                for g in gpu:
                    g.update(rank=r, phase=phase, phase_id=phase_id, cycle=c)
                    rows.append(g)
                if phase == "verify":
                    rows.append(dict(rank=r, kind="range", pid=pid, tid=tid, device=-1, start_ns=end, dur_ns=0,
                                     name=format_facts("verify", c, accept=2.5)))
                t = max(end, gt) + 2_000
            # a second thread with two partially overlapping ranges
            rows.append(dict(rank=r, kind="range", name="scheduler.recv", pid=pid, tid=tid2, device=-1,
                             start_ns=t - 30_000, dur_ns=20_000))
            rows.append(dict(rank=r, kind="range", name="scheduler.process", pid=pid, tid=tid2, device=-1,
                             start_ns=t - 20_000, dur_ns=15_000))
            rows.append(dict(rank=r, kind="counter", name="gpu_clock_mhz", device=r, start_ns=t, dur_ns=0,
                             value=float(1980 - 10 * c + r)))
    return conform(pl.DataFrame(rows, infer_schema_length=None))


def make_manifest(ranks: int = 2) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "source": "synthetic",
        "ranks": {str(r): {"host": "node-a", "pid": 1000 + r, "device": r} for r in range(ranks)},
        "world_size": ranks,
    }


__all__ = ["KERNELS", "make_events", "make_manifest"]
