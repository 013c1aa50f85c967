"""The finalized run: every command sees the phases the writer gave the run (tracekit.finalize).

SGLang 0.5.12 labels an eager forward of the draft runner ``step[DECODE bs=N]``, like a plain
decode step; in a trace that also holds ``step[TARGET_VERIFY ...]`` it is a draft step
(``tracekit.finalize.phases.trace_rules``). The phase is decided once, when the run is written,
so attribute, gap, spec, diff, ranks and export all say ``draft``; a run written without
``finalize_version`` (an older tracekit) is read as stored, the CLI saying so in one line on
stderr, until ``tracekit upgrade`` finalizes it again, once, with the same rules.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import TraceBuilder

from tracekit.cli import cli
from tracekit.export.validate import validate_trace
from tracekit.finalize import FINALIZE_VERSION
from tracekit.finalize.version import changes_since
from tracekit.store import load_run, read_manifest, write_run

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CYCLES = 3
DRAFT_STEPS = 3
LATE_NS = 4_000  # rank 1 reaches every draft-step allreduce this late


def _coll(world: int) -> dict[str, Any]:
    return {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": world,
            "dtype": "BFloat16", "Process Group Name": "0", "Process Group Ranks": list(range(world))}


def rank_trace(rank: int, world: int = 2) -> TraceBuilder:
    """One rank of a 0.5.12 speculative server: prefill, then per cycle three eager draft steps
    (``step[DECODE bs=4]``), a target verify and a draft extend; one more draft step at the end.
    Every step launches its kernels and one allreduce."""
    b = TraceBuilder(rank=rank, world_size=world, device=rank, pid=1000 + rank, tid=1000 + rank)
    t = 5_150_227_743_625_066

    def step(name: str, dur: int, kernels: list[tuple[str, int]], ar_late: int = 0) -> None:
        nonlocal t
        b.range(name, t, dur)
        k = t + 2_000
        for kn, kd in kernels:
            b.kernel(kn, k - 1_000, k + 1_000, kd)
            k += kd + 3_000
        b.kernel(AR, k - 1_000, k + 1_000 + ar_late, 5_000, coll=_coll(world), stream=20)
        t += dur + 10_000

    late = LATE_NS if rank == 1 else 0
    step("step[EXTEND bs=4 toks=512]", 200_000, [("nvjet_prefill_gemm", 50_000)])
    for _ in range(CYCLES):
        for _ in range(DRAFT_STEPS):
            step("step[DECODE bs=4]", 40_000, [("nvjet_tst_64x8_draft", 8_000)], ar_late=late)
        step("step[TARGET_VERIFY bs=4]", 120_000,
             [("nvjet_tst_128x64_verify", 20_000), ("void flash::FlashAttnFwdSm90<x>(Params)", 30_000)])
        step("step[DRAFT_EXTEND_V2 bs=4]", 60_000, [("nvjet_tst_64x8_extend", 10_000)])
    step("step[DECODE bs=4]", 40_000, [("nvjet_tst_64x8_draft", 8_000)], ar_late=late)
    return b


N_DRAFT = 2 * (CYCLES * DRAFT_STEPS + 1)  # draft instances over both ranks
PHASES = ["draft", "draft_extend", "prefill", "verify"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fin")
    files = [rank_trace(r).write(d / f"r{r}.json") for r in (0, 1)]
    new = d / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", *map(str, files), "-o", str(new), "-q"])
    assert res.exit_code == 0, res.output
    # the same events as an older tracekit stored them: what finalize sets left out (group and
    # coll_op come from the trace's own args), no finalize_version
    ev = load_run(new).events.with_columns(
        *[pl.lit(None, dtype=dt).alias(c) for c, dt in
          (("phase", pl.String), ("phase_id", pl.Int64), ("cycle", pl.Int64), ("category", pl.String),
           ("coll_seq", pl.Int64))]
    )
    man = {k: v for k, v in read_manifest(new).items() if k != "finalize_version"}
    old = write_run(ev, d / "old.parquet", man)
    upgraded = d / "upgraded.parquet"
    res = CliRunner().invoke(cli, ["upgrade", str(old), "-o", str(upgraded)])
    assert res.exit_code == 0, res.output
    assert res.stdout == (f"{old}: no finalize version -> {FINALIZE_VERSION} ({'; '.join(changes_since(None))}), "
                          f"{load_run(upgraded).events.height} events -> {upgraded}\n")
    return {"new": new, "old": old, "upgraded": upgraded}


def _invoke(args: list[str], kind: str) -> Any:
    """Run a command; its stdout as JSON (or text), checking the stderr line for an old run."""
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    notes = [line for line in res.stderr.splitlines() if "`tracekit upgrade" in line]
    reads = sum(1 for a in args if a.endswith(".parquet"))  # run files read (outputs here are .json)
    assert len(notes) == (reads if kind == "old" else 0), res.stderr
    return json.loads(res.stdout) if "--json" in args else res.stdout


def test_the_run_records_its_finalize_version(runs: dict[str, Path]) -> None:
    assert read_manifest(runs["new"])["finalize_version"] == FINALIZE_VERSION
    assert "finalize_version" not in read_manifest(runs["old"])
    assert read_manifest(runs["upgraded"])["finalize_version"] == FINALIZE_VERSION
    assert load_run(runs["new"]).outdated is None and load_run(runs["old"]).outdated is not None


def test_an_old_run_is_read_as_stored_with_one_line(runs: dict[str, Path]) -> None:
    res = CliRunner().invoke(cli, ["attribute", str(runs["old"]), "--json"])
    note, err = res.stderr.splitlines()  # one line naming the upgrade, then the error: no category guessed
    assert "`tracekit upgrade" in note and res.exit_code == 1
    assert err.startswith(f"tracekit: error: {runs['old']}: rank 0: ") and "GPU events have no category" in err
    # with its categories (an older run finalize saw, before phases were decided): answered as stored
    cats = load_run(runs["new"]).events.get_column("category")
    partly = runs["old"].parent / "partly.parquet"
    write_run(load_run(runs["old"]).events.with_columns(cats), partly, read_manifest(runs["old"]))
    att = _invoke(["attribute", str(partly), "--json"], "old")  # the note is checked there: one line
    assert [p["phase"] for p in att["phases"]] != PHASES  # its stored annotations lack the phases
    res = CliRunner().invoke(cli, ["upgrade", str(runs["new"])])
    assert res.exit_code == 0 and res.stdout == f"{runs['new']}: already at finalize version {FINALIZE_VERSION}; nothing written\n"
    res = CliRunner().invoke(cli, ["upgrade", str(runs["old"].parent)])
    assert res.exit_code == 2 and "give -o" in res.output


@pytest.mark.parametrize("kind", ["new", "upgraded"])
def test_step_decode_is_draft_in_every_command(runs: dict[str, Path], kind: str, tmp_path: Path) -> None:
    run = str(runs[kind])
    att = _invoke(["attribute", run, "--json", "--by", "cycle"], kind)
    assert sorted({p["phase"] for p in att["phases"]}) == PHASES
    assert sum(p["instances"] for p in att["phases"] if p["phase"] == "draft") == N_DRAFT

    gap = _invoke(["gap", run, "--b", "draft", "--json"], kind)
    assert gap["b"]["phase"] == "draft" and gap["b"]["instances"] == N_DRAFT
    res = CliRunner().invoke(cli, ["gap", run])  # the default B (decode) is not in a speculative run
    assert res.exit_code == 1 and "decode" in res.output

    spec = _invoke(["spec", run, "--baseline-tps", "80", "--json"], kind)
    assert spec["buckets"][0]["cycles"] == CYCLES

    diff = _invoke(["diff", run, run, "--phase", "all", "--json"], kind)
    assert sorted(p["phase"] for p in diff["phases"]) == PHASES

    ranks = _invoke(["ranks", run, "--json"], kind)
    r1 = next(r for r in ranks["ranks"] if r["rank"] == 1)
    assert r1["worst_phase"] == "draft" and r1["last_count"] == CYCLES * DRAFT_STEPS + 1

    out = tmp_path / f"{kind}.json"
    _invoke(["export", run, "-o", str(out)], kind)
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    host = Counter(s.name for s in chk.slices if s.track == "phases (host)")
    assert sorted(host) == PHASES and host["draft"] == N_DRAFT


def test_upgraded_and_new_runs_read_the_same(runs: dict[str, Path]) -> None:
    new, old = load_run(runs["new"]).events, load_run(runs["upgraded"]).events
    assert new.equals(old)


def test_committed_sample_runs_are_current() -> None:
    """The README's examples print no 'older tracekit' line: every committed run is at the current
    finalize version (after a bump, `tracekit upgrade` them; samples/UPGRADED.md). h200-lite's
    *.captured.parquet are refinalize.py's inputs, kept as captured."""
    samples = Path(__file__).resolve().parent.parent / "samples"
    runs = [p for p in sorted(samples.rglob("*.parquet")) if not p.name.endswith(".captured.parquet")
            and not p.name.startswith("rank-")]
    assert len(runs) >= 20
    old = [str(p.relative_to(samples)) for p in runs if read_manifest(p).get("finalize_version") != FINALIZE_VERSION]
    assert not old, old


def test_upgrade_a_shard_directory_into_one_file(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    files = [rank_trace(r).write(tmp_path / f"r{r}.json") for r in (0, 1)]
    res = CliRunner().invoke(cli, ["ingest", *map(str, files), "-o", str(tmp_path / "in.parquet"), "-q"])
    assert res.exit_code == 0, res.output
    run = load_run(tmp_path / "in.parquet")
    man = {k: v for k, v in run.manifest.items() if k != "finalize_version"}
    for r in (0, 1):
        write_run(run.events.filter(pl.col("rank") == r), d / f"rank-{r:05d}.parquet", man)
    out = tmp_path / "up.parquet"
    res = CliRunner().invoke(cli, ["upgrade", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert read_manifest(out)["finalize_version"] == FINALIZE_VERSION and load_run(out).events.height == run.events.height
