"""The sglang section of the CLI: one-line errors, exit codes, what each command writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import sglang_wheels
from click.testing import CliRunner

from tracekit.cli import cli


def run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def test_check_lists_targets_and_verifies_a_wheel() -> None:
    code, out = run("sglang-check", "--version", "0.5.2")
    assert code == 0
    assert "verify        sglang.srt.speculative.eagle_worker.EAGLEWorker.verify" in out
    assert "EAGLEWorker.forward_batch_speculative_generation" in out and "EAGLEWorkerV2" not in out
    src = sglang_wheels.source("0.5.23")
    code, out = run("sglang-check", "--version", "0.5.23", "--source", str(src))
    assert code == 0 and "all targets and fields found" in out


def test_check_reports_a_mismatch_in_one_line(tmp_path: Path) -> None:
    # 0.5.2's tree checked as if it were 0.5.23: the v2 worker does not exist there
    src = sglang_wheels.source("0.5.2")
    code, out = run("sglang-check", "--version", "0.5.23", "--source", str(src))
    assert code == 1
    assert "MISSING sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2.verify" in out
    assert out.strip().splitlines()[-1].startswith("tracekit: error: ") and "Traceback" not in out
    code, out = run("sglang-check", "--version", "banana")
    assert code == 2


def test_capture_unreachable_is_one_line() -> None:
    code, out = run("sglang-capture", "http://127.0.0.1:9", "--timeout", "5")
    assert code == 1
    assert out.strip().splitlines() == ["tracekit: error: http://127.0.0.1:9: SGLang server unreachable ([Errno 111] Connection refused)"]
    code, _ = run("sglang-capture", "http://127.0.0.1:9", "--cycles", "0")
    assert code == 2


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed here")
def test_launch_without_sglang() -> None:
    code, out = run("sglang-launch", "--", "--model-path", "x", "--tp", "8")
    assert code == 1 and "sglang is not installed" in out


def test_bootstrap_writes_files(tmp_path: Path) -> None:
    code, out = run("sglang-bootstrap", str(tmp_path / "boot"))
    assert code == 0 and (tmp_path / "boot" / "sitecustomize.py").is_file()
    assert "TRACEKIT_SGLANG=1 PYTHONPATH=" in out
    code, out = run("sglang-bootstrap", "--pth", str(tmp_path / "site"))
    assert code == 0 and (tmp_path / "site" / "tracekit-sglang.pth").is_file()
