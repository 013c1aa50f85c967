"""The floor (speed of light) of one forward on one GPU, per phase and per bucket.

floor = max(bytes / (HBM bandwidth x achievable), sum over precisions of FLOPs / (rate x achievable))
        + allreduces x t_allreduce(M) + the logits all-gather,
with M = tokens x hidden x activation bytes, ``ModelShape.allreduces`` allreduces on the critical
path (after attention and after the MLP/MoE of every layer, plus the vocab-parallel embedding) and
t from ``analyzers/sol/allreduce.py``. Per bucket, by the kernels that do the reads (config.READ_BUCKET, as
tracekit's category rules sort kernels): attention (the attention kernels: KV cache), moe (the
routed experts), gemm (every dense GEMM: attention projections, router, shared experts, dense
MLP, lm_head): max(bytes / BW, FLOPs / rate) of that bucket's reads; allreduce: the chain; comm: the logits all-gather; every other bucket
(launch overhead, idle, norms, elementwise, sampling, memory) has floor 0: not modelled, so its
whole measured time is excess. An estimate: the method is docs/sol.md's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from tracekit.analyzers.sol.allreduce import RingModel
from tracekit.analyzers.sol.config import READS, ModelShape
from tracekit.analyzers.sol.gpus import GpuSpec
from tracekit.analyzers.sol.model import Layout, Step, Work, work

FLOOR_BUCKETS: Final = ("attention", "moe", "gemm", "allreduce", "comm")


@dataclass(frozen=True)
class BucketFloor:
    bucket: str
    floor_ns: int
    bytes: int
    flops: int
    bound: str  # HBM bytes | FLOPs | link latency | link bandwidth | none


@dataclass(frozen=True)
class PhaseFloor:
    step: Step
    floor_ns: int
    bound: str  # what bounds the compute part: HBM bytes | FLOPs
    memory_ns: int  # bytes / achievable bandwidth
    compute_ns: int  # FLOPs / achievable rate
    allreduce_ns: int  # the chain
    allreduce_count: int
    allreduce_bytes: int  # message size of each
    allreduce_bound: str
    gather_ns: int
    bytes_by_read: dict[str, int]
    flops: int
    buckets: tuple[BucketFloor, ...]
    distinct_experts: float
    distinct_source: str

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_read.values())

    def bucket(self, name: str) -> BucketFloor | None:
        return next((b for b in self.buckets if b.bucket == name), None)


def _time(nbytes: float, flops: dict[str, float], gpu: GpuSpec) -> tuple[float, float]:
    mem = nbytes / (gpu.hbm_Bps * gpu.achievable) * 1e9
    comp = sum(v / (gpu.rate(p) * gpu.achievable) for p, v in flops.items()) * 1e9
    return mem, comp


def phase_floor(shape: ModelShape, layout: Layout, step: Step, gpu: GpuSpec, ring: RingModel) -> PhaseFloor:
    """The floor of ``step`` on one GPU of ``layout`` (see module doc)."""
    w: Work = work(shape, layout, step)
    total_flops: dict[str, float] = {}
    for (_, p), v in w.flops.items():
        total_flops[p] = total_flops.get(p, 0.0) + v
    mem, comp = _time(sum(w.bytes.values()), total_flops, gpu)
    msg = step.total_tokens * shape.hidden * shape.act_bytes
    n_ar = shape.allreduces if layout.tp > 1 else 0
    ar = n_ar * ring.allreduce_ns(msg)
    gather = ring.allgather_ns(step.total_tokens * shape.vocab * shape.act_bytes) if layout.tp > 1 else 0.0
    buckets = []
    for b in ("attention", "moe", "gemm"):
        bm, bc = _time(w.bucket_bytes(b), w.bucket_flops(b), gpu)
        buckets.append(BucketFloor(b, round(max(bm, bc)), round(w.bucket_bytes(b)),
                                   round(sum(w.bucket_flops(b).values())), "HBM bytes" if bm >= bc else "FLOPs"))
    buckets.append(BucketFloor("allreduce", round(ar), n_ar * msg, 0, ring.bound(msg) if n_ar else "none"))
    buckets.append(BucketFloor("comm", round(gather), step.total_tokens * shape.vocab * shape.act_bytes
                               if layout.tp > 1 else 0, 0, "link" if gather else "none"))
    return PhaseFloor(
        step=step, floor_ns=round(max(mem, comp) + ar + gather), bound="HBM bytes" if mem >= comp else "FLOPs",
        memory_ns=round(mem), compute_ns=round(comp), allreduce_ns=round(ar), allreduce_count=n_ar,
        allreduce_bytes=msg, allreduce_bound=ring.bound(msg) if n_ar else "none", gather_ns=round(gather),
        bytes_by_read={k: round(w.bytes[k]) for k in READS}, flops=round(sum(total_flops.values())),
        buckets=tuple(buckets), distinct_experts=w.distinct_experts, distinct_source=w.distinct_source)


def repeated(f: PhaseFloor, n: int) -> PhaseFloor:
    """The floor of ``n`` identical forwards in a row (a draft phase of n draft steps)."""
    return replace(
        f, floor_ns=f.floor_ns * n, memory_ns=f.memory_ns * n, compute_ns=f.compute_ns * n,
        allreduce_ns=f.allreduce_ns * n, allreduce_count=f.allreduce_count * n, gather_ns=f.gather_ns * n,
        bytes_by_read={k: v * n for k, v in f.bytes_by_read.items()}, flops=f.flops * n,
        buckets=tuple(BucketFloor(b.bucket, b.floor_ns * n, b.bytes * n, b.flops * n, b.bound) for b in f.buckets))
