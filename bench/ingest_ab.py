"""This tree against another checkout on the same trace files, in-process, interleaved.

    python bench/ingest_ab.py --base DIR [--rounds 6] GLOB [GLOB ...]

DIR is a checkout of another commit (``git archive main | tar -x -C DIR`` plus the built
``tracekit/*.so``), run with ``PYTHONPATH=DIR``. For each set of files (one GLOB), every round runs
one fresh process of each tree, in alternating order (a change in load falls on both), with
``POLARS_MAX_THREADS=1`` and ``TRACEKIT_INGEST_THREADS=1``; each process times ``ingest_traces`` +
``write_run`` three times with CPU seconds (``time.process_time``): the first call (what a short
process pays: first use of polars' code paths, lazy imports, regex compilation) and the best of the
two repeats. Prints the medians and the median of the per-round ratios this tree / base.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from children import child_env, warm_bytecode

_CODE = r"""
import json, os, sys, time
import tracekit.finalize.pipeline
from tracekit.ingest import ingest_traces
from tracekit.store import write_run
files, out = json.loads(sys.argv[1]), sys.argv[2]
res = []
for _ in range(3):
    c = time.process_time()
    run = ingest_traces(files)
    write_run(run.events, out, run.manifest)
    res.append(time.process_time() - c)
    del run
print(json.dumps(res))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("globs", nargs="+")
    a = ap.parse_args()
    env = child_env(POLARS_MAX_THREADS="1", TRACEKIT_INGEST_THREADS="1")  # bench/children.py
    env.pop("PYTHONPATH", None)
    warm_bytecode(Path(__file__).resolve().parent.parent)
    warm_bytecode(a.base.resolve())
    trees = {"this tree": env, "base": {**env, "PYTHONPATH": str(a.base.resolve())}}
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for pattern in a.globs:
        files = sorted(str(Path(p).resolve()) for p in glob.glob(pattern))
        if not files:
            raise SystemExit(f"{pattern}: no files")
        out = Path(f"/tmp/ingest-ab-{os.getpid()}.parquet")
        got: dict[str, list[list[float]]] = {k: [] for k in trees}
        for r in range(a.rounds):
            for label in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                proc = subprocess.run([sys.executable, "-c", _CODE, json.dumps(files), str(out)], capture_output=True,
                                      text=True, env=trees[label], cwd="/")
                if proc.returncode != 0:
                    raise SystemExit(f"{label}: {proc.stderr.strip().splitlines()[-1]}")
                got[label].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        out.unlink(missing_ok=True)
        print(f"{pattern} ({len(files)} files), {a.rounds} rounds, CPU seconds of ingest_traces + write_run:")
        for label, runs in got.items():
            first = [x[0] for x in runs]
            again = [min(x[1:]) for x in runs]
            print(f"  {label:10s} first call median {statistics.median(first):.3f} s (best {min(first):.3f}); "
                  f"again median {statistics.median(again):.3f} s (best {min(again):.3f})")
        new, base = got["this tree"], got["base"]
        first_ratio = statistics.median(n[0] / b[0] for n, b in zip(new, base, strict=True))
        again_ratio = statistics.median(min(n[1:]) / min(b[1:]) for n, b in zip(new, base, strict=True))
        print(f"  this tree / base, median of the per-round ratios: first call {first_ratio:.2f}x, again {again_ratio:.2f}x")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
