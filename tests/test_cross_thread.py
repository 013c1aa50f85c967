"""The cross-thread membership rule on a real H200 capture (samples/h200-cross-thread).

One thread holds the phase ranges, another launches every kernel (eager layers in
``verify``, a CUDA graph replay in ``draft``, a stray kernel with no range open). The
ground truth is the capture script's own record (``truth.json``: each job's kind, cycle and
``time.time_ns`` window on the worker thread), independent of the membership code: every
kernel whose launch call starts inside a job's window belongs to that job's phase and cycle
(the stray ones to none).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from tracekit.analyzers.attribution import attribute_instances, prepare
from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200-cross-thread"


def test_every_kernel_joins_the_range_open_on_the_other_thread() -> None:
    truth = json.loads((SAMPLE / "truth.json").read_text())
    run = load_run(SAMPLE / "run.parquet")  # upgraded once (tracekit upgrade): finalize version 2
    assert run.outdated is None
    ev = run.events
    launches = ev.filter(pl.col("kind") == "launch").select("correlation", pl.col("start_ns").alias("l_start"),
                                                           pl.col("tid").alias("l_tid"))
    k = ev.filter(pl.col("kind") == "kernel").join(launches, on="correlation", how="left")
    assert k.height == 402 and k.get_column("l_start").null_count() == 0
    ranges = ev.filter(pl.col("kind") == "range")
    assert set(ranges.get_column("tid").to_list()) == {truth["threads"]["main"]}
    assert truth["threads"]["main"] not in set(k.get_column("l_tid").to_list())  # no kernel launched by it
    jobs = truth["jobs"]
    checked = {"eager": 0, "graph": 0, "stray": 0}
    for phase, cycle, t in k.select("phase", "cycle", "l_start").iter_rows():
        (job,) = [j for j in jobs if j["start_unix_ns"] <= t <= j["end_unix_ns"]]
        assert phase == job["phase"], (t, job)
        assert (cycle if phase is not None else None) == (job["cycle"] if job["phase"] is not None else None)
        checked[job["kind"]] += 1
    assert checked["eager"] > 0 and checked["graph"] > 0 and checked["stray"] > 0
    inst = attribute_instances(prepare(ev)[0])
    assert inst.height == 12 and (inst.get_column("cross_thread_events") == inst.get_column("gpu_events")).all()
    assert inst.get_column("gpu_events").sum() == checked["eager"] + checked["graph"]
    assert (inst.filter(pl.col("phase") == "draft").get_column("graph_launches") == 1).all()
