"""Attribution end to end: membership + collectives + walk + views + CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from kineto_synth import gpu_rank

from tracekit.analyzers import analyses
from tracekit.analyzers.attribution import (
    BUCKET_COLUMNS,
    attribute_instances,
    attribute_report,
    by_rank,
    by_seq,
    check_sums,
    prepare,
)
from tracekit.analyzers.buckets import BUCKETS
from tracekit.cli import cli
from tracekit.errors import AnalysisError
from tracekit.finalize import finalize_events
from tracekit.finalize.phases import format_label
from tracekit.ingest import ingest_traces
from tracekit.render import attribute as render_attribute
from tracekit.render import attribute_json
from tracekit.schema import conform
from tracekit.store import new_manifest, write_run

AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def rng(name: str, start: int, dur: int, rank: int = 0, tid: int = 1) -> dict[str, Any]:
    return dict(rank=rank, kind="range", name=name, pid=1, tid=tid, start_ns=start, dur_ns=dur)


def kl(name: str, cat: str | None, launch_end: int, start: int, dur: int, corr: int, *, rank: int = 0,
       stream: int = 7, api: str = "cudaLaunchKernel", graph: bool = False) -> list[dict[str, Any]]:
    """A launch row ending at launch_end and its kernel."""
    return [
        dict(rank=rank, kind="launch", name=api, pid=1, tid=1, start_ns=launch_end - 3, dur_ns=3, correlation=corr, graph=graph),
        dict(rank=rank, kind="kernel", name=name, category=cat, device=rank, stream=stream, start_ns=start, dur_ns=dur,
             correlation=corr, graph=graph),
    ]


def instances(rows: list[dict[str, Any]], phase: str | None = None, **kw: Any) -> pl.DataFrame:
    ev, phases = prepare(finalize_events(conform(pl.DataFrame(rows))), phase)
    inst = attribute_instances(ev, phases, **kw)
    check_sums(inst)
    return inst


def one(inst: pl.DataFrame, **where: Any) -> dict[str, Any]:
    df = inst
    for k, v in where.items():
        df = df.filter(pl.col(k) == v)
    assert df.height == 1, df
    return df.row(0, named=True)


def test_launch_bound_eager_phase() -> None:
    rows = [rng(format_label("verify", cycle=0, bs=1, tok=4), 0, 10_000)]
    rows += kl("nvjet_a", "gemm", 100, 105, 50, 1)          # host issues each kernel after the last ended
    rows += kl("fa3", "attention", 400, 404, 100, 2)
    rows += kl("nvjet_b", "gemm", 120, 600, 100, 3)         # issued long before: the 504-600 gap is a dependency
    r = one(instances(rows, launch_latency_ns=10), phase="verify")
    assert r["gpu_window_ns"] == 700 - 105
    assert r["gemm_ns"] == 150 and r["attention_ns"] == 100
    assert r["launch_overhead_ns"] == (404 - 155) and r["idle_ns"] == (600 - 504)
    assert r["launches"] == 3 and r["eager_launches"] == 3 and r["graph_launches"] == 0
    assert r["graphed"] is False and r["num_tokens"] == 4


def test_graph_replay_membership_and_idle_inside_the_graph() -> None:
    rows = [rng(format_label("decode", cycle=0), 0, 50)]
    rows.append(dict(rank=0, kind="launch", name="cudaGraphLaunch", pid=1, tid=1, start_ns=10, dur_ns=10, correlation=9, graph=True))
    for i, (name, cat) in enumerate([("nvjet", "gemm"), ("fa3_decode", "attention"), ("cross_device_reduce_1stage", None)]):
        rows.append(dict(rank=0, kind="kernel", name=name, category=cat, device=0, stream=7, start_ns=100 + 100 * i, dur_ns=60, correlation=9, graph=True))
    r = one(instances(rows, launch_latency_ns=0), phase="decode")
    assert r["gpu_events"] == 3 and r["gpu_window_ns"] == 260
    assert r["gemm_ns"] == 60 and r["attention_ns"] == 60 and r["allreduce_ns"] == 60
    assert r["idle_ns"] == 80 and r["launch_overhead_ns"] == 0
    assert r["graphed"] is True and r["graph_launches"] == 1 and r["eager_launches"] == 0


def test_queue_delay_is_reported_not_added() -> None:
    rows = [rng(format_label("draft", cycle=0), 0, 100), rng(format_label("verify", cycle=0), 100, 100)]
    rows += kl("draft_gemm", "gemm", 10, 20, 480, 1)         # draft's kernel runs until 500
    rows += kl("verify_attn", "attention", 150, 500, 50, 2)  # verify's host range opened at 100
    inst = instances(rows)
    v = one(inst, phase="verify")
    assert v["queue_delay_ns"] == 400 and v["gpu_window_ns"] == 50 and v["attention_ns"] == 50
    d = one(inst, phase="draft")
    assert d["queue_delay_ns"] == 0 and d["between_ns"] == 0


def test_between_is_gpu_time_between_consecutive_instances() -> None:
    rows = [rng(format_label("draft", cycle=0), 0, 100), rng(format_label("verify", cycle=0), 1000, 100)]
    rows += kl("g", "gemm", 10, 20, 80, 1) + kl("a", "attention", 1010, 1020, 80, 2)
    inst = instances(rows)
    assert one(inst, phase="draft")["between_ns"] == 1020 - 100
    assert one(inst, phase="verify")["between_ns"] == 0  # last on the rank


def test_nested_phase_kernels_go_to_the_inner_phase() -> None:
    rows = [rng(format_label("verify", cycle=0), 0, 1000), rng(format_label("draft_extend", cycle=0), 500, 200)]
    rows += kl("g", "gemm", 10, 20, 80, 1) + kl("n", "norm", 510, 520, 30, 2)
    inst = instances(rows)
    assert one(inst, phase="verify")["gpu_events"] == 1 and one(inst, phase="verify")["norm_ns"] == 0
    assert one(inst, phase="draft_extend")["norm_ns"] == 30


def test_allreduce_wait_transfer_and_straggler() -> None:
    rows = []
    for rank, late in ((0, 0), (1, 3_000), (2, 500)):
        rows.append(rng(format_label("verify", cycle=0), 0, 20_000, rank=rank))
        rows += kl("g", "gemm", 10, 20, 1000 + late, 1, rank=rank)
        rows += kl(AR, None, 30, 1020 + late, 5_000 - late, 2, rank=rank, stream=20)
    ev, _phases = prepare(finalize_events(conform(pl.DataFrame(rows))))
    rep = attribute_report(ev)
    inst = rep["instances"]
    check_sums(inst)
    assert one(inst, rank=0)["allreduce_wait_ns"] == 3_000 and one(inst, rank=0)["allreduce_transfer_ns"] == 2_000
    assert one(inst, rank=1)["allreduce_wait_ns"] == 0 and one(inst, rank=1)["allreduce_kernel_ns"] == 2_000
    s = rep["stragglers"].row(0, named=True)
    assert s["last_rank"] == 1 and s["last_count"] == 1 and s["collectives"] == 1 and s["last_share"] == 1.0
    assert s["inflicted_wait_ns"] == 3_000 + 2_500  # the others' waits
    assert s["late_margin_ns"] == 3_000 - 500  # behind the next-latest rank
    assert s["busy_ns_excess"] is None  # its first collective: no segment before it


def test_unmatched_collectives_are_reported_and_wait_left_unknown() -> None:
    rows = []
    for rank in (0, 1):
        rows.append(rng(format_label("verify", cycle=0), 0, 20_000, rank=rank))
        rows += kl(AR, None, 30, 100, 500, 2, rank=rank, stream=20)
    rows += kl(AR, None, 1000, 1100, 500, 3, rank=0, stream=20)  # rank 0 has one more
    ev = finalize_events(conform(pl.DataFrame(rows)))
    rep = attribute_report(ev)
    assert rep["instances"].get_column("allreduce_wait_ns").null_count() == 2
    assert "count differs" in rep["issues"].get_column("issue")[0]
    item = attribute_json.to_json(analyses.attribute(ev, {}), "rank")["phases"][0]
    assert item["allreduce"]["wait_ns"] is None


def test_raw_sglang_spans_and_regex_phases() -> None:
    rows = [rng("step[TARGET_VERIFY bs=4]", 0, 1000), rng("my_forward", 2000, 1000)]
    rows += kl("g", "gemm", 10, 20, 80, 1) + kl("a", "attention", 2010, 2020, 80, 2)
    r = one(instances(rows), phase="verify")
    assert r["batch_size"] == 4 and r["gemm_ns"] == 80
    r = one(instances(rows, phase="my_.*"), phase="my_.*")
    assert r["attention_ns"] == 80
    r = one(instances(rows, phase="ver.*"), phase="verify")
    with pytest.raises(AnalysisError, match="no phase or range name matches"):
        instances(rows, phase="nothing_like_this")


def test_views_by_rank_and_seq() -> None:
    rows = []
    for c, seq in enumerate((100, 900, 1000)):
        rows.append(rng(format_label("verify", cycle=c, seq=seq, tok=8), c * 1000, 500))
        rows += kl("g", "gemm", c * 1000 + 10, c * 1000 + 20, 100 * (c + 1), c)
    inst = instances(rows)
    br = by_rank(inst).row(0, named=True)
    assert br["instances"] == 3 and br["gemm_ns"] == 600 and br["tokens"] == 24
    assert br["gpu_window_ns"] == sum(br[c] for c in BUCKET_COLUMNS)
    bs = by_seq(inst)
    assert bs.select("seq_lo", "seq_hi", "instances").rows() == [(64, 128, 1), (512, 1024, 2)]


def test_render_buckets_match_analyzer_buckets() -> None:
    assert tuple(render_attribute.BUCKETS) == tuple(BUCKETS)


def test_no_phases_is_attributed_as_a_whole_trace() -> None:
    rep = attribute_report(finalize_events(conform(pl.DataFrame(kl("g", "gemm", 10, 20, 80, 1)))))
    inst = rep["instances"].row(0, named=True)
    assert rep["whole_trace"].item() and inst["phase"] == "trace" and inst["gpu_window_ns"] == 80
    assert inst["gemm_ns"] == 80
    with pytest.raises(AnalysisError, match="no phase ranges"):  # nothing to attribute at all
        attribute_report(conform(pl.DataFrame({"kind": ["op"], "name": ["aten::mm"], "rank": [0], "start_ns": [0],
                                               "dur_ns": [5]})))


@pytest.fixture
def kineto_run(tmp_path: Path) -> Path:
    """Two ranks of hand-built Kineto JSON (rank 1 runs 5 µs late), ingested like any trace."""
    gpu_rank(0).write(tmp_path / "r0.json")
    gpu_rank(1, skew=5_000).write(tmp_path / "r1.json")
    run = ingest_traces([tmp_path / "r0.json", tmp_path / "r1.json"])
    return write_run(run.events, tmp_path / "run.parquet", run.manifest or new_manifest())


def test_kineto_verify_instance_by_hand(kineto_run: Path) -> None:
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run), "--by", "cycle", "--json", "--launch-latency-us", "0"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    cyc = {(c["phase"], c["rank"]): c for c in doc["cycles"]}
    v = cyc[("verify", 0)]
    # kernels (relative to the range start): gemm 10-25 µs, attention 40-61, allreduce 80-113,
    # moe 130-180 overlapping act_and_mul 170-190, memcpy 210-214; launch calls end 3 µs after they start
    assert v["gpu_window_ns"] == 204_000
    b = v["buckets_ns"]
    assert b["gemm"] == 15_000 and b["attention"] == 21_000 and b["allreduce"] == 33_000 and b["memory"] == 4_000
    assert b["launch_overhead"] == 8_000 + 12_000 + 10_000 + 13_000
    assert b["idle"] == 4 * 7_000
    assert sum(b.values()) == v["gpu_window_ns"]
    assert b["moe"] + b["elementwise"] + b["other"] == 60_000  # whichever category act_and_mul has
    assert v["eager_launches"] == 6 and v["graph_launches"] == 0 and v["graphed"] is False
    assert v["allreduce_wait_ns"] == 5_000 and v["allreduce_transfer_ns"] == 28_000
    d = cyc[("decode", 0)]
    assert d["gpu_window_ns"] == 35_000 and d["graphed"] is True and d["graph_launches"] == 1
    assert d["buckets_ns"]["idle"] == 5_000 and d["buckets_ns"]["allreduce"] == 18_000
    assert d["buckets_ns"]["launch_overhead"] == 0
    assert doc["stragglers"][0]["last_rank"] == 1


def test_cli_json_keys_and_errors(kineto_run: Path) -> None:
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert "cycles" not in doc
    need = {"phase", "rank", "instances", "host_ns", "gpu_window_ns", "buckets_ns", "queue_delay_ns",
            "overlapped_comm_ns", "launches", "graphed_instances"}
    assert {(p["phase"], p["rank"]) for p in doc["phases"]} == {("verify", 0), ("verify", 1), ("decode", 0), ("decode", 1)}
    for p in doc["phases"]:
        assert need <= set(p)
        assert sum(p["buckets_ns"].values()) == p["gpu_window_ns"]
        assert list(p["buckets_ns"]) == list(BUCKETS)
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run), "--phase", "verify", "--rank", "1"])
    assert res.exit_code == 0 and "verify" in res.output and "decode:" not in res.output
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run), "--rank", "7"])
    assert res.exit_code == 1 and "rank 7" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run), "--by", "nonsense"])
    assert res.exit_code == 2
    res = CliRunner().invoke(cli, ["attribute", str(kineto_run.parent / "missing.parquet")])
    assert res.exit_code == 1 and "missing.parquet" in res.output


def test_phase_ids_repeated_across_ranks_are_renumbered() -> None:
    """Shards finalized one rank at a time (ids from 0 on each), then merged: the merge's
    unique_phase_ids (what load_run does for a shard directory) renumbers them."""
    from tracekit.finalize.membership import annotate_phases, unique_phase_ids

    shards = []
    for rank in (0, 1):
        rows = [rng(format_label("verify", cycle=0), 0, 1000, rank=rank)]
        rows += kl("g", "gemm", 10, 20, 100 * (rank + 1), 1, rank=rank)
        shards.append(annotate_phases(conform(pl.DataFrame(rows))))
    merged = pl.concat(shards)
    assert merged.filter(pl.col("kind") == "range").get_column("phase_id").to_list() == [0, 0]
    inst = attribute_report(unique_phase_ids(merged))["instances"].sort("rank")
    assert inst.get_column("phase_id").n_unique() == 2
    assert inst.get_column("gemm_ns").to_list() == [100, 200]


def test_sparse_correlation_ids_give_the_same_buckets() -> None:
    """Correlation ids far apart (no direct-address table) take the sorted lookup path."""
    def rows(base: int) -> list[dict[str, Any]]:
        r = [rng(format_label("verify", cycle=0), 0, 10_000)]
        r += kl("nvjet_a", "gemm", 100, 105, 50, base + 1)
        r += kl("fa3", "attention", 400, 404, 100, base + 2 * 10**13)
        r += kl("nvjet_b", "gemm", 120, 600, 100, base + 3 * 10**13)
        return r

    dense = one(instances(rows(0), launch_latency_ns=10), phase="verify")
    sparse = one(instances(rows(10**15), launch_latency_ns=10), phase="verify")
    keys = [c for c in dense if c.endswith("_ns") or c.endswith("launches")]
    assert {k: dense[k] for k in keys} == {k: sparse[k] for k in keys}
    assert sparse["launch_overhead_ns"] == 404 - 155
