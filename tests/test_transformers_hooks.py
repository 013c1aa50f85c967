"""The transformers hooks on a real generate() loop, in-process, one rank (tiny random models, few tokens).

The accept lengths tracekit records (from host tensor shapes) are compared with
the ``num_matches`` transformers itself hands to ``update_candidate_strategy``;
the phase ranges go through a real torch.profiler window and tracekit's finalize.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers.generation import candidate_generator as cg  # noqa: E402
from transformers.generation.utils import GenerationMixin  # noqa: E402

from tracekit.analyzers.phase_rows import phase_instances  # noqa: E402
from tracekit.collectors.session import ProfilerSession, finalize  # noqa: E402
from tracekit.collectors.transformers.config import TransformersConfig  # noqa: E402
from tracekit.collectors.transformers.engine import TransformersEngine  # noqa: E402

K, NEW = 3, 8


@pytest.fixture
def engine_for() -> Iterator[Any]:
    made: list[TransformersEngine] = []

    def make(assistant: str | None, model: str = "deepseek-v3-tiny") -> TransformersEngine:
        cfg = TransformersConfig(model=model, assistant=assistant, draft_tokens=K, new_tokens=NEW, prompt_len=8)
        eng = TransformersEngine(cfg, 0, 1, torch.device("cpu"), 2)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close()


@pytest.fixture
def engine_matches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every num_matches transformers passes to update_candidate_strategy (CPU: reading it syncs nothing)."""
    seen: list[int] = []
    classes = [c for c in vars(cg).values() if isinstance(c, type) and "update_candidate_strategy" in vars(c)]
    for cls in classes:  # every generator class that defines it (5.17's prompt lookup has its own)
        orig = cls.__dict__["update_candidate_strategy"]

        def spy(self: Any, input_ids: Any, scores: Any, num_matches: Any, _orig: Any = orig) -> Any:
            seen.append(int(num_matches))
            return _orig(self, input_ids, scores, num_matches)

        monkeypatch.setattr(cls, "update_candidate_strategy", spy)
    return seen


def _profiled(eng: TransformersEngine, cycle: int) -> pl.DataFrame:
    s = ProfilerSession(0, False)
    s.start()
    eng.run_cycle(cycle)
    s.stop()
    return finalize(s.events())


@pytest.mark.parametrize("assistant", ["early-exit:1", "noisy:0.3", "same", "prompt-lookup:2"])
def test_accept_lengths_are_the_engines_own(engine_for: Any, engine_matches: list[int], assistant: str) -> None:
    eng = engine_for(assistant)
    eng.run_cycle(0)
    h = eng.hooks
    # the first iteration's target forward is the prefill; every later one a verify
    assert h.calls["prefill"] == 1 and h.calls["draft"] == h.calls["accept"] == h.calls["verify"] + 1
    assert engine_matches[1:] == h.accepts
    assert sum(h.accepts) + h.calls["accept"] + engine_matches[0] == NEW  # every token: an accepted draft or a bonus
    assert h.generator == {"early-exit": "EarlyExitCandidateGenerator", "prompt-lookup": "PromptLookupCandidateGenerator"
                           }.get(assistant.split(":")[0], "AssistedCandidateGenerator")
    if assistant == "same":  # the target drafting for itself: every draft accepted (the last capped by the budget)
        assert all(a == min(d, K) for a, d in zip(h.accepts, h.drafts[1:], strict=True))


def test_phase_ranges_and_facts_in_a_profiled_window(engine_for: Any) -> None:
    eng = engine_for("noisy:0.3")
    ev = _profiled(eng, 0)
    inst = phase_instances(ev).sort("start_ns")
    phases = inst.get_column("phase").to_list()
    assert phases[:2] == ["draft", "prefill"] and set(phases[2:]) == {"draft", "verify"}
    ver = inst.filter(pl.col("phase") == "verify")
    assert ver.get_column("accept_len").to_list() == [float(a) for a in eng.hooks.accepts]
    assert (ver.get_column("num_tokens") == ver.get_column("batch_size") * (K + 1)).any()
    assert ver.get_column("graphed").to_list() == [False] * ver.height
    dr = inst.filter(pl.col("phase") == "draft")
    assert dr.get_column("num_tokens").to_list() == eng.hooks.drafts
    # sequence length: the committed context when the iteration starts, the same for its draft and verify
    seq = dict(zip(dr.get_column("cycle").to_list(), dr.get_column("seq_len").to_list(), strict=True))
    assert all(seq[c] == s for c, s in zip(ver.get_column("cycle").to_list(), ver.get_column("seq_len").to_list(),
                                            strict=True))
    assert dr.get_column("seq_len").min() == 7  # the prompt but its last token: the first draft


def test_plain_decode_when_speculation_is_off(engine_for: Any) -> None:
    eng = engine_for(None, model="llama-tiny")
    ev = _profiled(eng, 0)
    inst = phase_instances(ev).sort("start_ns")
    assert inst.get_column("phase").to_list() == ["prefill"] + ["decode"] * (NEW - 1)
    dec = inst.filter(pl.col("phase") == "decode")
    assert dec.get_column("num_tokens").to_list() == [1] * (NEW - 1)
    assert dec.get_column("seq_len").to_list() == list(range(8, 8 + NEW - 1))
    assert eng.describe()["accept"]["count"] == 0


def test_uninstall_restores_transformers(engine_for: Any) -> None:
    before = {n: GenerationMixin.__dict__[n] for n in ("_assisted_decoding", "_sample", "_prefill",
                                                         "_get_candidate_generator")}
    eng = engine_for("early-exit:1")
    assert all(GenerationMixin.__dict__[n] is not f for n, f in before.items())
    eng.close()
    assert all(GenerationMixin.__dict__[n] is f for n, f in before.items())
    assert not eng.target._forward_pre_hooks and not eng.target._forward_hooks


def test_describe_says_measured_and_the_version(engine_for: Any) -> None:
    eng = engine_for("early-exit:1")
    eng.run_cycle(0)
    d = eng.describe()
    assert d["transformers"] == transformers.__version__ and d["accept"]["modelled"] is False
    assert d["accept"]["count"] == len(eng.hooks.accepts) and d["tensor_parallel"]["world"] == 1
    assert d["hook_table"]["calls"]["draft"] == eng.hooks.calls["draft"]
