"""SGLang's span names, produced by SGLang's own name builders (executed from the real wheels), map to phases."""

from __future__ import annotations

import ast
from types import SimpleNamespace
from typing import Any

import pytest
import sglang_wheels

from tracekit.collectors.sglang.spans import describe, is_speculative, rules_for
from tracekit.finalize.phases import phase_of_span

BUILDERS = {
    "0.5.12": ("sglang/srt/model_executor/model_runner.py", "_build_step_span_name"),
    "0.5.23": ("sglang/srt/utils/profile_utils.py", "build_step_span_name"),
}


def real_builder(version: str) -> tuple[Any, Any]:
    """SGLang's ForwardMode enum and step-span name builder, compiled from the wheel's own source."""
    root = sglang_wheels.source(version)
    fbi = ast.parse((root / "sglang/srt/model_executor/forward_batch_info.py").read_text())
    mode_cls = next(n for n in fbi.body if isinstance(n, ast.ClassDef) and n.name == "ForwardMode")
    rel, fn_name = BUILDERS[version]
    src = ast.parse((root / rel).read_text())
    fn = next(n for n in src.body if isinstance(n, ast.FunctionDef) and n.name == fn_name)
    header = ast.parse("from __future__ import annotations\nfrom enum import IntEnum, auto\n").body
    mod = ast.Module(body=[*header, mode_cls, fn], type_ignores=[])
    ns: dict[str, Any] = {
        "detailed_annotations_enabled": lambda: False,
        "build_detailed_annotation_suffix": lambda fb: "",
    }
    exec(compile(mod, f"<sglang {version} {fn_name}>", "exec"), ns)
    return ns["ForwardMode"], ns[fn_name]


def names(version: str, is_draft: bool) -> dict[str, str]:
    mode_enum, build = real_builder(version)
    out = {}
    for mode in mode_enum:
        fb = SimpleNamespace(forward_mode=mode, batch_size=4, extend_num_tokens=100)
        out[mode.name] = build(fb, is_draft_worker=True) if is_draft else build(fb)
    return out


def test_0512_target_and_draft_steps() -> None:
    got = {m: phase_of_span(n) for m, n in names("0.5.12", is_draft=False).items()}
    assert got["TARGET_VERIFY"] == ("verify", {"batch_size": 4})
    assert got["DECODE"] == ("decode", {"batch_size": 4})
    assert got["EXTEND"] == ("prefill", {"batch_size": 4})
    assert got["MIXED"] == ("prefill", {"batch_size": 4})
    assert got["SPLIT_PREFILL"] == ("prefill", {"batch_size": 4})
    assert got["DRAFT_EXTEND"] == ("draft_extend", {"batch_size": 4})
    assert got["DRAFT_EXTEND_V2"] == ("draft_extend", {"batch_size": 4})
    assert got["IDLE"] is None and got["PREBUILT"] is None
    assert names("0.5.12", is_draft=False)["EXTEND"] == "step[EXTEND bs=4 toks=100]"


def test_0523_verify_and_draft_labels() -> None:
    target = names("0.5.23", is_draft=False)
    assert target["TARGET_VERIFY"] == "step[VERIFY bs=4]"
    assert phase_of_span(target["TARGET_VERIFY"]) == ("verify", {"batch_size": 4})
    assert phase_of_span(target["DECODE"]) == ("decode", {"batch_size": 4})
    assert phase_of_span(target["EXTEND"]) == ("prefill", {"batch_size": 4})
    # every forward of the draft runner is `step[DRAFT ...]`, nested in the `draft` / `draft_extend` stage spans
    for mode, name in names("0.5.23", is_draft=True).items():
        assert name.startswith("step[DRAFT bs=4"), mode
        assert phase_of_span(name) is None
    assert phase_of_span("draft") == ("draft", {})
    assert phase_of_span("draft_extend") == ("draft_extend", {})


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
def test_spec_rules_only_for_spec_traces(version: str) -> None:
    target = list(names(version, is_draft=False).values())
    spec_trace = [n for n in target if "VERIFY" in n] + ["step[DECODE bs=4]"]
    plain_trace = [n for n in target if "VERIFY" not in n]
    assert is_speculative(spec_trace) and not is_speculative(plain_trace)
    assert rules_for(spec_trace) == [(r"^step\[DECODE\b", "draft")]
    assert rules_for(plain_trace) == []
    assert describe(["tracekit:verify|cycle=1", "draft", "step[VERIFY bs=4]"]) == {
        "tracekit_ranges": True, "sglang_step_modes": ["VERIFY"], "sglang_stage_spans": True}

