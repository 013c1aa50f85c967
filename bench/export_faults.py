"""First-touch cost of export_run's stages in a fresh process: CPU (user, system), minor page faults and
peak RSS after each stage, then the layout and encoder once more in the same process (memory reused).

Plain script (not a test). The run: a file written by ``python bench/export.py --write-runs DIR``.

    python bench/export_faults.py /tmp/runs/synthetic.parquet
    python bench/export_faults.py --floor     # fresh memory alone: 50 numpy arrays of 8 MB
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

import numpy  # imported before the first stage, as the CLI has
import polars  # noqa: F401

from tracekit.export import attribution_buckets
from tracekit.export.layout import build_layout
from tracekit.export.perfetto import write_perfetto
from tracekit.store import load_run


class _Sink:
    def write(self, b: bytes) -> int:
        return len(b)


def stage(label: str, fn: Any) -> Any:
    a = resource.getrusage(resource.RUSAGE_SELF)
    c = time.process_time()
    out = fn()
    b = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{label}: cpu {time.process_time() - c:.3f} (user {b.ru_utime - a.ru_utime:.3f}, system {b.ru_stime - a.ru_stime:.3f}), "
          f"minor faults {b.ru_minflt - a.ru_minflt}, peak RSS {b.ru_maxrss // 1024} MB")
    return out


def main() -> int:
    run = sys.argv[1]
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if run == "--floor":  # the cost of fresh memory alone, in a process of its own
        stage("floor: 50 fresh numpy arrays of 1 M int64 (400 MB) touched once", lambda: [numpy.ones(1_000_000, numpy.int64) for _ in range(50)])
        return 0
    r = stage("read", lambda: load_run(run))
    bk = stage("buckets", lambda: attribution_buckets(r.events, []))
    lay = stage("layout", lambda: build_layout(r.events, r.manifest, buckets=bk))
    stage("encode", lambda: write_perfetto(lay, _Sink()))  # type: ignore[arg-type]
    lay = stage("layout, second call", lambda: build_layout(r.events, r.manifest, buckets=bk))
    stage("encode, second call", lambda: write_perfetto(lay, _Sink()))  # type: ignore[arg-type]
    print(f"{r.events.height} run events, {lay.n_slices} slices")
    return 0


if __name__ == "__main__":
    sys.exit(main())
