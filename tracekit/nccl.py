"""NCCL's settings read from its kernel names: collective, reduction, dtype, algorithm, protocol.

    k = parse_nccl_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    k.collective, k.reduction, k.dtype, k.algorithm, k.protocol   # AllReduce Sum bf16 RING LL

Name templates, read in NCCL's (and RCCL's) sources:

- NCCL 2.19 - 2.28, ``src/device/generate.py``: ``ncclDevKernel_{coll}_{redop}_{ty}_{algo}_{proto}``
  for AllReduce / Reduce / ReduceScatter, ``ncclDevKernel_{coll}_{algo}_{proto}`` for AllGather /
  Broadcast, ``ncclDevKernel_SendRecv``, ``ncclDevKernel_Generic`` (RCCL numbers it:
  ``ncclDevKernel_Generic_4``). The name is the KERNEL NCCL launched, not the work it ran:
  ``best_kernel`` specialises one kernel per collective and dtype, ``TREE`` for the tree algorithm
  and ``RING`` for every other (NVLS, NVLS_TREE, CollNet and PAT run inside the RING kernel), always
  protocol ``LL`` (LL128 and SIMPLE run inside the LL kernel), AllGather / Broadcast always
  ``RING_LL``. So a 2.19+ name tells tree vs not-tree and nothing about the protocol.
- NCCL 2.8 - 2.18, ``src/collectives/device/common.h`` (``NCCL_KERN_NAME``):
  ``ncclKernel_{coll}_{algo}_{proto}_{redop}_{type}``, e.g. ``ncclKernel_AllReduce_RING_LL_Sum_float``;
  one kernel per algorithm, protocol always ``LL`` (``IMPL_COLL_KERN(.., LL, ..)``), SendRecv
  ``RING_SIMPLE``; other protocols run inside it.
- NCCL 2.27 - 2.28 symmetric-memory kernels, ``src/device/symmetric/generate.py``:
  ``ncclSymkDevKernel_{coll}_{algo}[_{red}_{ty}]`` (``_profile`` when NCCL's profiler is on):
  the algorithm IS what ran (``AGxLL_R``, ``RSxLD_AGxST``, ``RSxLDMC_AGxSTMC``, ``LL``, ...): ``exact``.

``exact`` says whether ``algorithm`` / ``protocol`` are what ran (symmetric kernels) or the launched
kernel's specialisation (every other family).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_ALGOS: Final = r"TREE|RING|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT"
_PROTOS: Final = r"LL128|LL|SIMPLE"
_END: Final = r"(?=\(|$)"
_DEV_REDUCE = re.compile(
    rf"^ncclDevKernel_(?P<coll>AllReduce|ReduceScatter|Reduce)_(?P<op>Sum|Prod|MinMax|PreMulSum|SumPostDiv|Min|Max)"
    rf"_(?P<ty>[A-Za-z0-9]+)_(?P<algo>{_ALGOS})_(?P<proto>{_PROTOS}){_END}")
_DEV_COPY = re.compile(rf"^ncclDevKernel_(?P<coll>AllGatherV|AllGather|Broadcast)_(?P<algo>{_ALGOS})_(?P<proto>{_PROTOS}){_END}")
_DEV_OTHER = re.compile(rf"^ncclDevKernel_(?P<coll>SendRecv|Generic)(?:_\d+)?{_END}")
_LEGACY = re.compile(
    rf"^ncclKernel_(?P<coll>[A-Za-z]+)_(?P<algo>{_ALGOS})_(?P<proto>{_PROTOS})"
    rf"(?:_(?P<op>Sum|Prod|Min|Max|MinMax|PreMulSum|SumPostDiv)_(?P<ty>[A-Za-z0-9_]+?))?{_END}")
_SYMK = re.compile(rf"^ncclSymk?DevKernel_(?P<coll>AllReduce|AllGather|ReduceScatter)_(?P<rest>[A-Za-z0-9_]+?){_END}")
_SYMK_RED = re.compile(r"^(?P<algo>.+?)_(?P<op>sum|avg)_(?P<ty>f32|f16|bf16|f8e4m3|f8e5m2)$")

FAMILY_DEV: Final = "ncclDevKernel (NCCL 2.19+ / RCCL)"
FAMILY_LEGACY: Final = "ncclKernel (NCCL <= 2.18)"
FAMILY_SYMMETRIC: Final = "ncclSymkDevKernel (NCCL 2.27+ symmetric memory)"


@dataclass(frozen=True)
class NcclKernel:
    """What one NCCL kernel name says."""

    collective: str  # AllReduce, AllGather, ReduceScatter, Reduce, Broadcast, AllGatherV, SendRecv, Generic
    reduction: str | None
    dtype: str | None
    algorithm: str | None
    protocol: str | None
    family: str
    exact: bool  # algorithm / protocol are what ran (symmetric kernels), not the kernel's specialisation

    @property
    def setting(self) -> str:
        """``RING/LL`` (kernel specialisation), ``AGxLL_R`` (symmetric algorithm) or ``-``."""
        if self.algorithm is None:
            return "-"
        return self.algorithm if self.protocol is None else f"{self.algorithm}/{self.protocol}"


def parse_nccl_kernel(name: str) -> NcclKernel | None:
    """The NCCL kernel ``name`` parsed (any of the formats above), or None when it is not one."""
    if not name.startswith("nccl"):
        return None
    m = _DEV_REDUCE.match(name)
    if m:
        return NcclKernel(m["coll"], m["op"], m["ty"], m["algo"], m["proto"], FAMILY_DEV, False)
    m = _DEV_COPY.match(name)
    if m:
        return NcclKernel(m["coll"], None, None, m["algo"], m["proto"], FAMILY_DEV, False)
    m = _DEV_OTHER.match(name)
    if m:
        return NcclKernel(m["coll"], None, None, None, None, FAMILY_DEV, False)
    m = _LEGACY.match(name)
    if m:
        return NcclKernel(m["coll"], m["op"], m["ty"], m["algo"], m["proto"], FAMILY_LEGACY, False)
    m = _SYMK.match(name)
    if m:
        rest = m["rest"].removesuffix("_profile")
        r = _SYMK_RED.match(rest)
        if r:
            return NcclKernel(m["coll"], r["op"], r["ty"], r["algo"], None, FAMILY_SYMMETRIC, True)
        return NcclKernel(m["coll"], None, None, rest, None, FAMILY_SYMMETRIC, True)
    return None


__all__ = ["FAMILY_DEV", "FAMILY_LEGACY", "FAMILY_SYMMETRIC", "NcclKernel", "parse_nccl_kernel"]
