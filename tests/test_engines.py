"""The engine registry (collectors/engines.py), the capture command's option groups and the typed
rank-to-launcher messages (collectors/messages.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.collectors.engines import ENGINES, get_engine
from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.messages import Beat, Done, Failed, Stage, Status
from tracekit.collectors.progress import Progress, Watch, _take


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.name)
def test_every_entry_resolves(engine) -> None:  # type: ignore[no-untyped-def]
    names = {o.name for o in engine.click_options()}
    owned_elsewhere = {str(o.name) for e in ENGINES if e is not engine for o in e.click_options()}
    assert set(engine.reads) <= names | owned_elsewhere, "an engine reads an option nobody defines"
    assert engine.configure or engine.live, "an engine runs ranks or captures a server"
    assert bool(engine.live) == bool(engine.url_option), "a live capture needs the option holding the URL"
    if engine.hooks:
        from tracekit.collectors.hookspec import installed_version

        rows = engine.hook_table(installed_version(engine.dist) or "99.0.0")
        assert all(isinstance(r, HookSpec) for r in rows)
    if engine.contract:
        problems = engine.check_contract(Path("/nonexistent"), "1.0.0")
        assert problems and "package here" in problems[0].message


def test_unknown_engine() -> None:
    with pytest.raises(ValueError, match="unknown engine 'nope'"):
        get_engine("nope")


def test_help_groups_options_per_engine() -> None:
    r = CliRunner().invoke(cli, ["capture", "--help"])
    assert r.exit_code == 0, r.output
    for e in ENGINES:
        assert e.title in r.output
    # an option shows once, under the engine that owns it
    assert r.output.count("--model DIR|PRESET") == 1
    assert "also reads --batch-size, --draft-steps" in r.output


@pytest.mark.parametrize(("args", "msg"), [
    (["--model", "llama-tiny"], "--model does not apply to --engine builtin (need --engine transformers or vllm)"),
    (["--sglang", "http://127.0.0.1:1", "--batch-size", "2"], "--batch-size does not apply to --engine sglang"),
    (["--engine", "transformers", "--preset", "tiny"], "--preset does not apply to --engine transformers"),
    (["--engine", "sglang"], "--engine sglang captures a running server: give its URL with --sglang URL"),
])
def test_options_of_another_engine_are_usage_errors(args: list[str], msg: str, tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    r = CliRunner().invoke(cli, ["capture", "--device", "cpu", *args, "-o", str(out)])
    assert r.exit_code == 2 and msg in r.output, r.output
    assert not out.exists()


def test_typed_messages_drive_the_watch() -> None:
    said: list[str] = []
    w, prog = Watch(), Progress(said.append, world=1, total_cycles=2)
    for m in (Beat(0), Stage(0, "window", "profiling window started"), Beat(0, 0), Status(0, "slow"),
              Stage(0, "window done", "window done: 1/1 cycles"), Done(0, 12), Failed(0, "RuntimeError: x", True)):
        _take(m, w, prog, said.append)
    assert w.window_started == {0} and w.window_done == {0} and w.last_cycle == {0: 0}
    assert 0 in w.finished and w.errors[0][:2] == ("RuntimeError: x", True)
    assert "rank 0: slow" in said and any("profiling window started (1/1 ranks" in s for s in said)
