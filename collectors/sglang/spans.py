"""SGLang's own span names in a trace -> extra phase rules that depend on the whole trace.

``tracekit.finalize.phases.SPAN_RULES`` maps one span name at a time. One SGLang case needs
the trace as a whole: in 0.5.12 an eager forward of the *draft* runner is labelled
``step[DECODE bs=N]``, exactly like a plain decode step of a run without
speculation. A trace that holds target-verify steps (``step[TARGET_VERIFY ...]``)
or tracekit verify ranges ran with speculation on, where the target never runs a
plain decode (docs/sglang.md, span names per version): there, ``step[DECODE ...]`` is a draft step.

``rules_for(names)`` (= ``tracekit.finalize.phases.trace_rules``, which ``finalize_events``
applies to every trace) returns the ``(regex, phase)`` rules for such a trace, and
``describe(names)`` says which SGLang span generation the names come from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tracekit.finalize.phases import SPEC_DECODE_IS_DRAFT, is_speculative, trace_rules

__all__ = ["SPEC_DECODE_IS_DRAFT", "describe", "is_speculative", "rules_for"]

Rule = tuple[str, str]

_STEP = re.compile(r"^step\[([A-Z][A-Z0-9_]*)\b")


def rules_for(names: Iterable[str]) -> list[Rule]:
    """Trace-dependent phase rules (tried before SPAN_RULES) for these range names."""
    return trace_rules(names)


def describe(names: Iterable[str]) -> dict[str, object]:
    """Which span styles a trace holds: tracekit ranges, SGLang step modes, stage spans."""
    modes: set[str] = set()
    tracekit = stage = False
    for n in names:
        m = _STEP.match(n)
        if m:
            modes.add(m.group(1))
        elif n.startswith("tracekit:"):
            tracekit = True
        elif n in ("draft", "draft_extend"):
            stage = True
    return {"tracekit_ranges": tracekit, "sglang_step_modes": sorted(modes), "sglang_stage_spans": stage}
