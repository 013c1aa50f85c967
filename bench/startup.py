"""Start-up cost of the CLI: CPU seconds of child processes, rounds back to back.

    python bench/startup.py [--repeat 5] [--run samples/cpu8-builtin/run.parquet] [--base DIR]

Times, each in a fresh child process (``python -m tracekit``): ``tracekit --help``; ``tracekit ingest -q``
of a small real trace set (samples/sglang-shapes-h200x2, 2 files, 0.6 MB JSON); ``tracekit attribute RUN``
and ``tracekit export RUN`` on a small run; and, as floors, a bare interpreter and ``import polars, numpy``
(what any command that reads a run must pay). Every row runs once per round, rounds back to back (a
change in load falls on all rows); each row prints its best and median CPU (user + system, from wait4)
and wall seconds, then the load average, and how much of ``attribute`` is start-up (interpreter,
imports) versus the work itself (attribute minus a run that only imports the same modules).

``--base DIR``: also run every tracekit row in DIR with ``PYTHONPATH=DIR`` (a checkout of another commit, e.g.
``git archive main | tar -x -C DIR`` plus the built ``tracekit/*.so``), interleaved with this tree, and
print this tree / base per row (median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from children import child_env, imports_only, measure, warm_bytecode

REPO = Path(__file__).resolve().parent.parent
SMALL_SET = REPO / "samples" / "sglang-shapes-h200x2"


def child(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """CPU seconds (user + system of the process, from wait4) and wall seconds of one command."""
    u = measure(cmd, env, cwd)
    if u.failed:
        raise SystemExit(f"{' '.join(cmd)}: {u.failed}")
    return u.cpu, u.wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="rounds")
    ap.add_argument("--run", type=Path, default=REPO / "samples" / "cpu8-builtin" / "run.parquet")
    ap.add_argument("--base", type=Path, help="a checkout of another commit, run interleaved (PYTHONPATH)")
    a = ap.parse_args()
    py = sys.executable
    exe = [py, "-m", "tracekit"]
    # a run written by this tracekit (an older sample would be read as stored, with a note)
    tmp = Path(tempfile.mkdtemp())
    run = tmp / a.run.name
    subprocess.run([py, "-c", "import sys; from tracekit.store import load_run, write_run; r = load_run(sys.argv[1]); "
                    "write_run(r.events, sys.argv[2], r.manifest)", str(a.run), str(run)], check=True,
                   stderr=subprocess.DEVNULL)
    small = sorted(str(p) for p in SMALL_SET.glob("*.trace.json.gz"))
    attribute_imports = ("import tracekit.cli, tracekit.cli.analyses, tracekit.store, tracekit.analyzers.attribution, "
                         "tracekit.render.attribute, tracekit.render.attribute_doc, tracekit.analyzers.host_attribution, "
                         "tracekit.render.host_attribute")
    export_imports = ("import tracekit.cli, tracekit.cli.export, tracekit.store, tracekit.export, tracekit.export.layout, "
                      "tracekit.export.fastlayout, tracekit.analyzers.attribution, tracekit.export.perfetto, tracekit.render.export")
    rows: list[tuple[str, list[str], bool]] = [  # label, command, a tracekit row (also run on --base)
        ("python -c pass (interpreter floor)", [py, "-c", "pass"], False),
        ("import polars, numpy (floor of a command reading a run; no teardown)", [py, "-c", imports_only("import polars, numpy")], False),
        ("tracekit --help", [*exe, "--help"], True),
        (f"tracekit ingest -q ({SMALL_SET.name}, 0.6 MB JSON)", [*exe, "ingest", "-q", *small, "-o", str(tmp / "small.parquet")], True),
        ("import of everything `attribute` loads (no teardown)", [py, "-c", imports_only(attribute_imports)], True),
        (f"tracekit attribute {a.run.name}", [*exe, "attribute", str(run)], True),
        ("import of everything `export` loads (no teardown)", [py, "-c", imports_only(export_imports)], True),
        (f"tracekit export {a.run.name} -o run.pftrace", [*exe, "export", str(run), "-o", str(tmp / "run.pftrace")], True),
    ]
    env = child_env()  # bytecode cached, as for an installed tracekit (bench/children.py)
    env.pop("PYTHONPATH", None)
    warm_bytecode(REPO)
    if a.base:
        warm_bytecode(a.base.resolve())
    # the base runs in its own directory: `python -m` / `-c` put the working directory first on sys.path
    base_env = {**env, "PYTHONPATH": str(a.base.resolve())} if a.base else None
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    for r in range(a.repeat):
        for label, cmd, tk in rows:
            variants = [("", env, REPO)] + ([("base: ", base_env, a.base)] if base_env is not None and tk else [])
            for prefix, e, cwd in variants if r % 2 == 0 else variants[::-1]:
                c, w = child(cmd, e, cwd)
                cpu.setdefault(prefix + label, []).append(c)
                wall.setdefault(prefix + label, []).append(w)
    print(f"CPU seconds of each child process, {a.repeat} rounds (best, median; wall best)")
    for label, _, tk in rows:
        for key in [label] + ([f"base: {label}"] if base_env is not None and tk else []):
            cs = cpu[key]
            line = (f"  {key:70s} {min(cs):6.3f} cpu-s  median {statistics.median(cs):6.3f}  "
                    f"({min(wall[key]):6.3f} s wall)")
            if key.startswith("base: "):
                ratio = statistics.median(n / b for n, b in zip(cpu[label], cs, strict=True))
                line += f"   this tree / base: {ratio:.2f}x"
            print(line)
    imp = min(cpu[rows[4][0]])
    att = min(cpu[rows[5][0]])
    print(f"attribute: start-up (interpreter + imports) {imp:.3f} cpu-s of {att:.3f} = {imp / att:.0%}; "
          f"the work itself {att - imp:.3f} cpu-s")
    print(f"--help: {min(cpu['tracekit --help']):.3f} cpu-s = "
          f"{min(cpu['tracekit --help']) / min(cpu[rows[0][0]]):.1f}x a bare interpreter")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
