"""Whole CLI processes of this checkout against another checkout's code (``--base``), alternating.

Plain script (not a test). Each round runs ``python -m tracekit ARGS...`` once with this tree's code and
once with ``PYTHONPATH=BASE`` (a checkout of another commit with its extensions built in place:
``git worktree add /tmp/base REV && (cd /tmp/base && python setup.py -q build_ext --inplace)``), the
order swapped every round; prints per tree the best and median CPU seconds (user + system, from wait4)
with the system share and minor faults, peak RSS, and this tree / base (median of the per-round
ratios), then the load average. ``{out}`` in ARGS is replaced by a fresh output path per process;
``--events N`` adds a per-core rate (N / CPU s). Children run with bytecode cached (bench/children.py).

    python bench/cli_ab.py --base /tmp/base --rounds 6 --events 919464 -- export RUN -o {out}.pftrace
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from children import child_env, measure, warm_bytecode

REPO = Path(__file__).resolve().parent.parent


def run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int, float]:
    """(CPU s, system s, minor faults, peak RSS MB) of one process."""
    u = measure(cmd, env, "/")
    if u.failed:
        raise SystemExit(f"{' '.join(cmd)}: {u.failed}")
    return u.cpu, u.system, u.faults, u.rss_mb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--events", type=int, help="events the command handles (prints N / CPU s)")
    ap.add_argument("args", nargs="+", help="tracekit arguments ({out}: a fresh output path)")
    a = ap.parse_args()
    env = child_env()
    env.pop("PYTHONPATH", None)
    trees = {"this tree": (REPO, env), "base": (a.base.resolve(), {**env, "PYTHONPATH": str(a.base.resolve())})}
    for root, _ in trees.values():
        warm_bytecode(root)
    # this tree's code: its own checkout first on sys.path (cwd is /, so python -m does not add it)
    trees["this tree"] = (REPO, {**env, "PYTHONPATH": str(REPO)})
    print(f"load average (1, 5, 15 min): {'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())}; tracekit {' '.join(a.args)}")
    # the children run in / (so that `python -m` puts no checkout first on sys.path): paths made absolute
    args = [str(Path(x).resolve()) if "{out}" not in x and Path(x).exists() else x for x in a.args]
    got: dict[str, list[tuple[float, float, int, float]]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.rounds):
            for k in (list(trees) if i % 2 == 0 else list(reversed(trees))):
                out = str(Path(tmp) / f"{k.replace(' ', '_')}-{i}")
                cmd = [sys.executable, "-m", "tracekit", *(x.replace("{out}", out) for x in args)]
                got[k].append(run(cmd, trees[k][1]))
    for k, rows in got.items():
        cpu = [r[0] for r in rows]
        best, med = min(cpu), statistics.median(cpu)
        rate = f" = {a.events / best / 1e6:.2f} M events/CPU-s best, {a.events / med / 1e6:.2f} median" if a.events else ""
        print(f"  {k:10s} best {best:.3f} median {med:.3f} cpu-s{rate}; system median {statistics.median(r[1] for r in rows):.3f}, "
              f"minor faults median {int(statistics.median(r[2] for r in rows))}, peak RSS median {statistics.median(r[3] for r in rows):.0f} MB")
    ratios = [x[0] / y[0] for x, y in zip(got["this tree"], got["base"], strict=True)]
    print(f"  this tree / base: {statistics.median(ratios):.2f}x (median of {len(ratios)} per-round ratios; best / best "
          f"{min(r[0] for r in got['this tree']) / min(r[0] for r in got['base']):.2f}x)")
    print(f"load average (1, 5, 15 min): {'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
