"""`tracekit ingest` of directories written by SGLang's own /start_profile (no tracekit hooks).

Rank files are real CPU-profiler traces of tests/sglang_shapes.py with SGLang's
exact file names (``{profile_id}-TP-{r}[-EP-..][-EXTEND|-DECODE].trace.json.gz``)
and span names per version; the merged file is produced by SGLang's own
``ProfileMerger`` (sglang/srt/utils/profile_merger.py, stdlib-only) executed from
the real 0.5.23 wheel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")

import sglang_shapes as S
import sglang_wheels
from click.testing import CliRunner

from tracekit.analyzers.phase_rows import phase_instances
from tracekit.cli import cli
from tracekit.collectors.sglang.spans import describe, rules_for
from tracekit.finalize.membership import annotate_phases
from tracekit.ingest import ingest_traces
from tracekit.store import load_run

PROFILE_ID = "1764470000.1234567"
CYCLES = 3


def write_profile_dir(d: Path, style: str, world: int = 2, suffix: str = "") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        worker = S.make_worker(style, r)
        with S.cpu_profile(str(d / f"{PROFILE_ID}-TP-{r}{suffix}.trace.json.gz")):
            S.drive(worker, cycles=CYCLES)
    return d


def counts(inst: pl.DataFrame, rank: int) -> dict[str, int]:
    vc = inst.filter(pl.col("rank") == rank).get_column("phase").value_counts()
    return dict(zip(vc.get_column("phase").to_list(), vc.get_column("count").to_list(), strict=True))


@pytest.fixture(scope="module")
def dir_0523(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_profile_dir(tmp_path_factory.mktemp("p0523"), "0.5.23")


def test_0523_spans_map_to_phases(dir_0523: Path) -> None:
    run = ingest_traces([dir_0523])
    assert sorted(run.manifest["ranks"]) == ["0", "1"]
    inst = phase_instances(run.events)
    for r in (0, 1):
        # `draft` / `draft_extend` stage spans are the instances; `step[DRAFT bs=4]` inside them is not
        assert counts(inst, r) == {"verify": CYCLES, "draft": CYCLES, "draft_extend": CYCLES + 1, "prefill": 1}
        v = inst.filter((pl.col("rank") == r) & (pl.col("phase") == "verify"))
        assert v.get_column("batch_size").to_list() == [4] * CYCLES


def test_merged_file_splits_back_into_ranks(dir_0523: Path, tmp_path: Path) -> None:
    src = sglang_wheels.source("0.5.23") / "sglang/srt/utils/profile_merger.py"
    spec = importlib.util.spec_from_file_location("sglang_profile_merger_0523", src)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    merged = Path(mod.ProfileMerger(str(dir_0523), PROFILE_ID).merge_chrome_traces())
    assert merged.name == f"merged-{PROFILE_ID}.trace.json.gz"
    try:
        run = ingest_traces([merged])
        per_rank = ingest_traces([dir_0523])  # the directory: merged file left out as redundant
        assert sorted(run.manifest["ranks"]) == sorted(per_rank.manifest["ranks"]) == ["0", "1"]
        a, b = phase_instances(run.events), phase_instances(per_rank.events)
        for r in (0, 1):
            assert counts(a, r) == counts(b, r)
        assert run.events.height == per_rank.events.height
    finally:
        merged.unlink()


def test_0512_draft_steps_labelled_decode(tmp_path: Path) -> None:
    """0.5.12 labels eager draft forwards `step[DECODE bs=N]`: spans.rules_for remaps them in spec traces."""
    run = ingest_traces([write_profile_dir(tmp_path / "p", "0.5.12", world=1)])
    names = run.events.filter(pl.col("kind") == "range").get_column("name").unique().to_list()
    assert describe(names)["sglang_step_modes"] == ["DECODE", "DRAFT_EXTEND_V2", "EXTEND", "TARGET_VERIFY"]
    fixed = phase_instances(annotate_phases(run.events, rules=rules_for(names)))
    # 3 draft steps per cycle, each its own instance (0.5.12 has no span around the draft stage)
    assert counts(fixed, 0) == {"verify": CYCLES, "draft": 3 * CYCLES, "draft_extend": CYCLES + 1, "prefill": 1}
    # ingest itself applies the rule (finalize_events): no `decode` phase in a speculative trace
    assert counts(phase_instances(run.events), 0) == counts(fixed, 0)
    plain = phase_instances(annotate_phases(run.events))
    assert counts(plain, 0).get("decode") == 3 * CYCLES  # what the span table alone would say
    assert rules_for(["step[DECODE bs=8]"]) == []  # no verify anywhere: a plain decode run


def test_stage_and_ep_file_names(tmp_path: Path) -> None:
    """profile_by_stage writes -EXTEND and -DECODE files per rank; -EP- parts when ep_size > 1."""
    d = tmp_path / "p"
    for r in range(2):
        for stage in ("EXTEND", "DECODE"):
            worker = S.make_worker("0.5.23", r)
            with S.cpu_profile(str(d / f"{PROFILE_ID}-TP-{r}-EP-{r}-{stage}.trace.json.gz")):
                S.drive(worker, cycles=1)
    run = ingest_traces([d])
    assert sorted(run.manifest["ranks"]) == ["0", "1"]
    assert sorted(run.manifest["ranks"]["1"]["stages"]) == ["DECODE", "EXTEND"]


def test_cli_ingest_then_attribute_without_flags(dir_0523: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(dir_0523), "-o", str(out)])
    assert res.exit_code == 0, res.output
    run = load_run(out)
    assert run.ranks == [0, 1]
    res = CliRunner().invoke(cli, ["attribute", str(out)])
    assert res.exit_code == 0, res.output
    # SGLang's own spans became phase instances: 2 ranks x 3 cycles of verify, batch size from `bs=`
    # (CPU traces: no GPU events, so attribute runs in host mode)
    text = " ".join(res.output.split())
    assert text.startswith("host mode:") and "per instance on the host (6 instances on 2 rank(s)" in text
    assert "draft_extend" in res.output and "batch size 4.0" in res.output


def test_gpu_sample_every_kernel_in_a_phase(samples_dir: Path) -> None:
    """samples/sglang-shapes-h200x2: hooked simulated ranks on H200s; kernels join their phases by launch."""
    run = ingest_traces([samples_dir / "sglang-shapes-h200x2"])
    ev = run.events
    kernels = ev.filter(pl.col("kind") == "kernel")
    assert kernels.height > 200 and kernels.get_column("phase").null_count() == 0
    inst = phase_instances(ev)
    for r in (0, 1):
        assert counts(inst, r) == {"verify": 6, "draft": 6, "draft_extend": 7, "prefill": 1}
        v = inst.filter((pl.col("rank") == r) & (pl.col("phase") == "verify")).sort("cycle")
        assert v.get_column("cycle").to_list() == list(range(6))
        assert v.get_column("accept_len").to_list() == pytest.approx([sum(S.accepted(c, 4, 3)) / 4 for c in range(6)], abs=1e-4)
        assert v.get_column("num_tokens").to_list() == [16] * 6
