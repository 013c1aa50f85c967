"""tracekit.settings: every TRACEKIT_* switch read and checked in one place."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from tracekit import settings
from tracekit.cli import cli
from tracekit.errors import ConfigError
from tracekit.settings import SWITCHES, Settings


def test_defaults_and_values() -> None:
    assert Settings.from_env({}) == Settings()
    s = Settings.from_env({"TRACEKIT_PURE": "1", "TRACEKIT_INGEST_THREADS": "3", "TRACEKIT_CUPTI_TRIM": "lean, kernels",
                           "TRACEKIT_NVTX": "0", "TRACEKIT_NORMAL_EXIT": "yes", "TRACEKIT_LITE_CUPTI": " torch "})
    assert s.pure and s.ingest_threads == 3 and s.cupti_trim == ("lean", "kernels") and s.nvtx is False
    assert s.normal_exit and s.lite_cupti == "torch"
    assert Settings.from_env({"TRACEKIT_CUPTI_TRIM": ""}).cupti_trim == ()  # set and empty: trim nothing
    assert Settings.from_env({"TRACEKIT_INGEST_WHOLE_MB": "0"}).ingest_whole_mb == 0  # 0: always rank by rank
    for bad in ("-1", "many"):
        with pytest.raises(ConfigError, match="TRACEKIT_INGEST_WHOLE_MB"):
            Settings.from_env({"TRACEKIT_INGEST_WHOLE_MB": bad})


@pytest.mark.parametrize("name", ["TRACEKIT_INGEST_THREADS", "TRACEKIT_ATTRIBUTE_THREADS", "TRACEKIT_MAX_GZIP_RATIO",
                                  "TRACEKIT_TIMING_EVENTS_EVERY"])
def test_bad_counts_are_config_errors(name: str) -> None:
    assert name in SWITCHES
    for bad in ("0", "-2", "many"):
        with pytest.raises(ConfigError, match=name):
            Settings.from_env({name: bad})


def test_current_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_ATTRIBUTE_THREADS", "2")
    first = settings.current()
    assert first.attribute_threads == 2 and settings.current() is first  # built once per environment
    monkeypatch.setenv("TRACEKIT_ATTRIBUTE_THREADS", "5")
    assert settings.current().attribute_threads == 5


def test_cli_refuses_a_bad_setting_before_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_INGEST_THREADS", "lots")
    res = CliRunner().invoke(cli, ["info", "does-not-matter.parquet"])
    assert res.exit_code == 2 and "TRACEKIT_INGEST_THREADS='lots': not a whole number >= 1" in res.output


def test_docs_list_every_switch() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "settings.md").read_text()
    assert all(f"| `{name}` | {what} |" in doc for name, what in SWITCHES.items())


def test_capture_hands_its_settings_to_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from tracekit.collectors.capture import CaptureConfig
    from tracekit.collectors.session import ProfilerSession, timing_events_every

    monkeypatch.setenv("TRACEKIT_TIMING_EVENTS_EVERY", "4")
    cc = CaptureConfig()  # configured where the capture starts: the environment then
    monkeypatch.setenv("TRACEKIT_TIMING_EVENTS_EVERY", "9")  # what a rank's own environment might say
    assert cc.settings.timing_events_every == 4
    s = ProfilerSession(0, cuda=False, mode="timing", config=cc.settings)
    assert timing_events_every(s.settings) == 4 and timing_events_every() == 9
