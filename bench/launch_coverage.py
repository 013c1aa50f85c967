"""How much of a foreign trace tracekit understands: kernels joined to their launch, and kernel
time no category rule matched.

    python bench/launch_coverage.py TRACE [TRACE ...]

Each argument is ingested alone (``ingest_traces`` + finalize, as ``tracekit ingest`` does). Per
input it prints, from the trace's own timestamps (profiled window, exact ns):

- GPU events (kernels, memcpy, memset) whose correlation id is that of a host API call in the
  same file (``runtime``, ``launch`` or ``sync`` rows: a HIP / CUDA call made them), and how many
  of those join a ``launch`` row (the target: all of them);
- GPU events that belong to a phase instance (``phase_id`` set) when the trace has phase ranges;
- the kernel time (sum of durations) by category and the share in ``other`` (the target: < 10%).

Used for issue 28 (ROCm traces): the figures before and after are in bench/results/.
"""

from __future__ import annotations

import sys

import polars as pl

from tracekit import schema
from tracekit.ingest import ingest_traces


def coverage(path: str) -> list[str]:
    ev = ingest_traces([path]).events
    kind = pl.col("kind").cast(pl.String)
    gpu = ev.filter(kind.is_in(list(schema.GPU_KINDS)) & pl.col("correlation").is_not_null())
    host = ev.filter(kind.is_in([schema.RUNTIME, schema.LAUNCH, schema.SYNC]) & pl.col("correlation").is_not_null())
    launches = host.filter(kind == schema.LAUNCH).select("rank", "correlation").unique()
    called = gpu.join(host.select("rank", "correlation").unique(), on=["rank", "correlation"], how="semi")
    joined = called.join(launches, on=["rank", "correlation"], how="semi")
    k = ev.filter(kind == schema.KERNEL)
    total = int(k.get_column("dur_ns").sum() or 0)
    by_cat = (k.group_by(pl.col("category").cast(pl.String)).agg(pl.col("dur_ns").sum())
              .sort("dur_ns", descending=True))
    other = int(by_cat.filter(pl.col("category") == "other").get_column("dur_ns").sum() or 0)
    lines = [f"{path}:",
             f"  GPU events {gpu.height:,}; made by a host API call in the trace {called.height:,}; "
             f"joined to a launch {joined.height:,} ({100 * joined.height / max(called.height, 1):.1f}%)",
             f"  launch rows {ev.filter(kind == schema.LAUNCH).height:,} "
             f"(graph launches {ev.filter((kind == schema.LAUNCH) & pl.col('graph').fill_null(False)).height:,})"]
    if "phase_id" in ev.columns:
        ph = gpu.filter(pl.col("phase_id").is_not_null()).height
        lines.append(f"  GPU events in a phase instance {ph:,} of {gpu.height:,}")
    lines.append(f"  kernel time (sum of durations, profiled window) {total:,} ns; in 'other' {other:,} ns "
                 f"({100 * other / max(total, 1):.1f}%)")
    for cat, ns in by_cat.iter_rows():
        lines.append(f"    {cat:<12} {ns:>14,} ns {100 * ns / max(total, 1):5.1f}%")
    return lines


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    for path in argv:
        print("\n".join(coverage(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
