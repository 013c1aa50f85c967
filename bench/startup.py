"""Start-up cost of the CLI: CPU seconds of child processes, best of --repeat.

    python bench/startup.py [--repeat 5] [--run samples/cpu8-builtin/run.parquet]

Times, each in a fresh child process (``python -m tracekit``): ``tracekit --help``; ``tracekit attribute RUN`` on a
small run; and, as floors, a bare interpreter and ``import polars, numpy`` (what any command
that reads a run must pay). Prints CPU (user + system, from the children's rusage) and wall
seconds, the load average, and how much of ``attribute`` is start-up (interpreter, imports)
versus the work itself (attribute minus a run that only imports the same modules).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def best(cmd: list[str], repeat: int) -> tuple[float, float]:
    runs = [child(cmd) for _ in range(repeat)]
    return min(c for c, _ in runs), min(w for _, w in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--run", type=Path, default=REPO / "samples" / "cpu8-builtin" / "run.parquet")
    a = ap.parse_args()
    py = sys.executable
    exe = [py, "-m", "tracekit"]
    # a run written by this tracekit (an older sample would be finalized again on every read)
    tmp = tempfile.mkdtemp()
    run = Path(tmp) / a.run.name
    subprocess.run([py, "-c", "import sys; from tracekit.store import load_run, write_run; r = load_run(sys.argv[1]); "
                    "write_run(r.events, sys.argv[2], r.manifest)", str(a.run), str(run)], check=True,
                   stderr=subprocess.DEVNULL)
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    rows = [
        ("python -c pass (interpreter floor)", [py, "-c", "pass"]),
        ("import polars, numpy (floor of any command reading a run)", [py, "-c", "import polars, numpy"]),
        ("tracekit --help", [*exe, "--help"]),
        ("import of everything `attribute` loads", [py, "-c", "import tracekit.cli, tracekit.store, "
                                                     "tracekit.analyzers.attribution, tracekit.render.attribute, "
                                                     "tracekit.analyzers.host_attribution, tracekit.render.host_attribute"]),
        (f"tracekit attribute {a.run.name}", [*exe, "attribute", str(run)]),
    ]
    res = {}
    for label, cmd in rows:
        cpu, wall = best(cmd, a.repeat)
        res[label] = cpu
        print(f"  {label:60s} {cpu:6.3f} cpu-s  ({wall:6.3f} s wall)")
    imp = res[rows[3][0]]
    att = res[rows[4][0]]
    print(f"attribute: start-up (interpreter + imports) {imp:.3f} cpu-s of {att:.3f} = {imp / att:.0%}; "
          f"the work itself {att - imp:.3f} cpu-s")
    print(f"--help: {res['tracekit --help']:.3f} cpu-s = {res['tracekit --help'] / res[rows[0][0]]:.1f}x a bare interpreter")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
