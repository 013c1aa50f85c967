"""Environment manifest: variables as the process saw them, NVML facts or an explicit 'unavailable'."""

from __future__ import annotations

import os

import pytest

from tracekit.collectors import manifest as mf
from tracekit.schema import COLUMNS


def test_env_vars_keeps_the_prefixes_that_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_P2P_LEVEL", "NVL")
    monkeypatch.setenv("SGLANG_ENABLE_SPEC_V2", "1")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("TORCH_NCCL_BLOCKING_WAIT", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("HOME_NOT_WANTED", "x")
    env = mf.env_vars()
    for k in ("NCCL_P2P_LEVEL", "SGLANG_ENABLE_SPEC_V2", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_NCCL_BLOCKING_WAIT",
              "CUDA_VISIBLE_DEVICES"):
        assert env[k] == os.environ[k]
    assert "HOME_NOT_WANTED" not in env and "PATH" not in env
    assert list(env) == sorted(env)


def test_rank_and_launcher_sections() -> None:
    sec = mf.rank_section(3, 8, None, "start")
    assert (sec["rank"], sec["world_size"], sec["when"]) == (3, 8, "start")
    assert sec["pid"] == os.getpid() and sec["host"]
    assert sec["gpu"] is None and isinstance(sec["env"], dict)
    la = mf.launcher_section(["tracekit", "capture"])
    assert la["argv"] == ["tracekit", "capture"] and "env" in la
    assert la["versions"]["tracekit"] and la["versions"]["python"]


def test_without_nvml_the_manifest_says_so() -> None:
    if mf._Nvml.get() is not None:
        pytest.skip("NVML is present on this machine")
    snap = mf.gpu_snapshot(0)
    assert snap["nvml"].startswith("unavailable:")
    sampler = mf.NvmlSampler(0, rank=2)
    assert sampler.start() is False and sampler.error and "NVML unavailable" in sampler.error
    rows = sampler.stop()
    assert rows.height == 0 and list(rows.columns)[: len(COLUMNS)] == list(COLUMNS)


def test_sampler_rows_are_counter_events() -> None:
    s = mf.NvmlSampler(1, rank=5)
    s.rows = [("gpu.sm_clock_mhz", 1_000, 1980.0), ("gpu.power_w", 2_000, 301.5)]
    df = s.stop()
    assert df["kind"].to_list() == ["counter", "counter"]
    assert df["rank"].to_list() == [5, 5] and df["device"].to_list() == [1, 1]
    assert df["value"].to_list() == [1980.0, 301.5] and df["start_ns"].to_list() == [1_000, 2_000]
