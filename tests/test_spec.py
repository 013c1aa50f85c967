"""Speculation economics: the seed's arithmetic, the chain-model solver, cycles from a trace."""

from __future__ import annotations

import itertools
import math

import polars as pl
import pytest
from forensic_frames import Spec, build, manifest

from tracekit.analyzers import spec as sp
from tracekit.analyzers import spec_model as sm
from tracekit.errors import AnalysisError


def test_seed_arithmetic_from_its_own_numbers() -> None:
    # seed: baseline decode 82 tok/s -> 12.2 ms per step
    step = sm.step_ns_from_tps(82)
    assert round(step / 1e6, 1) == 12.2
    # break-even 2.46 tokens/cycle -> the cycle is 30.0 ms (29 ms verify + draft + host)
    cycle = 2.46 * step
    assert round(cycle / 1e6, 1) == 30.0
    assert sm.break_even_accept_len(30.0e6, step) == pytest.approx(2.46, abs=0.005)
    # 150 tok/s at a 30 ms cycle needs 4.5 tokens per cycle (bonus included) ...
    need = sm.tokens_needed(150, cycle)
    assert need == pytest.approx(4.5, abs=1e-9)
    # ... and the seed's "78% conditional accuracy" is the unbounded chain: 1/(1-p) = 4.5
    p = sm.solve_accept_prob(need, None)
    assert p is not None and round(p, 2) == 0.78
    # with a finite draft it takes more: k=5 needs 88%, k=3 cannot reach 4.5 tokens at all
    p5 = sm.solve_accept_prob(need, 5)
    assert p5 is not None and round(p5, 2) == 0.88
    assert sm.solve_accept_prob(need, 3) is None
    # the seed's speculative run: 60 tok/s at 30 ms -> 1.8 tokens/cycle, below break-even
    eco = sm.economics(cycle, tokens_per_cycle=1.8, decode_step_ns=step, target_tps=150, draft_tokens=None)
    assert eco.tps_per_seq == pytest.approx(60.0)
    assert eco.break_even_tokens == pytest.approx(2.46)
    assert eco.decode_tps_per_seq == pytest.approx(82.0)
    # for 150 tok/s at 1.8 tokens/cycle the cycle must fall to 12.0 ms
    assert eco.needed_cycle_ns == pytest.approx(12.0e6)


