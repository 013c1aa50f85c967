"""Run diff: zero on itself, matched sequence length, bucket/kernel deltas, manifest diff."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from forensic_frames import Spec, build, manifest

from tracekit.analyzers.diff import diff_runs, nice_width
from tracekit.analyzers.manifest_diff import collapse, manifest_diff
from tracekit.analyzers.reports import DiffReport
from tracekit.cli import cli
from tracekit.errors import AnalysisError
from tracekit.finalize import finalize_events
from tracekit.finalize.membership import unique_phase_ids
from tracekit.render import diff as render_diff
from tracekit.store import write_run

LAYERS = 4


def _deltas(view: dict[str, pl.DataFrame]) -> list[float]:
    out: list[float] = []
    ph = view["phases"]
    for c in ("delta_ns", "matched_delta_ns", "mix_shift_ns", "fit_shift_ns"):
        out += ph.get_column(c).to_list()
    for c in ("delta_ns", "overall_delta_ns"):
        out += view["buckets"].get_column(c).to_list()
    for c in ("delta_per_instance_ns", "delta_count_per_instance", "delta_mean_ns"):
        out += view["kernels"].get_column(c).to_list()
    out += view["seq_buckets"].get_column("delta_ns").drop_nulls().to_list()
    return out


def test_diff_of_a_run_with_itself_is_exactly_zero() -> None:
    ev = build(Spec(ranks=3, cycles=8, seq_step=25, straggler=1))
    view = diff_runs(ev, ev, None)
    assert set(view["phases"].get_column("phase").to_list()) == {"draft", "draft_extend", "verify"}
    vals = _deltas(view)
    # exactly zero, not approximately; null only where undefined (draft ranges carry no seq facts,
    # so no fit there)
    assert len([v for v in vals if v is not None]) > 60
    assert all(v == 0 for v in vals if v is not None)
    assert view["phases"].filter(pl.col("phase") == "verify").get_column("fit_shift_ns").to_list() == [0.0]
    assert set(view["kernels"].get_column("status").to_list()) == {"both"}
    ph = view["phases"]
    assert (ph["old_mean_ns"] == ph["new_mean_ns"]).all()
    assert (ph["old_launches_per_instance"] == ph["new_launches_per_instance"]).all()
    man = manifest(3)
    assert manifest_diff(man, man).is_empty()
    lines = render_diff.explanation(DiffReport.from_view(view, manifest_diff(man, man)))
    assert "manifests: no difference" in lines[-1]


def test_matched_comparison_separates_seq_shift_from_real_change() -> None:
    s_old = Spec(ranks=2, cycles=10, seq0=200, seq_step=20, jitter_ns=0)
    s_new = Spec(ranks=2, cycles=10, seq0=300, seq_step=20, jitter_ns=0, moe_ns=150_000, extra_kernel="fresh_kernel")
    view = diff_runs(build(s_old), build(s_new))
    ph = view["phases"].row(0, named=True)
    assert ph["phase"] == "verify" and ph["overlap"] is True
    # the seq shift: +100 tokens x 100 ns/token x 4 layers of attention
    seq_effect = 100 * s_old.attn_ns_per_tok * LAYERS
    real = LAYERS * (30_000 + 7_000 + s_new.launch_gap_ns)  # slower MoE, new kernel, its launch gap
    assert ph["delta_ns"] == pytest.approx(seq_effect + real)
    assert ph["matched_delta_ns"] == pytest.approx(real)
    assert ph["mix_shift_ns"] == pytest.approx(seq_effect)
    assert ph["fit_slope_ns_per_token"] == pytest.approx(LAYERS * s_old.attn_ns_per_tok)
    assert ph["fit_shift_ns"] == pytest.approx(seq_effect)
    b = {r["bucket"]: r for r in view["buckets"].iter_rows(named=True)}
    assert b["moe"]["basis"] == "matched"
    assert b["moe"]["delta_ns"] == pytest.approx(LAYERS * 30_000)
    assert b["attention"]["delta_ns"] == pytest.approx(0)  # same length, same attention
    assert b["attention"]["overall_delta_ns"] == pytest.approx(seq_effect)
    assert b["elementwise"]["delta_ns"] == pytest.approx(LAYERS * 7_000)
    k = {r["family"]: r for r in view["kernels"].iter_rows(named=True)}
    assert k["fresh_kernel"]["status"] == "appeared"
    assert k["fresh_kernel"]["new_count_per_instance"] == LAYERS
    assert k["fused_moe_kernel"]["delta_mean_ns"] == pytest.approx(30_000)
    assert k["fused_moe_kernel"]["delta_count_per_instance"] == 0
    assert ph["new_launches_per_instance"] - ph["old_launches_per_instance"] == LAYERS
    lines = render_diff.explanation(DiffReport.from_view(view, pl.DataFrame(schema={"scope": pl.String, "section": pl.String, "key": pl.String, "status": pl.String, "old": pl.String, "new": pl.String})))
    assert "MoE" in lines[2]  # the biggest contribution ranks first


def test_runs_that_do_not_overlap_in_seq_len() -> None:
    old = build(Spec(ranks=2, cycles=8, seq0=150, seq_step=20, jitter_ns=0))
    new = build(Spec(ranks=2, cycles=8, seq0=2000, seq_step=20, jitter_ns=0))
    view = diff_runs(old, new, seq_width=50)
    ph = view["phases"].row(0, named=True)
    assert ph["overlap"] is False and ph["matched_buckets"] == 0
    assert ph["matched_delta_ns"] is None and ph["mix_shift_ns"] is None
    # nothing else changed: the whole difference is the seq-len shift, and the fit says so
    assert ph["fit_shift_ns"] == pytest.approx(ph["delta_ns"])
    assert ph["extrapolated"] is True
    assert view["buckets"].get_column("basis").unique().to_list() == ["overall"]
    text = "\n".join(render_diff.explanation(DiffReport.from_view(view, manifest_diff({}, {}))))
    assert "DO NOT OVERLAP" in text


def test_graph_change_and_unknown_seq_len() -> None:
    old = build(Spec(ranks=2, cycles=4, graphed=True))
    new = build(Spec(ranks=2, cycles=4, graphed=False))
    for ev in (old, new):
        assert ev.filter(pl.col("phase") == "verify").height
    strip = pl.lit(None, dtype=pl.Int64).alias("seq_len")
    view = diff_runs(old.with_columns(strip), new.with_columns(strip))
    ph = view["phases"].row(0, named=True)
    assert ph["old_graphed_share"] == 1.0 and ph["new_graphed_share"] == 0.0
    assert ph["old_seq_mean"] is None and ph["matched_buckets"] == 1  # matched on batch size alone
    text = "\n".join(render_diff.explanation(DiffReport.from_view(view, manifest_diff({}, {}))))
    assert "sequence length unknown" in text


def test_phase_ids_colliding_across_ranks_are_renumbered() -> None:
    # per-rank shards finalized one by one number their instances from 0 on every rank; the
    # merge (tracekit.store.load_run of a shard directory) makes them unique
    ev = build(Spec(ranks=2, cycles=4, seq_step=30))
    shards = pl.concat([finalize_events(ev.filter(pl.col("rank") == r)) for r in (0, 1)])
    assert shards.filter(pl.col("kind") == "range").group_by("phase_id").agg(pl.col("rank").n_unique()).get_column("rank").max() == 2
    merged = unique_phase_ids(shards)
    a = diff_runs(ev, ev)
    b = diff_runs(merged, ev)
    assert b["phases"].get_column("old_instances").to_list() == [8]
    assert b["phases"].get_column("old_mean_ns").to_list() == a["phases"].get_column("old_mean_ns").to_list()
    assert all(v == 0 for v in b["buckets"].get_column("delta_ns").to_list())
    from tracekit.analyzers.spec import cycles

    assert cycles(merged).equals(cycles(ev))


def test_phase_in_one_run_only_is_named() -> None:
    old = build(Spec(ranks=1, cycles=3, decode_steps=3))
    new = build(Spec(ranks=1, cycles=3))
    view = diff_runs(old, new, None)
    assert view["phases"].get_column("phase").to_list() == ["draft", "draft_extend", "verify"]
    pres = {r["phase"]: (r["in_old"], r["in_new"]) for r in view["presence"].iter_rows(named=True)}
    assert pres["decode"] == (True, False)
    text = render_diff.explanation(DiffReport.from_view(view, manifest_diff({}, {})))
    assert "not in the new run (not compared): decode" in text


def test_missing_phase_names_the_run() -> None:
    ev = build(Spec(ranks=1, cycles=2))
    with pytest.raises(AnalysisError, match=r"^no phase or range name matches 'decode'") as old:
        diff_runs(ev, ev, "decode")
    assert old.value.side == "A"
    dec = build(Spec(ranks=1, cycles=0, decode_steps=3))
    with pytest.raises(AnalysisError) as new:
        diff_runs(ev, dec, "verify")
    assert new.value.side == "B" and "new run" not in str(new.value)


def test_manifest_diff_rank_by_rank() -> None:
    old = manifest(4)
    new = manifest(4, **{str(r): {"env": {"CUDA_VISIBLE_DEVICES": "0,1"}, "pid": 99} for r in range(3)})
    new["ranks"]["2"]["gpu"] = dict(new["ranks"]["2"]["gpu"], sm_clock_mhz=1410, throttle_reasons=["hw_slowdown"], pcie_gen=4)
    new["ranks"]["1"]["versions"] = dict(new["ranks"]["1"]["versions"], nccl="2.27.3")
    new["ranks"]["4"] = dict(new["ranks"]["0"])
    new["world_size"] = 5
    new["launcher"] = {"env": {"NCCL_PROTO": "Simple"}}
    d = manifest_diff(old, new)
    got = {(r["scope"], r["key"], r["status"]) for r in d.iter_rows(named=True)}
    assert got == {
        ("0", "env.NCCL_PROTO", "only_old"),
        ("1", "env.NCCL_PROTO", "only_old"),
        ("2", "env.NCCL_PROTO", "only_old"),
        ("1", "versions.nccl", "changed"),
        ("2", "gpu.sm_clock_mhz", "changed"),
        ("2", "gpu.throttle_reasons", "changed"),
        ("2", "gpu.pcie_gen", "changed"),
        ("4", "rank", "only_new"),
        ("run", "world_size", "changed"),
        ("launcher", "env.NCCL_PROTO", "changed"),
    }  # pid differs too but is volatile
    sections = d.get_column("section").to_list()
    assert sections[0] == "rank" and sections[1] == "env"
    c = collapse(d)
    proto = c.filter((pl.col("key") == "env.NCCL_PROTO") & (pl.col("status") == "only_old")).row(0, named=True)
    assert proto["scopes"] == ["0", "1", "2"]
    lines = render_diff.manifest_lines(c)
    assert "env: env.NCCL_PROTO = LL in the old run, absent in the new (ranks 0-2)" in lines
    assert render_diff.ranks_text(["2", "0", "1"]) == "ranks 0-2"
    assert "rank 4: present only in the new run" in lines


def test_nice_width() -> None:
    assert nice_width(0, 800) == 100
    assert nice_width(150, 300) == 20
    assert nice_width(5, 5) == 1


def test_cli_diff(tmp_path: Path) -> None:
    a, b = tmp_path / "old.parquet", tmp_path / "new.parquet"
    write_run(build(Spec(ranks=2, cycles=6)), a, manifest(2))
    write_run(build(Spec(ranks=2, cycles=6, moe_ns=140_000)), b, manifest(2, **{"1": {"env": {}}}))
    res = CliRunner().invoke(cli, ["diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert {"phases", "buckets", "kernels", "manifest_diff"} <= set(doc)
    assert set(doc["buckets"]["moe"]) >= {"old_ns", "new_ns", "delta_ns"}
    assert doc["buckets"]["moe"]["delta_ns"] == pytest.approx(LAYERS * 20_000, rel=0.02)
    assert doc["manifest_diff"][0]["key"] == "env.CUDA_VISIBLE_DEVICES"
    same = CliRunner().invoke(cli, ["diff", str(a), str(a), "--json"])
    d0 = json.loads(same.output)
    assert all(v["delta_ns"] == 0 for v in d0["buckets"].values()) and d0["manifest_diff"] == []
    txt = CliRunner().invoke(cli, ["diff", str(a), str(b)])
    assert txt.exit_code == 0 and "moe" in txt.output
    bad = CliRunner().invoke(cli, ["diff", str(a), str(b), "--phase", "decode"])
    assert bad.exit_code == 1 and str(a) in bad.output and "Traceback" not in bad.output


def test_seed_story(tmp_path: Path) -> None:
    """The seed: old log at positions ~150-300, new run at long context; NCCL variables set in
    the launcher but absent from the new run's rank processes. diff must say both."""
    a, b = tmp_path / "old.parquet", tmp_path / "new.parquet"
    write_run(build(Spec(ranks=2, cycles=8, seq0=150, seq_step=20)), a, manifest(2))
    new_man = manifest(2, **{str(r): {"env": {"CUDA_VISIBLE_DEVICES": "0,1"}} for r in range(2)})
    write_run(build(Spec(ranks=2, cycles=8, seq0=2400, seq_step=20)), b, new_man)
    res = CliRunner().invoke(cli, ["diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    ph = doc["phases"][0]
    assert ph["overlap"] is False and ph["matched_delta_ns"] is None
    text = "\n".join(doc["explanation"])
    assert "DO NOT OVERLAP" in text and "cannot say what a shift" in text
    assert "env: env.NCCL_PROTO = LL in the old run, absent in the new (ranks 0-1)" in text
    # attention is where the new run's time went (the only thing that scales with length)
    assert doc["buckets"]["attention"]["delta_ns"] == pytest.approx(LAYERS * 100 * (2400 - 150), rel=0.01)
    assert doc["explanation"][2].startswith("  1. +") and "attention" in doc["explanation"][2]
