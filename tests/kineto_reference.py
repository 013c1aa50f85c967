"""An independent, deliberately simple reading of Kineto JSON for cross-checking ingest:
stdlib json with Decimal floats, exact arithmetic, plain-Python interval union."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
COMM_HINTS = ("nccl", "cross_device_reduce", "allreduce", "all_reduce", "AllReduce", "multimem", "deep_ep")


def load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc: dict[str, Any] = json.loads(raw, parse_float=Decimal)
    return doc


def ns(doc: dict[str, Any], value: Any) -> int:
    base = int(doc.get("baseTimeNanoseconds", 0))
    return base + int(Decimal(value) * 1000)


def union(intervals: list[tuple[int, int]]) -> int:
    total = 0
    cur_s: int | None = None
    cur_e = 0
    for s, e in sorted(intervals):
        if cur_s is None or s > cur_e:
            if cur_s is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_s is not None:
        total += cur_e - cur_s
    return total


def rank_stats(doc: dict[str, Any]) -> dict[str, int]:
    """kernels, kernel_ns, busy_ns, span_ns, comm_ns of one rank's trace, computed from scratch."""
    gpu = [e for e in doc["traceEvents"] if e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS]
    ivs = [(ns(doc, e["ts"]), ns(doc, e["ts"]) + int(Decimal(e["dur"]) * 1000)) for e in gpu]
    kernels = [e for e in gpu if str(e["cat"]).lower() == "kernel"]
    comm = [e for e in kernels if any(h in e["name"] for h in COMM_HINTS)]
    kiv = [(ns(doc, e["ts"]), ns(doc, e["ts"]) + int(Decimal(e["dur"]) * 1000)) for e in comm]
    return {
        "kernels": len(kernels),
        "kernel_ns": sum(int(Decimal(e["dur"]) * 1000) for e in kernels),
        "busy_ns": union(ivs),
        "span_ns": (max(e for _, e in ivs) - min(s for s, _ in ivs)) if ivs else 0,
        "comm_ns": union(kiv),
    }
