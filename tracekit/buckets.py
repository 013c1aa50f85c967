"""The attribution buckets (DESIGN.md section 4), defined once for analyzers and renderers.

GPU mode: every ns of a phase's GPU window goes to exactly one of BUCKETS (the compute
categories first, then memory, exposed communication, launch overhead, other idle).
Host mode (a run with no GPU events): every ns of a phase's host range goes to one of
HOST_BUCKETS (the same categories for CPU ops, then host overhead between ops).
"""

from __future__ import annotations

from typing import Final

BUCKETS: Final = (
    "attention",
    "moe",
    "gemm",
    "norm",
    "elementwise",
    "sampling",
    "other",
    "memory",
    "allreduce",
    "comm",
    "launch_overhead",
    "idle",
)
COMPUTE_BUCKETS: Final = BUCKETS[:7]
HOST_BUCKETS: Final = (*BUCKETS[:10], "host_overhead")

__all__ = ["BUCKETS", "COMPUTE_BUCKETS", "HOST_BUCKETS"]
