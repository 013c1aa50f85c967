"""capture: the user's configuration mistakes are usage errors (exit 2, one line); an internal
error (a plain ValueError from collectors) is not reported as the user's mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.collectors import capture
from tracekit.errors import ConfigError


def _capture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exc: Exception, *args: str) -> Any:
    monkeypatch.setattr(capture, "resolve_device", lambda device: ("cpu", 0))

    def run(*a: Any, **k: Any) -> Any:
        raise exc

    monkeypatch.setattr(capture, "run_capture", run)
    return CliRunner().invoke(cli, ["capture", "--device", "cpu", "--world", "2", *args, "-o", str(tmp_path / "x.parquet")])


def test_config_error_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _capture(tmp_path, monkeypatch, ConfigError("--world 3 is not 2 nodes x 2 ranks"))
    assert res.exit_code == 2 and "--world 3 is not 2 nodes x 2 ranks" in res.output


def test_internal_value_error_is_not_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _capture(tmp_path, monkeypatch, ValueError("an internal bug"))
    assert res.exit_code == 1 and isinstance(res.exception, ValueError)
    assert "Usage:" not in res.output


def test_workload_validation_raises_config_error() -> None:
    from tracekit.collectors.workload.config import make_config

    with pytest.raises(ConfigError, match="divisible by the world size 3"):
        make_config("tiny").validate(3)
    with pytest.raises(ConfigError, match="unknown preset"):
        make_config("no-such-preset")
