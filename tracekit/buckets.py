"""The bucket vocabulary: one table, from which every bucket and category list is derived.

GPU mode: every ns of a phase's GPU window goes to exactly one of BUCKETS (the compute
categories first, then memory, exposed communication, launch overhead, other idle).
Host mode (a run with no GPU events): every ns of a phase's host range goes to one of
HOST_BUCKETS (the same categories for CPU ops, then host overhead between ops).
Definitions: docs/attribution.md.

``VOCABULARY`` lists each bucket once: its name, its label in GPU-mode text (None: not a GPU
bucket), its label in host-mode text (None: not a host bucket) and its kind. The rows are in
the order tables list kernel categories (``CATEGORIES``); the bucket codes (positions in
``BUCKETS``, what the walk and the compiled walk index by) are the rows ordered by kind:
compute, memory, comm, gap, so that the work buckets (compute + memory) are codes
0..N_WORK-1 and the communication buckets the codes just after them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final


class Kind(Enum):
    """What a bucket's time is: work on the device, a copy, communication, or no work (a gap)."""

    COMPUTE = "compute"
    MEMORY = "memory"
    COMM = "comm"
    GAP = "gap"


_KIND_ORDER: Final = (Kind.COMPUTE, Kind.MEMORY, Kind.COMM, Kind.GAP)


@dataclass(frozen=True)
class Bucket:
    name: str
    label: str | None  # GPU-mode text; None: not a GPU bucket
    host_label: str | None  # host-mode text; None: not a host bucket
    kind: Kind

    @property
    def category(self) -> bool:
        """A kernel category (a value the category rules give): every bucket that is not a gap."""
        return self.kind is not Kind.GAP


VOCABULARY: Final = (
    Bucket("attention", "attention", "attention", Kind.COMPUTE),
    Bucket("moe", "MoE", "MoE", Kind.COMPUTE),
    Bucket("gemm", "dense GEMM", "dense GEMM / MLP", Kind.COMPUTE),
    Bucket("allreduce", "allreduce (exposed)", "allreduce (call + wait)", Kind.COMM),
    Bucket("comm", "other comm (exposed)", "other collectives (call + wait)", Kind.COMM),
    Bucket("norm", "norm / rotary", "norm", Kind.COMPUTE),
    Bucket("elementwise", "elementwise", "elementwise / other aten", Kind.COMPUTE),
    Bucket("sampling", "sampling / spec bookkeeping", "sampling", Kind.COMPUTE),
    Bucket("memory", "memcpy / memset", "host <-> device copies", Kind.MEMORY),
    Bucket("other", "other kernels", "other (embedding, misc)", Kind.COMPUTE),
    Bucket("launch_overhead", "launch overhead", None, Kind.GAP),
    Bucket("idle", "GPU idle (dependency / sync)", None, Kind.GAP),
    Bucket("host_overhead", None, "host overhead (Python between ops)", Kind.GAP),
)

_BY_CODE: Final = tuple(sorted(VOCABULARY, key=lambda b: _KIND_ORDER.index(b.kind)))  # stable: table order in a kind

BUCKETS: Final = tuple(b.name for b in _BY_CODE if b.label is not None)
HOST_BUCKETS: Final = tuple(b.name for b in _BY_CODE if b.host_label is not None)
CATEGORIES: Final = tuple(b.name for b in VOCABULARY if b.category)
COMPUTE_BUCKETS: Final = tuple(b.name for b in _BY_CODE if b.kind is Kind.COMPUTE)
COMM_CATEGORIES: Final = tuple(b.name for b in VOCABULARY if b.kind is Kind.COMM)
GAP_BUCKETS: Final = tuple(b for b in BUCKETS if b not in CATEGORIES)  # GPU time with no work: launch overhead, idle
LABELS: Final[dict[str, str]] = {b.name: b.label for b in _BY_CODE if b.label is not None}
HOST_LABELS: Final[dict[str, str]] = {b.name: b.host_label for b in _BY_CODE if b.host_label is not None}


@dataclass(frozen=True)
class WalkCodes:
    """The bucket codes the exclusive walk indexes by (positions in BUCKETS): work buckets
    0..n_work-1 (memory among them), communication n_work..n_event_codes-1, then the gaps."""

    nb: int
    n_work: int
    memory: int
    n_event_codes: int
    launch: int
    idle: int


def _walk_codes() -> WalkCodes:
    kinds = [next(b.kind for b in VOCABULARY if b.name == n) for n in BUCKETS]
    n_work = sum(k in (Kind.COMPUTE, Kind.MEMORY) for k in kinds)
    return WalkCodes(
        nb=len(BUCKETS),
        n_work=n_work,
        memory=BUCKETS.index("memory"),
        n_event_codes=n_work + kinds.count(Kind.COMM),
        launch=BUCKETS.index("launch_overhead"),
        idle=BUCKETS.index("idle"),
    )


WALK_CODES: Final = _walk_codes()

__all__ = [
    "BUCKETS",
    "CATEGORIES",
    "COMM_CATEGORIES",
    "COMPUTE_BUCKETS",
    "GAP_BUCKETS",
    "HOST_BUCKETS",
    "HOST_LABELS",
    "LABELS",
    "VOCABULARY",
    "WALK_CODES",
    "Bucket",
    "Kind",
    "WalkCodes",
]
