"""Phase hooks: labels and facts under a real torch profiler, cheap path when off, failures contained."""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tracekit.collectors import hooks  # noqa: E402
from tracekit.collectors.hooks import emit_facts, install_hook, phase, phase_hook  # noqa: E402
from tracekit.finalize.phases import parse_label  # noqa: E402


def _ranges(prof: Any) -> list[str]:
    return [e.name() for e in prof.profiler.kineto_results.events() if e.is_user_annotation()]


@pytest.fixture(autouse=True)
def _fresh_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_NVTX", raising=False)
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    hooks._Backend.reset()
    hooks._warned.clear()


def test_hook_records_label_facts_and_late_facts() -> None:
    def verify(bs: int) -> float:
        return torch.ones(bs).sum().item()

    hook = phase_hook(
        verify,
        "verify",
        facts=lambda a, k: {"cycle": 7, "bs": a[0], "tok": a[0] * 4, "seq": 1000, "graphed": False},
        late=lambda r, a, k: {"cycle": 7, "accept": r / 2},
    )
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert hook(4) == 4.0
    names = _ranges(prof)
    labels = [parse_label(n) for n in names if n.startswith("tracekit:")]
    main = [lab for lab in labels if lab is not None and not lab.is_facts]
    late = [lab for lab in labels if lab is not None and lab.is_facts]
    assert len(main) == 1 and main[0].phase == "verify"
    assert main[0].facts == {"cycle": 7, "batch_size": 4, "num_tokens": 16, "seq_len": 1000, "graphed": False}
    assert len(late) == 1 and late[0].phase == "verify"
    assert late[0].facts == {"cycle": 7, "accept_len": 2.0}
    assert hook.calls == 1 and not hook.disabled


def test_nothing_recorded_and_fast_path_when_profiler_off() -> None:
    hook = phase_hook(lambda x: x + 1, "draft", facts=lambda a, k: {"cycle": 1})
    assert hook(1) == 2
    assert hook.calls == 0  # the fast path never formatted a label nor opened a range
    with phase("draft", cycle=1) as p:
        assert p._range is None


def test_failing_facts_callable_disables_hook_logs_once_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    def bad_facts(a: Any, k: Any) -> dict[str, int]:
        raise KeyError("no batch")

    hook = phase_hook(lambda: "ok", "verify", facts=bad_facts)
    with caplog.at_level(logging.WARNING, logger="tracekit.collectors.hooks"), profile(
        activities=[ProfilerActivity.CPU]
    ) as prof:
        assert hook() == "ok"
        assert hook() == "ok"
    assert hook.disabled and "KeyError" in (hook.error or "")
    warnings = [r for r in caplog.records if "disabled" in r.getMessage()]
    assert len(warnings) == 1
    assert not [n for n in _ranges(prof) if n.startswith("tracekit:verify")]


def test_bad_late_facts_disable_but_keep_result() -> None:
    hook = phase_hook(lambda: 3, "verify", facts=lambda a, k: {"cycle": 1}, late=lambda r, a, k: {"accept": 1.0})
    with profile(activities=[ProfilerActivity.CPU]):
        assert hook() == 3  # late facts without a cycle: machinery error, contained
    assert hook.disabled
    assert hook() == 3


def test_exception_of_wrapped_function_propagates_and_range_closes() -> None:
    def boom() -> None:
        raise ValueError("model error")

    hook = phase_hook(boom, "verify", facts=lambda a, k: {"cycle": 2})
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with pytest.raises(ValueError, match="model error"):
            hook()
        with phase("decode", cycle=3):
            torch.ones(2).sum()
    names = _ranges(prof)
    assert "tracekit:verify|cycle=2" in names and "tracekit:decode|cycle=3" in names
    assert not hook.disabled  # the host program's error is not a hook failure


def test_phase_context_propagates_block_errors() -> None:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with pytest.raises(RuntimeError), phase("draft_extend", cycle=5, bs=2):
            raise RuntimeError("inside")
        emit_facts("verify", 5, accept=1.5)
    names = _ranges(prof)
    assert "tracekit:draft_extend|cycle=5|bs=2" in names
    assert "tracekit:facts|phase=verify|cycle=5|accept=1.5000" in names


def test_install_hook_on_a_class_and_uninstall() -> None:
    class Worker:
        def __init__(self) -> None:
            self.k = 3

        def draft(self, n: int) -> int:
            return self.k * n

    original = Worker.draft
    hook = install_hook(Worker, "draft", "draft", facts=lambda a, k: {"cycle": a[1]})
    w = Worker()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert w.draft(4) == 12
    assert "tracekit:draft|cycle=4" in _ranges(prof)
    hook.uninstall()
    assert Worker.draft is original


def test_nvtx_failure_is_contained(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    class BrokenNvtx:
        def push_range(self, name: str) -> None:
            raise OSError("no nvtx tool")

        def pop_range(self) -> None:
            raise AssertionError("never pushed")

    hooks._Backend.resolve()
    monkeypatch.setattr(hooks._Backend, "nvtx", BrokenNvtx())
    ran = []
    with caplog.at_level(logging.WARNING, logger="tracekit.collectors.hooks"), phase("verify", cycle=1):
        ran.append(1)
    hook = phase_hook(lambda: 5, "decode")
    assert hook() == 5 and hook.disabled
    assert ran == [1]
    assert any("could not be opened" in r.getMessage() for r in caplog.records)


def test_nvtx_enabled_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("nvtx")
    monkeypatch.setenv("TRACEKIT_NVTX", "1")
    hooks._Backend.reset()
    hooks._Backend.resolve()
    assert hooks._Backend.nvtx is not None
    hook = phase_hook(lambda: 1, "verify", facts=lambda a, k: {"cycle": 0})
    assert hook() == 1 and hook.calls == 1 and not hook.disabled  # NVTX path taken, no torch profiler needed
