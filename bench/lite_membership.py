"""Do the hooks' own phase ranges (lite mode) collect the same launches as record_function ranges (full)?

    python bench/lite_membership.py FULL.parquet LITE.parquet

Two captures of the same deterministic workload. Per phase: launches and GPU
events per instance in each run (they must match: the workload issues the same
work every cycle), and the launches no phase claimed, with their distance to
the nearest phase range edge on their thread (a clock offset between
``time.time_ns`` and Kineto's host time stamps would show up as launches just
outside the ranges). Also the gap from each range's start to its first launch,
median per phase and run.
"""

from __future__ import annotations

import sys

import polars as pl


def summary(path: str) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    from tracekit.schema import GPU_KINDS, LAUNCH, RANGE
    from tracekit.store import read_run

    ev = read_run(path)
    ranges = ev.filter((pl.col("kind") == RANGE) & pl.col("phase_id").is_not_null())
    launches = ev.filter(pl.col("kind") == LAUNCH)
    gpu = ev.filter(pl.col("kind").is_in(list(GPU_KINDS)))
    n = ranges.group_by("phase").agg(pl.len().alias("instances"))
    per = (
        n.join(launches.group_by("phase").agg(pl.len().alias("launches")), on="phase", how="left")
        .join(gpu.group_by("phase").agg(pl.len().alias("gpu_events")), on="phase", how="left")
        .with_columns((pl.col("launches") / pl.col("instances")).alias("launches_per_inst"),
                      (pl.col("gpu_events") / pl.col("instances")).alias("gpu_per_inst"))
        .sort("phase")
    )
    first = (
        launches.filter(pl.col("phase_id").is_not_null())
        .group_by("phase_id").agg(pl.col("start_ns").min().alias("first_launch"))
        .join(ranges.select("phase_id", "phase", "start_ns"), on="phase_id")
        .group_by("phase").agg((pl.col("first_launch") - pl.col("start_ns")).median().alias("median_range_to_first_launch_ns"))
        .sort("phase")
    )
    w0, w1 = ranges["start_ns"].min(), (ranges["start_ns"] + ranges["dur_ns"]).max()
    stray = launches.filter(pl.col("phase").is_null() & pl.col("start_ns").is_between(w0, w1))
    edges = pl.concat([ranges.select("tid", pl.col("start_ns").alias("edge")),
                       ranges.select("tid", (pl.col("start_ns") + pl.col("dur_ns")).alias("edge"))]).sort("edge")
    if stray.height:
        stray = stray.sort("start_ns").join_asof(edges, left_on="start_ns", right_on="edge", by="tid",
                                                 strategy="nearest").with_columns(
            (pl.col("start_ns") - pl.col("edge")).alias("to_nearest_edge_ns"))
    return per, first, stray


def main() -> int:
    full, lite = sys.argv[1], sys.argv[2]
    for label, path in (("full", full), ("lite", lite)):
        per, first, stray = summary(path)
        print(f"== {label}: {path}")
        with pl.Config(tbl_rows=40, tbl_cols=12, tbl_width_chars=200):
            print(per)
            print(first)
            print(f"launches inside the phase window claimed by no phase: {stray.height}")
            if stray.height:
                print(stray.select("name", "tid", "start_ns", "to_nearest_edge_ns").head(20))
    return 0


if __name__ == "__main__":
    sys.exit(main())
