"""Forensics on a real 2-rank H200 capture (samples/h200x2-forensics, see its README)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.analyzers.align import align_events, estimate_offsets, raw_times
from tracekit.analyzers.coll_match import matched_collectives
from tracekit.analyzers.diff import diff_runs
from tracekit.analyzers.spec import cycles, spec_report
from tracekit.analyzers.stragglers import segments, stragglers
from tracekit.store import Run, load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-forensics" / "run.parquet"


@pytest.fixture(scope="module")
def run() -> Run:
    return load_run(SAMPLE)


def _shift(ev: pl.DataFrame, rank: int, ns: int) -> pl.DataFrame:
    return ev.with_columns(
        pl.when(pl.col("rank") == rank).then(pl.col("start_ns") + ns).otherwise(pl.col("start_ns")).alias("start_ns")
    )


def test_real_collectives_match_on_both_ranks(run: Run) -> None:
    m = matched_collectives(run.events)
    assert m.get_column("key").n_unique() == 416
    assert m.group_by("rank").len().get_column("len").to_list() == [416, 416]


@pytest.mark.parametrize("shift", [7_654_321, -2_500_000_017])
def test_real_shift_is_recovered_within_the_residual(run: Run, shift: int) -> None:
    base = estimate_offsets(run.events)
    # one host, one clock: the fitted offset is within the residual of zero, sub-microsecond
    assert abs(base.offsets_ns[1]) <= base.residual_max_ns
    assert base.residual_median_ns < 1_000
    fit = estimate_offsets(_shift(run.events, 1, shift))
    assert abs(fit.offsets_ns[1] - shift) <= fit.residual_max_ns
    assert abs(fit.offsets_ns[1] - base.offsets_ns[1] - shift) <= 1  # linear in the shift
    assert fit.residual_max_ns == base.residual_max_ns


def test_real_align_round_trip(run: Run) -> None:
    shifted = _shift(run.events, 1, 123_456_789)
    out, man = align_events(shifted, run.manifest, "collectives")
    clock = man["clock"]
    assert abs(clock["offsets_ns"]["1"] + 123_456_789) <= clock["residual_ns"]["max"]
    assert raw_times(out, man).get_column("start_ns").equals(shifted.get_column("start_ns"))


def test_real_straggler_view_is_consistent(run: Run) -> None:
    ev = run.events
    view = stragglers(ev)
    ranks = view["ranks"]
    coll = view["collectives"]
    assert coll.height == 416
    assert ranks.get_column("last_count").sum() == coll.get_column("last_rank").drop_nulls().len()
    # inflicted wait of a rank = the other rank's waits at the collectives it was last to,
    # computed here straight from the matched rows
    m = matched_collectives(ev)
    late = coll.filter(pl.col("last_rank").is_not_null()).select("key", "last_rank")
    other = m.join(late, on="key").filter(pl.col("rank") != pl.col("last_rank"))
    want = other.group_by("last_rank").agg(pl.col("wait_ns").sum()).sort("last_rank")
    got = ranks.filter(pl.col("last_count") > 0).sort("rank")
    assert got.get_column("inflicted_wait_ns").to_list() == want.get_column("wait_ns").to_list()
    # every segment splits exactly into busy + launch gaps + other idle, none negative
    seg = segments(ev, m)
    assert seg.height == 2 * 415
    assert (seg["busy_ns"] + seg["launch_gap_ns"] + seg["other_idle_ns"] == seg["seg_ns"]).all()
    assert (seg["busy_ns"] >= 0).all() and (seg["launch_gap_ns"] >= 0).all() and (seg["busy_ns"] <= seg["seg_ns"]).all()


def test_real_spec_cycles(run: Run) -> None:
    cyc = cycles(run.events)
    assert cyc.group_by("rank").len().sort("rank").get_column("len").to_list() == [8, 8]
    parts = cyc["draft_ns"] + cyc["verify_ns"] + cyc["draft_extend_ns"] + cyc["host_between_ns"]
    assert parts.equals(cyc["cycle_ns"], check_names=False)
    assert cyc.get_column("accept_len").null_count() == 0
    assert set(cyc.get_column("graphed").to_list()) == {True, False}  # --verify-graph mixed
    table, ctx = spec_report(run.events, target_tps=150.0)
    row = table.row(0, named=True)
    assert row["tokens_per_cycle"] == pytest.approx(row["accept_len"] + 1)
    assert row["draft_tokens"] == 3
    assert ctx["decode_source"].startswith("this run:")


def test_real_diff_with_itself_is_zero(run: Run) -> None:
    view = diff_runs(run.events, run.events, None)
    assert {"verify", "draft", "draft_extend", "decode"} <= set(view["phases"].get_column("phase").to_list())
    deltas = view["buckets"].get_column("delta_ns").drop_nulls().to_list()
    deltas += view["kernels"].get_column("delta_per_instance_ns").to_list()
    deltas += view["phases"].get_column("delta_ns").to_list()
    assert deltas and all(d == 0 for d in deltas)
    v = view["phases"].filter(pl.col("phase") == "verify").row(0, named=True)
    assert v["old_graphed_share"] == 0.5
    assert v["old_graph_launches_per_instance"] > 0 and v["old_eager_launches_per_instance"] > 0


BUILTIN = SAMPLE.parent.parent / "h200x2-builtin"


def test_real_diff_graphed_vs_eager_verify() -> None:
    """The collectors' 2-rank H200 captures: verify from a CUDA graph vs eager (SGLang's fallback)."""
    from tracekit.analyzers.manifest_diff import manifest_diff
    from tracekit.analyzers.reports import DiffReport
    from tracekit.render.diff import explanation

    old, new = load_run(BUILTIN / "graphed.parquet"), load_run(BUILTIN / "eager.parquet")
    view = diff_runs(old.events, new.events, "verify")
    ph = view["phases"].row(0, named=True)
    assert ph["old_graphed_share"] == 1.0 and ph["new_graphed_share"] == 0.0
    assert ph["statistic"] == "median" and ph["matched_new_share"] == 1.0
    # with means, a run whose instances all sit in matched buckets has no mix shift (an identity
    # of weighted means; medians of buckets do not average to the overall median)
    means = diff_runs(old.events, new.events, "verify", stat="mean").get("phases").row(0, named=True)
    assert means["mix_shift_ns"] == pytest.approx(0.0, abs=1.0)
    assert ph["new_eager_launches_per_instance"] > 100 * ph["old_eager_launches_per_instance"]
    b = view["buckets"].filter(~pl.col("bucket").is_in(["allreduce_wait", "allreduce_transfer", "queue_delay", "overlapped_comm"]))
    top = b.sort("delta_ns", descending=True).row(0, named=True)
    assert top["bucket"] == "launch_overhead" and top["delta_ns"] > 0.5 * ph["delta_ns"]
    md = manifest_diff(old.manifest, new.manifest)
    assert md.filter(pl.col("key") == "workload.config.verify_graph").height == 2  # both ranks
    lines = explanation(DiffReport.from_view(view, md))
    assert "launch overhead" in lines[2]
    assert any("workload.config.verify_graph changed on -> off (ranks 0-1)" in x for x in lines)


def test_real_segments_split_by_the_walks_launch_gap_rule(run: Run) -> None:
    """Every straggler segment of the real 2 x H200 run splits exactly as the plain-loop reference
    of the walk's rule (launch end + latency, partial gaps); the old whole-gap definition gives
    other numbers on this run, so a return to it fails here."""
    from straggler_reference import reference_segments

    ev = run.events
    m = matched_collectives(ev)
    seg = segments(ev, m, 20_000)
    want = reference_segments(ev, m, 20_000)
    assert seg.height == len(want) == 2 * 415
    got = {(r["key"], r["rank"]): (r["busy_ns"], r["launch_gap_ns"], r["other_idle_ns"])
           for r in seg.iter_rows(named=True)}
    assert got == {k: (w.busy, w.launch, w.other_idle) for k, w in want.items()}
    new_total = sum(w.launch for w in want.values())
    old_total = sum(w.old_launch for w in want.values())
    assert new_total > 0 and new_total != old_total
    # partial gaps: segments whose launch gaps are neither zero nor every idle ns
    assert any(0 < w.launch < w.launch + w.other_idle for w in want.values())


def test_real_attribute_straggler_is_the_ranks_analysis() -> None:
    """attribute's straggler line and tracekit ranks come from one analysis: per phase, the
    straggler's numbers are the ranks view's late arrivals of that phase, summed."""
    from tracekit.analyzers.attribution import attribute_report

    ev = load_run(SAMPLE.parent.parent / "h200x2-mainjob" / "eager.parquet").events
    rep = attribute_report(ev)["stragglers"]
    late = stragglers(ev)["late"]
    assert rep.height > 0
    for s in rep.iter_rows(named=True):
        mine = late.filter((pl.col("phase") == s["phase"]) & (pl.col("rank") == s["last_rank"]))
        assert s["last_count"] == mine.height
        assert s["inflicted_wait_ns"] == mine.get_column("others_wait_ns").sum()
        assert s["late_margin_ns"] == mine.get_column("margin_ns").sum()
        assert s["launch_gap_ns_excess"] == pytest.approx(mine.get_column("launch_gap_ns_excess").sum(), abs=1e-6)
        others = late.filter((pl.col("phase") == s["phase"]) & (pl.col("rank") != s["last_rank"]))
        assert others.get_column("others_wait_ns").sum() <= s["inflicted_wait_ns"]
