"""Where the export's CPU goes: cProfile (CPU clock, polars' threads included) of each stage of
``export_run`` and of the two layout paths, on the synthetic run of ``bench/export.py`` or ``--run``.

Plain script (not a test); prints the load average, each stage's CPU seconds and, per layout
path, the functions with the most CPU of their own.

    python bench/export_profile.py                 # ~1M events, 8 ranks
    python bench/export_profile.py --run samples/x/run.parquet
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export import _Count, replicated
from export_synth import make_manifest

from tracekit.export import attribution_buckets
from tracekit.export.fastlayout import build_layout_fast
from tracekit.export.layout_reference import build_layout_reference
from tracekit.export.perfetto import write_perfetto
from tracekit.finalize.pipeline import finalize_events, stamp
from tracekit.store import load_run, write_run


def cpu(label: str, fn: Any) -> Any:
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    print(f"{label}: {time.process_time() - c:.2f} cpu-s ({time.perf_counter() - t:.2f} s wall)")
    return out


def profile(label: str, fn: Any, top: int) -> None:
    pr = cProfile.Profile(time.process_time)
    c = time.process_time()
    pr.enable()
    fn()
    pr.disable()
    print(f"\n== {label}: {time.process_time() - c:.2f} cpu-s under the profiler; functions by own CPU ==")
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    print(text[text.index("   ncalls"):].rstrip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--run", type=Path)
    ap.add_argument("--top", type=int, default=14)
    a = ap.parse_args()
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    if a.run:
        run_file = a.run
    else:
        run_file = Path("/tmp") / f"tracekit-export-profile-{os.getpid()}.parquet"
        write_run(finalize_events(replicated(a.ranks, a.events)), run_file, stamp(make_manifest(a.ranks)))
    try:
        r = cpu("read (load_run)", lambda: load_run(run_file))
        ev, man = r.events, r.manifest
        print(f"run: {ev.height} events")
        bk = cpu("attribution buckets (analyzers/attribution)", lambda: attribution_buckets(ev, []))
        lay = cpu("layout, compiled (first call in the process)", lambda: build_layout_fast(ev, man, buckets=bk))
        cpu("layout, compiled (again)", lambda: build_layout_fast(ev, man, buckets=bk))
        cpu("layout, reference", lambda: build_layout_reference(ev, man, buckets=bk))
        cpu("encode (tracekit._core)", lambda: write_perfetto(lay, _Count()))  # type: ignore[arg-type]
        profile("layout, reference (polars frames)", lambda: build_layout_reference(ev, man, buckets=bk), a.top)
        profile("layout, compiled (fastlayout)", lambda: build_layout_fast(ev, man, buckets=bk), a.top)
    finally:
        if not a.run:
            run_file.unlink(missing_ok=True)
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