def _brute_chain(p: float, k: int) -> float:
    """Expected tokens per cycle by enumerating every accept pattern of k draft tokens."""
    total = 0.0
    for pattern in itertools.product((0, 1), repeat=k):
        prob = math.prod(p if a else 1 - p for a in pattern)
        accepted = next((i for i, a in enumerate(pattern) if not a), k)  # stop at first reject
        total += prob * (accepted + 1)  # + bonus
    return total


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.78, 0.93, 1.0])
def test_chain_sum_matches_brute_force(p: float, k: int) -> None:
    assert sm.chain_accept_len(p, k) == pytest.approx(_brute_chain(p, k), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("k", [1, 3, 4, 6])
@pytest.mark.parametrize("target", [1.0, 1.3, 2.0, 2.46, 3.9])
def test_solver_inverts_brute_force(k: int, target: float) -> None:
    p = sm.solve_accept_prob(target, k)
    if target > k + 1:
        assert p is None
        return
    assert p is not None
    assert _brute_chain(p, k) == pytest.approx(target, abs=1e-9)


def test_solver_limits() -> None:
    assert sm.solve_accept_prob(0.5, 3) == 0.0
    assert sm.solve_accept_prob(4.0, 3) == 1.0
    assert sm.solve_accept_prob(4.0000001, 3) is None
    assert sm.chain_accept_len(0.5, None) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        sm.chain_accept_len(1.5, 3)
    with pytest.raises(ValueError):
        sm.step_ns_from_tps(0)


def test_shrink_targets_say_what_each_part_must_fall_to() -> None:
    parts = {"draft_ns": 0.6e6, "verify_ns": 29.1e6, "draft_extend_ns": 0.3e6}
    got = sm.shrink_targets(parts, 22.4e6)  # cycle 30.0 -> 22.4: 7.6 ms must go
    assert got["verify_ns"] == pytest.approx(21.5e6)
    assert got["draft_ns"] is None and got["draft_extend_ns"] is None  # not enough alone
    assert sm.shrink_targets(parts, 40e6) == parts


def test_cycles_from_trace_add_up_exactly() -> None:
    s = Spec(ranks=2, cycles=6, accept_len=1.5, draft_tokens=3, straggler=1)
    ev = build(s)
    cyc = sp.cycles(ev)
    assert cyc.height == 2 * 5  # last draft of each rank has no next draft
    parts = cyc.select(pl.sum_horizontal("draft_ns", "verify_ns", "draft_extend_ns", "host_between_ns"))
    assert parts.to_series().to_list() == cyc.get_column("cycle_ns").to_list()
    # host time between phases: 3 gaps of host_between_ns per cycle
    assert set(cyc.get_column("host_between_ns").to_list()) == {3 * s.host_between_ns}
    assert set(cyc.get_column("verify_tokens").to_list()) == {4.0}
    _rank, why = sp.pick_rank(cyc, None)
    assert why == "slowest"
    assert sp.pick_rank(cyc, 0) == (0, "chosen")
    with pytest.raises(AnalysisError):
        sp.pick_rank(cyc, 5)


def test_spec_table_from_trace_and_decode_steps() -> None:
    s = Spec(ranks=2, cycles=8, accept_len=2.0, draft_tokens=3, decode_steps=5, decode_ns=400_000)
    ev = build(s)
    cyc = sp.cycles(ev)
    dec = sp.decode_steps(ev)
    assert dec.height == 2 * 5
    periods = dec.filter(pl.col("basis") == "period")
    assert periods.height == 2 * 4  # the last decode of each rank has no next one: its range time
    assert set(periods.get_column("step_ns").to_list()) == {s.decode_ns + s.host_between_ns}
    assert sp.decode_step_by_bs(ev) == {1: float(s.decode_ns + s.host_between_ns)}
    one = cyc.filter(pl.col("rank") == 0)
    tab = sp.spec_table(one, decode_step_ns=450_000.0, target_tps=2000.0)
    row = tab.row(0, named=True)
    assert row["batch_size"] == 1 and row["cycles"] == 8  # the last cycle ends at the first decode
    assert row["tokens_per_cycle"] == pytest.approx(3.0)  # accept 2 + bonus
    assert row["draft_tokens"] == 3
    mean_cycle = one.get_column("cycle_ns").mean()
    assert row["cycle_ns"] == pytest.approx(mean_cycle)
    assert row["break_even_tokens"] == pytest.approx(mean_cycle / 450_000.0)
    assert row["tps_per_seq"] == pytest.approx(3.0 * 1e9 / mean_cycle)
    assert row["needed_tokens"] == pytest.approx(2000.0 * mean_cycle / 1e9)
    # the needed cycle for 2000 tok/s at 3 tokens/cycle is 1.5 ms; verify must absorb the excess
    excess = mean_cycle - 1.5e6
    assert row["shrink_verify_ns"] == pytest.approx(row["verify_ns"] - excess)
    assert row["accept_len_source"] == "measured"


def test_decode_between_cycles_is_not_cycle_time() -> None:
    s = Spec(ranks=2, cycles=5, decode_each_cycle=True, decode_ns=700_000)
    ev = build(s)
    plain = sp.cycles(build(Spec(ranks=2, cycles=5)))
    cyc = sp.cycles(ev)
    assert cyc.height == 2 * 5  # every cycle ends at its reference decode
    # the same cycle times as without the interleaved decodes (all but the last cycle, which has no next draft there)
    assert cyc.get_column("cycle_ns").to_list()[:4] == plain.get_column("cycle_ns").to_list()[:4]
    assert set(cyc.get_column("other_phases_ns").to_list()) == {0}
    dec = sp.decode_steps(ev)
    assert set(dec.get_column("basis").to_list()) == {"range"}
    assert sp.decode_step_by_bs(ev) == {1: 700_000.0}


def test_k_draft_ranges_are_one_cycle() -> None:
    """SGLang 0.5.12 writes one `step[DECODE]` range per draft step: k draft ranges, then verify and
    draft_extend, are one cycle whose draft time is the sum of the k ranges (not the last one alone)."""
    one = sp.cycles(build(Spec(ranks=2, cycles=6)))
    s = Spec(ranks=2, cycles=6, draft_ranges=3, draft_gap_ns=2_000)
    ev = build(s)
    assert ev.filter((pl.col("kind") == "range") & (pl.col("phase") == "draft")).height == 2 * 6 * 3
    cyc = sp.cycles(ev)
    assert cyc.height == one.height == 2 * 5
    step = (s.draft_ns - 2 * s.draft_gap_ns) // 3
    assert set(cyc.get_column("draft_ns").to_list()) == {3 * step}
    # the cycle starts at the first of the three drafts: same start and length as one draft range
    assert cyc.get_column("start_ns").to_list() == one.get_column("start_ns").to_list()
    assert cyc.get_column("cycle_ns").to_list() == one.get_column("cycle_ns").to_list()
    # the gaps between draft steps are host time of the cycle
    assert set((cyc["host_between_ns"] - one["host_between_ns"]).to_list()) == {s.draft_ns - 3 * step}
    assert cyc.get_column("cycle").to_list() == one.get_column("cycle").to_list()


def test_sglang_0512_spans_count_every_draft_step(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 0.5.12-shaped trace (tests/sglang_shapes.py, SGLang's own spans only, no hooks): every cycle holds
    its three `step[DECODE]` drafts, its `step[TARGET_VERIFY]` and its `step[DRAFT_EXTEND_V2]`."""
    pytest.importorskip("torch")
    import sglang_shapes as S

    from tracekit.analyzers.phase_rows import phase_instances
    from tracekit.ingest import ingest_traces

    worker = S.make_worker("0.5.12", 0)
    path = tmp_path / "1.0-TP-0.trace.json.gz"
    with S.cpu_profile(str(path)):
        S.drive(worker, cycles=4)
    ev = ingest_traces([str(path)]).events
    inst = phase_instances(ev).sort("start_ns")
    cyc = sp.cycles(ev)
    assert cyc.height == 3  # the fourth cycle has no later phase range
    drafts = inst.filter(pl.col("phase") == "draft")
    verifies = inst.filter(pl.col("phase") == "verify")
    assert drafts.height == 3 * 4 and verifies.height == 4
    for i, row in enumerate(cyc.iter_rows(named=True)):
        mine = drafts.slice(3 * i, 3)
        assert row["start_ns"] == mine["start_ns"][0]
        assert row["draft_ns"] == mine["host_ns"].sum()
        assert row["verify_ns"] == verifies["host_ns"][i]
        nxt = drafts["start_ns"][3 * (i + 1)]
        assert row["cycle_ns"] == nxt - row["start_ns"]


def test_no_cycles_is_a_clear_error() -> None:
    ev = build(Spec(ranks=1, cycles=0, decode_steps=3))
    cyc = sp.cycles(ev)
    assert cyc.is_empty()
    with pytest.raises(AnalysisError, match="no complete speculative cycle"):
        sp.pick_rank(cyc, None)


def test_cli_spec_json_and_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from tracekit.cli import cli
    from tracekit.store import write_run

    ev = build(Spec(ranks=2, cycles=6, accept_len=0.8, draft_tokens=3))
    path = tmp_path / "run.parquet"
    write_run(ev, path, manifest(2))
    res = CliRunner().invoke(cli, ["spec", str(path), "--baseline-tps", "82", "--target-tps", "150", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    b = doc["buckets"][0]
    assert doc["decode_source"] == "baseline 82 tok/s"
    assert b["batch_size"] == 1 and b["tokens_per_cycle"] == pytest.approx(1.8)
    assert b["decode_step_ns"] == pytest.approx(1e9 / 82)
    assert b["break_even_tokens"] == pytest.approx(b["cycle_ns"] / (1e9 / 82))
    assert b["needed_accept_prob"] == 0.0  # 150 tok/s at ~1.5 ms cycles needs < 1 token: p = 0
    or_text = CliRunner().invoke(cli, ["spec", str(path), "--baseline-tps", "82"])
    assert or_text.exit_code == 0 and "break-even" in or_text.output
    bad = CliRunner().invoke(cli, ["spec", str(tmp_path / "missing.parquet")])
    assert bad.exit_code == 1 and "missing.parquet" in bad.output and "Traceback" not in bad.output
    use = CliRunner().invoke(cli, ["spec", str(path), "--baseline", str(path), "--baseline-tps", "3"])
    assert use.exit_code == 2
    nodec = CliRunner().invoke(cli, ["spec", str(path), "--baseline", str(path)])
    assert nodec.exit_code == 1 and "no decode phase" in nodec.output and str(path) in nodec.output


def test_baseline_run_gives_the_decode_step_per_batch_size() -> None:
    spec_run = build(Spec(ranks=2, cycles=6, accept_len=1.0, batch_size=2))
    base = build(Spec(ranks=2, cycles=0, decode_steps=6, decode_ns=300_000, batch_size=2))
    table, ctx = sp.spec_report(spec_run, baseline=base, target_tps=None)
    row = table.row(0, named=True)
    step = 300_000 + Spec().host_between_ns
    assert ctx["decode_source"] == "baseline run: period of consecutive decode steps"
    assert row["decode_step_ns"] == step
    assert row["break_even_tokens"] == pytest.approx(row["cycle_ns"] / step)
    assert row["tps_per_batch"] == pytest.approx(2 * row["tps_per_seq"])
    # a baseline measured at another batch size gives no decode step for this bucket
    other = build(Spec(ranks=2, cycles=0, decode_steps=6, batch_size=8))
    t2, ctx2 = sp.spec_report(spec_run, baseline=other)
    assert t2.row(0, named=True)["decode_step_ns"] is None and t2.row(0, named=True)["break_even_tokens"] is None
    from tracekit.analyzers import analyses
    from tracekit.render.spec import summary_lines

    rep2 = analyses.spec(spec_run, None, baseline=other)
    assert rep2.table.equals(t2) and rep2.decode_source == ctx2["decode_source"]
    assert any("no decode step at batch size 2 in the baseline run" in line for line in summary_lines(rep2))
