"""Re-finalize a lite capture made before capture remapped Kineto's thread keys (samples/h200-lite/README.md).

    python samples/h200-lite/refinalize.py CAPTURED.parquet OUT.parquet

The lite captures in this folder were made by a tracekit that stored CUDA-only launches under
Kineto's raw thread key (not the native thread id the hooks' phase ranges carry), so no launch
joined a phase. This applies what capture does now (``collectors.ranges.lite_thread_map`` with
no recorded keys: the one-to-one inference, one launching thread and one range thread), then
``finalize_events`` again. No event is added, removed or re-timed; the manifest gains
``ranks[r].session.thread_map`` saying what was rewritten.
"""

from __future__ import annotations

import sys

import polars as pl

from tracekit.collectors.ranges import lite_thread_map, remap_threads
from tracekit.finalize.pipeline import finalize_events, stamp
from tracekit.schema import RANGE
from tracekit.store import load_run, write_run


def main() -> int:
    src, dst = sys.argv[1], sys.argv[2]
    run = load_run(src)
    ev = run.events
    man = run.manifest
    out = []
    for rank in sorted(ev.get_column("rank").unique().to_list()):
        mine = ev.filter(pl.col("rank") == rank)
        hooks = (pl.col("kind") == RANGE) & pl.col("name").str.starts_with("tracekit:")
        mapping, how = lite_thread_map(mine.filter(~hooks), mine.filter(hooks), {})
        out.append(remap_threads(mine, mapping))
        man["ranks"][str(rank)]["session"]["thread_map"] = f"{how} (samples/h200-lite/refinalize.py)"
        print(f"rank {rank}: {how}")
    fixed = pl.concat(out).drop("phase", "phase_id").with_columns(
        pl.when(pl.col("kind") == RANGE).then(pl.col("cycle")).otherwise(None).alias("cycle"))
    write_run(finalize_events(fixed), dst, stamp(man))
    return 0


if __name__ == "__main__":
    sys.exit(main())
