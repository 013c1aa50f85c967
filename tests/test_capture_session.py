"""Profiler window -> event table via kineto_results.events(), on a real CPU profile (torch 2.13 and 2.11 shapes)."""

from __future__ import annotations

import threading
import time
from typing import Any

import polars as pl
import pytest

torch = pytest.importorskip("torch")

from tracekit.collectors.hooks import phase  # noqa: E402
from tracekit.collectors.session import ProfilerSession, _infer_category, kineto_to_frame  # noqa: E402


@pytest.fixture(scope="module")
def window() -> tuple[Any, int, int]:
    x = torch.randn(32, 32)
    s = ProfilerSession(rank=4, cuda=False)
    t0 = time.time_ns()
    s.start()
    with phase("verify", cycle=1, bs=2, tok=8):
        (x @ x).relu().sum()
    s.stop()
    return s, t0, time.time_ns()


def test_events_are_absolute_ns_with_thread_ids(window: tuple[Any, int, int]) -> None:
    s, t0, t1 = window
    df = s.events()
    assert df.height > 3
    assert df["rank"].unique().to_list() == [4]
    assert df["start_ns"].min() >= t0 and (df["start_ns"] + df["dur_ns"]).max() <= t1
    assert set(df["tid"].unique().to_list()) == {threading.get_native_id()}
    assert df["device"].unique().to_list() == [-1]
    kinds = dict(df.group_by("kind").len().iter_rows())
    assert kinds.get("range", 0) >= 1 and kinds.get("op", 0) >= 3
    rng = df.filter(pl.col("kind") == "range")["name"].to_list()
    assert "tracekit:verify|cycle=1|bs=2|tok=8" in rng
    assert s.info["time_base"] == "absolute" and s.info["events"] == df.height


class _Torch211Event:
    """A real event seen through torch 2.11's surface: no activity_type, no external_id."""

    def __init__(self, ev: Any, shift: int = 0) -> None:
        self._ev, self._shift = ev, shift

    def __getattr__(self, name: str) -> Any:
        if name in ("activity_type", "external_id"):
            raise AttributeError(name)
        return getattr(self._ev, name)

    def start_ns(self) -> int:
        return int(self._ev.start_ns()) - self._shift


def test_torch_211_surface_and_relative_times_give_the_same_table(window: tuple[Any, int, int]) -> None:
    s, _, _ = window
    kev = s.prof.profiler.kineto_results.events()
    ref, note = kineto_to_frame(kev, 0)
    base = min(int(e.start_ns()) for e in kev) - 5
    old, note_old = kineto_to_frame([_Torch211Event(e, shift=base) for e in kev], 0, trace_start_ns=base)
    assert note == "absolute" and note_old.startswith("relative")
    assert old.select("kind", "name", "start_ns", "dur_ns", "tid").equals(ref.select("kind", "name", "start_ns", "dur_ns", "tid"))
    assert old["external_id"].null_count() == old.height


def test_gpu_categories_inferred_without_activity_type() -> None:
    ann = {"tracekit:verify|cycle=1"}
    assert _infer_category("tracekit:verify|cycle=1", True, False, ann) == "gpu_user_annotation"
    assert _infer_category("Memcpy DtoH (Device -> Pinned)", True, False, ann) == "gpu_memcpy"
    assert _infer_category("Memset (Device)", True, False, ann) == "gpu_memset"
    assert _infer_category("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", True, False, ann) == "kernel"
    assert _infer_category("Event Sync", True, False, ann) == "cuda_sync"
    assert _infer_category("cudaGraphLaunch", False, False, ann) == "cuda_runtime"
    assert _infer_category("cuLaunchKernelEx", False, False, ann) == "cuda_runtime"
    assert _infer_category("aten::mm", False, False, ann) == "cpu_op"
    assert _infer_category("INVALID", False, False, ann) == "cuda_runtime"  # seen on torch 2.11 (unknown cbid)
    assert _infer_category("tracekit:verify|cycle=1", False, True, ann) == "user_annotation"


def test_graph_flag_links_replayed_kernels_to_their_graph_launch() -> None:
    class Ev:
        def __init__(self, name: str, dev: str, corr: int, start: int) -> None:
            self.n, self.d, self.c, self.s = name, dev, corr, start

        def name(self) -> str:
            return self.n

        def device_type(self) -> str:
            return "DeviceType." + self.d

        def is_user_annotation(self) -> bool:
            return False

        def start_ns(self) -> int:
            return self.s

        def duration_ns(self) -> int:
            return 10

        def device_resource_id(self) -> int:
            return 7 if self.d == "CUDA" else 99

        def device_index(self) -> int:
            return 0 if self.d == "CUDA" else 99

        def correlation_id(self) -> int:
            return self.c

    base = 1_700_000_000_000_000_000
    evs = [Ev("cudaGraphLaunch", "CPU", 43, base), Ev("gemm_a", "CUDA", 43, base + 100),
           Ev("gemm_b", "CUDA", 43, base + 200), Ev("cudaLaunchKernel", "CPU", 44, base + 300),
           Ev("eager_kernel", "CUDA", 44, base + 400)]
    df, _ = kineto_to_frame(evs, 1)
    got = {r["name"]: (r["kind"], r["graph"], r["stream"]) for r in df.iter_rows(named=True)}
    assert got["cudaGraphLaunch"] == ("launch", True, None)
    assert got["gemm_a"] == ("kernel", True, 7) and got["gemm_b"] == ("kernel", True, 7)
    assert got["cudaLaunchKernel"] == ("launch", False, None)
    assert got["eager_kernel"] == ("kernel", False, 7)
