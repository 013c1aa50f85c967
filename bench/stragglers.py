"""CPU cost of the straggler analysis (``tracekit ranks``) and of attribute's straggler line.

Measures CPU seconds of this process (``time.process_time``: all its threads; best of
``--repeat``) on the replicated synthetic run of bench/forensics.py, each as a ratio to a plain
polars ``group_by(rank, name).agg(sum(dur_ns))`` over the same table measured in the same run.
``--against REV`` also loads ``analyzers/stragglers.py`` and ``analyzers/attribution_views.py``
as they were at git revision REV and times them on the same table (before / after a change).

    python bench/stragglers.py [--ranks 8] [--cycles 50] [--copies 8] [--repeat 7] [--against REV]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from forensic_frames import Spec, build  # noqa: E402
from forensics import replicate, timed  # noqa: E402
from modload import load_path  # noqa: E402

from tracekit.analyzers import attribution_views, stragglers  # noqa: E402
from tracekit.analyzers.attribution import attribute_instances, matched, prepare  # noqa: E402


def at_revision(rev: str, path: str, name: str, tmp: Path) -> ModuleType:
    """``path`` as it was at ``rev``, loaded as module ``name`` inside tracekit.analyzers."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True).stdout
    f = tmp / Path(path).name
    f.write_text(src)
    return load_path(f"tracekit.analyzers.{name}", f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=50)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--against", default=None, metavar="REV", help="also time the two modules as they were at REV")
    args = ap.parse_args()
    ev = replicate(build(Spec(ranks=args.ranks, cycles=args.cycles)), args.copies)
    ev, phases = prepare(ev)
    coll = matched(ev)
    inst = attribute_instances(ev, phases, collectives=coll)
    print(f"table: {ev.height:,} events on {args.ranks} ranks; load average {os.getloadavg()}")
    ref = timed(lambda: ev.group_by("rank", "name").agg(pl.col("dur_ns").sum()), args.repeat, time.process_time)
    print(f"reference group_by(rank, name).sum(dur): {ref * 1e3:8.1f} ms CPU")
    rows: list[tuple[str, Callable[[], Any]]] = [
        ("ranks: stragglers(events)", lambda: stragglers.stragglers(ev)),
        ("attribute: stragglers(events, instances)", lambda: attribution_views.stragglers(ev, inst, collectives=coll)),
        ("attribute: attribute_instances (the walk)", lambda: attribute_instances(ev, phases, collectives=coll)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        if args.against:
            old_s = at_revision(args.against, "analyzers/stragglers.py", "_old_stragglers", Path(tmp))
            old_v = at_revision(args.against, "analyzers/attribution_views.py", "_old_views", Path(tmp))
            rows += [
                (f"ranks: stragglers(events) at {args.against}", lambda: old_s.stragglers(ev)),
                (f"attribute: stragglers(events, instances) at {args.against}",
                 lambda: old_v.stragglers(ev, inst, collectives=coll)),
            ]
        for name, fn in rows:
            t = timed(fn, args.repeat, time.process_time)
            print(f"{name:<58}: {t * 1e3:8.1f} ms CPU ({t / ref:5.1f}x the reference)")
    print(f"load average at the end {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
