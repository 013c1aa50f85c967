"""The first export layout call of a fresh process, this checkout against another (``--base``), alternating.

Plain script (not a test). Per run and tree: the median and best CPU seconds (user + system) of the first
``build_layout`` call in a fresh process (after ``load_run`` and the attribution buckets, as ``export_run``
calls it), with its system seconds and minor page faults; then numpy's peak memory during that call
(tracemalloc, in one more process per tree, whose CPU is not counted); and the share of the run's rows
that have each string arg column (the layout reads one sparsely when at most a quarter of rows have it).
``--base``: a checkout of another commit with its extensions built in place (see bench/cli_ab.py).
Children run with bytecode cached (bench/children.py).

    python bench/layout_ab.py --base /tmp/base --rounds 5 /tmp/exruns/mainjob-x8.parquet /tmp/exruns/synthetic.parquet
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import polars as pl
from children import child_env, measure, warm_bytecode

REPO = Path(__file__).resolve().parent.parent
CHILD = r"""
import json, resource, sys, tracemalloc
from tracekit.export import attribution_buckets
from tracekit.export.layout import build_layout
from tracekit.store import load_run

r = load_run(sys.argv[1])
bk = attribution_buckets(r.events, [])
peak = sys.argv[2] == "peak"
if peak:
    tracemalloc.start()
a = resource.getrusage(resource.RUSAGE_SELF)
build_layout(r.events, r.manifest, flows=("launches",), buckets=bk)
b = resource.getrusage(resource.RUSAGE_SELF)
out = {"cpu": b.ru_utime - a.ru_utime + b.ru_stime - a.ru_stime, "system": b.ru_stime - a.ru_stime,
       "faults": b.ru_minflt - a.ru_minflt}
if peak:
    out["peak_mb"] = tracemalloc.get_traced_memory()[1] / 1e6
print(json.dumps(out))
"""


def one(tree: Path, run: Path, peak: bool) -> dict[str, float]:
    env = child_env(PYTHONPATH=str(tree))
    u = measure([sys.executable, "-c", CHILD, str(run), "peak" if peak else "cpu"], env, "/", keep_stdout=True)
    if u.failed:
        raise SystemExit(f"{tree}: {u.failed}")
    got: dict[str, float] = json.loads(u.stdout)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("runs", type=Path, nargs="+")
    a = ap.parse_args()
    trees = {"this tree": REPO, "base": a.base.resolve()}
    for t in trees.values():
        warm_bytecode(t)
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for run in (r.resolve() for r in a.runs):
        df = pl.read_parquet(run, columns=["args", "coll_op", "group"])
        shares = ", ".join(f"{c} {1 - df[c].null_count() / max(df.height, 1):.1%}" for c in df.columns)
        print(f"{run.name}: {df.height} rows; rows having a string arg: {shares}")
        got: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
        for i in range(a.rounds):
            for k in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                got[k].append(one(trees[k], run, False))
        for k, rows in got.items():
            cpu = [r["cpu"] for r in rows]
            print(f"  {k:10s} first layout call: median {statistics.median(cpu):.3f} best {min(cpu):.3f} cpu-s over {len(rows)} "
                  f"fresh processes; system median {statistics.median(r['system'] for r in rows):.3f}, minor faults median "
                  f"{int(statistics.median(r['faults'] for r in rows))}; numpy peak during the call "
                  f"{one(trees[k], run, True)['peak_mb']:.0f} MB")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
