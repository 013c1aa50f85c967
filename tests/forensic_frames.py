"""Hand-built multi-rank event tables for the forensic tests (diff, spec, align, ranks).

A speculative run, finalized as a writer stores it (``build``): per rank and cycle a ``draft`` range, a ``verify`` range and a
``draft_extend`` range on the host, each with its launches and kernels (phase
and phase_id set as membership would), and allreduce kernels with
group/coll_seq. Times are int64 ns with per-kernel jitter drawn from a seeded
generator; one rank can be made a straggler and each rank's clock can be offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from tracekit.finalize import FINALIZE_VERSION, finalize_events
from tracekit.finalize.phases import format_label
from tracekit.schema import conform

BASE = 1_764_000_000_000_000_000  # an absolute epoch in ns, as Kineto gives


@dataclass
class Spec:
    ranks: int = 2
    cycles: int = 12
    batch_size: int = 1
    seq0: int = 200  # sequence length at the first cycle
    seq_step: int = 3  # tokens added per cycle
    draft_tokens: int = 3  # k; verify processes k+1 tokens per request
    accept_len: float = 1.5  # accepted draft tokens (bonus excluded)
    attn_ns: int = 20_000  # attention kernel at seq 0
    attn_ns_per_tok: int = 100  # attention grows with seq len (absolute)
    moe_ns: int = 120_000
    gemm_ns: int = 30_000
    allreduce_ns: int = 20_000
    layers: int = 4
    launch_gap_ns: int = 5_000  # host launch gap between kernels
    draft_ns: int = 300_000
    draft_extend_ns: int = 200_000
    host_between_ns: int = 50_000
    graphed: bool = False
    extra_kernel: str | None = None  # a kernel only this run has (per layer)
    straggler: int | None = None  # this rank arrives late at every allreduce
    straggle_ns: int = 15_000
    late_launch_rank: int | None = None  # this rank's host issues every MoE launch late
    late_launch_ns: int = 0
    clock_offset_ns: dict[int, int] = field(default_factory=dict)
    jitter_ns: int = 500
    decode_steps: int = 0  # plain decode steps appended after the cycles
    decode_ns: int = 400_000
    decode_each_cycle: bool = False  # a reference decode step after every cycle (built-in workload)
    draft_ranges: int = 1  # the draft as this many back-to-back ranges (SGLang 0.5.12: one step[DECODE] per step)
    draft_gap_ns: int = 2_000  # host time between two of those draft ranges
    seed: int = 0


def build(spec: Spec) -> pl.DataFrame:
    """The event table of a synthetic run (conformed to the schema)."""
    rng = np.random.default_rng(spec.seed)
    rows: list[dict[str, object]] = []
    pid_id = 0
    coll_seq = 0
    # one shared timeline; every rank follows the same schedule, the straggler's
    # pre-allreduce kernels run longer, and everyone waits for it at the allreduce.
    t = BASE
    corr = 1

    def add(rank: int, **kw: object) -> None:
        kw.setdefault("device", rank if kw.get("kind") in ("kernel", "memcpy") else -1)
        kw["rank"] = rank
        if kw.get("kind") in ("range", "launch", "sync"):  # host rows: the rank's main thread
            kw.setdefault("pid", 1000 + rank)
            kw.setdefault("tid", 1)
        kw["start_ns"] = int(kw["start_ns"]) + spec.clock_offset_ns.get(rank, 0)  # type: ignore[call-overload]
        rows.append(kw)

    for c in range(spec.cycles):
        seq = spec.seq0 + c * spec.seq_step
        tok = spec.batch_size * (spec.draft_tokens + 1)
        for phase, length in (("draft", spec.draft_ns), ("verify", 0), ("draft_extend", spec.draft_extend_ns)):
            pid_id += 1
            start = t
            if phase != "verify":
                n = spec.draft_ranges if phase == "draft" else 1
                step = (length - (n - 1) * spec.draft_gap_ns) // n if n > 1 else length
                for i in range(n):
                    if i:
                        pid_id += 1
                    for r in range(spec.ranks):
                        add(r, kind="range", name=format_label(phase, cycle=c, bs=spec.batch_size),
                            start_ns=start + i * (step + spec.draft_gap_ns), dur_ns=step, phase=phase,
                            phase_id=pid_id * 100 + r, cycle=c, batch_size=spec.batch_size, graphed=True)
                t += length + spec.host_between_ns
                continue
            # verify: per layer attention, moe, gemm, allreduce
            cur = {r: start for r in range(spec.ranks)}
            for _layer in range(spec.layers):
                kernels = [
                    ("flash::FlashAttnFwdSm90<128>", "attention", spec.attn_ns + spec.attn_ns_per_tok * seq),
                    ("fused_moe_kernel", "moe", spec.moe_ns),
                    ("nvjet_tst_128x64", "gemm", spec.gemm_ns),
                ]
                if spec.extra_kernel:
                    kernels.append((spec.extra_kernel, "elementwise", 7_000))
                for name, cat, dur in kernels:
                    for r in range(spec.ranks):
                        d = dur + int(rng.integers(0, spec.jitter_ns + 1))
                        if r == spec.straggler and cat == "moe":
                            d += spec.straggle_ns
                        ls = cur[r]
                        if r == spec.late_launch_rank and cat == "moe":
                            ls += spec.late_launch_ns
                        add(r, kind="launch", name="cudaLaunchKernel", start_ns=ls, dur_ns=3_000,
                            correlation=corr, phase="verify", phase_id=pid_id * 100 + r, tid=1, pid=1000 + r)
                        ks = ls + spec.launch_gap_ns
                        add(r, kind="kernel", name=name, category=cat, start_ns=ks, dur_ns=d,
                            correlation=corr, phase="verify", phase_id=pid_id * 100 + r, stream=7,
                            graph=spec.graphed)
                        corr += 1
                        cur[r] = ks + d
                # allreduce: everyone ends together after the last arrival
                last = max(cur.values())
                end = last + spec.allreduce_ns
                coll_seq += 1
                for r in range(spec.ranks):
                    add(r, kind="launch", name="cudaLaunchKernel", start_ns=cur[r], dur_ns=3_000,
                        correlation=corr, phase="verify", phase_id=pid_id * 100 + r, tid=1, pid=1000 + r)
                    arrive = cur[r] + spec.launch_gap_ns
                    e = end + spec.launch_gap_ns + int(rng.integers(0, spec.jitter_ns + 1))
                    add(r, kind="kernel", name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", category="allreduce",
                        start_ns=arrive, dur_ns=e - arrive, correlation=corr, phase="verify",
                        phase_id=pid_id * 100 + r, stream=9, coll_op="allreduce", coll_seq=coll_seq,
                        group="tp", coll_bytes=14_336, graph=spec.graphed)
                    corr += 1
                    cur[r] = e
            vend = max(cur.values()) + 10_000
            for r in range(spec.ranks):
                add(r, kind="range", name=format_label("verify", cycle=c, bs=spec.batch_size, tok=tok, seq=seq,
                                                       graphed=spec.graphed, accept=spec.accept_len),
                    start_ns=start, dur_ns=vend - start, phase="verify", phase_id=pid_id * 100 + r, cycle=c,
                    batch_size=spec.batch_size, num_tokens=tok, seq_len=seq, graphed=spec.graphed,
                    accept_len=spec.accept_len)
            t = vend + spec.host_between_ns
        if spec.decode_each_cycle:
            pid_id += 1
            for r in range(spec.ranks):
                add(r, kind="range", name=format_label("decode", cycle=c, bs=spec.batch_size), start_ns=t,
                    dur_ns=spec.decode_ns, phase="decode", phase_id=pid_id * 100 + r, cycle=c,
                    batch_size=spec.batch_size, graphed=True)
            t += spec.decode_ns + spec.host_between_ns
    for _ in range(spec.decode_steps):
        pid_id += 1
        for r in range(spec.ranks):
            add(r, kind="range", name=format_label("decode", bs=spec.batch_size), start_ns=t, dur_ns=spec.decode_ns,
                phase="decode", phase_id=pid_id * 100 + r, batch_size=spec.batch_size, graphed=True)
        t += spec.decode_ns + spec.host_between_ns
    # what a writer stores: the finalized table (tracekit.finalize)
    return finalize_events(conform(pl.DataFrame(rows, infer_schema_length=None)))


def manifest(ranks: int, **rank_overrides: dict[str, object]) -> dict[str, object]:
    """A manifest shaped like the collectors' (env, versions, gpu) for ``ranks`` ranks."""
    out: dict[str, object] = {
        "schema_version": 1,
        "finalize_version": FINALIZE_VERSION,
        "world_size": ranks,
        "capture": {"cycles": 12, "workload": "builtin"},
        "launcher": {"env": {"NCCL_PROTO": "LL"}},
        "ranks": {},
    }
    for r in range(ranks):
        meta: dict[str, object] = {
            "host": "node0",
            "pid": 1000 + r,
            "env": {"NCCL_PROTO": "LL", "CUDA_VISIBLE_DEVICES": "0,1"},
            "versions": {"torch": "2.11.0", "nccl": "2.28.9", "cuda": "13.0", "driver": "590.48.01"},
            "gpu": {"name": "NVIDIA H200", "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980,
                    "throttle_reasons": [], "pcie_gen": 5, "pcie_width": 16},
        }
        meta.update(rank_overrides.get(str(r), {}))
        out["ranks"][str(r)] = meta  # type: ignore[index]
    return out
