"""Hand-built Kineto JSON for tests: every time is chosen in integer ns and printed
exactly the way Kineto prints it (microseconds with three decimals, or integer
microseconds for old traces), so tests can compare against known ns values.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_NS = 1_790_857_026_000_000_000  # a real baseTimeNanoseconds (3-month boundary)
_NUM = re.compile(r'"__num__([-0-9.e+]+)"')


def us(ns: int, integer: bool = False) -> str:
    """The literal Kineto writes for a time of ``ns`` nanoseconds."""
    if integer:
        assert ns % 1000 == 0
        return f"__num__{ns // 1000}"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"__num__{sign}{ns // 1000}.{ns % 1000:03d}"


def dumps(doc: dict[str, Any] | list[Any], indent: int | None = None) -> str:
    return _NUM.sub(r"\1", json.dumps(doc, indent=indent))


@dataclass
class TraceBuilder:
    """Builds one rank's Kineto document. Times passed in are ns relative to BASE_NS
    (``base=False``: absolute ns and no baseTimeNanoseconds in the document, like old traces)."""

    rank: int | None = 0
    world_size: int = 2
    pid: int = 4242
    tid: int = 4242
    device: int = 0
    integer_us: bool = False
    base: bool = True
    events: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 100
    _ext: int = 1

    def _x(self, cat: str, name: str, pid: Any, tid: Any, start: int, dur: int, args: dict[str, Any]) -> dict[str, Any]:
        t0 = start
        ev = {
            "ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
            "ts": us(t0, self.integer_us), "dur": us(dur, self.integer_us), "args": args,
        }
        self.events.append(ev)
        return ev

    def range(self, name: str, start: int, dur: int) -> None:
        self._x("user_annotation", name, self.pid, self.tid, start, dur, {"External id": self._ext})
        self._ext += 1

    def op(self, name: str, start: int, dur: int) -> None:
        self._x("cpu_op", name, self.pid, self.tid, start, dur, {"External id": self._ext})
        self._ext += 1

    def kernel(
        self,
        name: str,
        launch_start: int,
        start: int,
        dur: int,
        *,
        stream: int = 7,
        api: str = "cudaLaunchKernel",
        cat: str = "cuda_runtime",
        coll: dict[str, Any] | None = None,
        kcat: str = "kernel",
    ) -> int:
        corr = self._corr
        self._corr += 1
        self._x(cat, api, self.pid, self.tid, launch_start, 3000, {"External id": self._ext, "cbid": 211, "correlation": corr})
        args: dict[str, Any] = {
            "External id": self._ext, "queued": 0, "device": self.device, "context": 1, "stream": stream,
            "correlation": corr, "registers per thread": 32, "shared memory": 0,
            "blocks per SM": 0.25, "warps per SM": 1.0, "grid": [33, 1, 1], "block": [128, 1, 1],
            "est. achieved occupancy %": 2,
        }
        if kcat == "gpu_memcpy":
            args = {"device": self.device, "context": 1, "stream": stream, "correlation": corr, "bytes": 4096, "memory bandwidth (GB/s)": 1.5}
        if coll:
            args.update(coll)
        self._x(kcat, name, self.device, stream, start, dur, args)
        self.events.append({"ph": "s", "id": corr, "pid": self.pid, "tid": self.tid, "ts": us(launch_start, self.integer_us), "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "f", "id": corr, "pid": self.device, "tid": stream, "ts": us(start, self.integer_us), "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self._ext += 1
        return corr

    def graph(self, launch_start: int, kernels: list[tuple[str, int, int]], stream: int = 7) -> int:
        """A cudaGraphLaunch and the kernels it replays (same correlation, no External id)."""
        corr = self._corr
        self._corr += 1
        self._x("cuda_runtime", "cudaGraphLaunch", self.pid, self.tid, launch_start, 8000, {"External id": self._ext, "cbid": 311, "correlation": corr})
        for name, start, dur in kernels:
            self._x("kernel", name, self.device, stream, start, dur, {"queued": 0, "device": self.device, "context": 1, "stream": stream, "correlation": corr})
        self._ext += 1
        return corr

    def doc(self) -> dict[str, Any]:
        meta: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "ts": us(0), "pid": self.pid, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "ts": us(0), "pid": self.device, "tid": 0, "args": {"name": f"GPU {self.device}"}},
        ]
        d: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": self.device, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000, "computeMajor": 9, "computeMinor": 0}],
        }
        if self.rank is not None:
            d["distributedInfo"] = {"backend": "nccl", "rank": self.rank, "world_size": self.world_size, "pg_count": 1, "nccl_version": "2.28.9"}
        d.update({"cuda_driver_version": 13000, "cuda_runtime_version": 13000, "cupti_version": 26, "trace_id": "X"})
        if self.base:
            d["baseTimeNanoseconds"] = BASE_NS
        d["traceEvents"] = meta + self.events
        d["traceName"] = "t.json"
        return d

    def write(self, path: Path, indent: int | None = 1) -> Path:
        text = dumps(self.doc(), indent=indent)
        if path.name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        return path


def gpu_rank(rank: int, world: int = 2, *, skew: int = 0, integer_us: bool = False) -> TraceBuilder:
    """A small but complete rank: an eager verify (runtime + driver launches, c10d allreduce),
    a graphed decode (cudaGraphLaunch replaying kernels incl. pynccl allreduce), a memcpy, and
    two kernels overlapping on one stream."""
    b = TraceBuilder(rank=rank, world_size=world, device=rank, pid=1000 + rank, tid=1000 + rank, integer_us=integer_us)
    t = 5_150_227_743_625_066 + skew
    if integer_us:
        t -= t % 1000
    b.range("tracekit:verify|cycle=0|bs=2", t, 400_000)
    b.op("aten::mm", t + 1000, 20_000)
    b.kernel("nvjet_tst_128x64_64x8_1x1_v_bz_TNT", t + 2000, t + 10_000, 15_000)
    b.kernel("void flash::FlashAttnFwdSm90<cutlass::Shape<128, 64>>(Params)", t + 30_000, t + 40_000, 21_000, api="cuLaunchKernelEx", cat="cuda_driver")
    b.kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", t + 70_000, t + 80_000, 33_000,
        coll={"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": world,
              "dtype": "BFloat16", "Process Group Name": "0", "Process Group Ranks": list(range(world))},
    )
    # two kernels overlapping on one stream (programmatic dependent launch)
    b.kernel("fused_moe_kernel", t + 120_000, t + 130_000, 50_000)
    b.kernel("act_and_mul_kernel", t + 125_000, t + 170_000, 20_000)
    b.kernel("Memcpy DtoH (Device -> Pinned)", t + 200_000, t + 210_000, 4_000, api="cudaMemcpyAsync", kcat="gpu_memcpy")
    b._x("cuda_runtime", "cudaStreamSynchronize", b.pid, b.tid, t + 205_000, 20_000, {"cbid": 131, "correlation": 999})
    g = t + 500_000
    b.range("tracekit:decode|cycle=1|bs=2|graphed=1", g, 200_000)
    b.graph(g + 1000, [
        ("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", g + 20_000, 9_000),
        ("cross_device_reduce_1stage<__nv_bfloat16, 2>", g + 30_000, 7_000),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", g + 40_000, 11_000),
        ("RMSNormKernel", g + 52_000, 3_000),
    ])
    return b
