"""Timing mode's cost per graphed cycle for two trees of tracekit, one after the other, same machine.

Each ``--tree NAME=PYTHONPATH`` runs ``profile_modes.py --child timing-pairs`` (``timing_cost.py``:
adjacent graphed cycles with the recorder on / off, bootstrap intervals, and the direct cost of a
range and a marker) in a fresh process with that PYTHONPATH first; ``--rounds`` alternates them.

    python bench/timing_ab.py --tree new=/tmp/site --tree old=/tmp/site_old --rounds 1 --pairs 600
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=PYTHONPATH")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--pairs", type=int, default=600)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import timing_cost

    trees = [t.split("=", 1) for t in a.tree]
    out: list[dict[str, object]] = []
    for rnd in range(a.rounds):
        for name, path in trees:
            env = {**os.environ, "PYTHONPATH": path + (":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
            t0 = time.monotonic()
            res = subprocess.run([sys.executable, str(HERE / "profile_modes.py"), "--device", "cuda", "--child", "timing-pairs",
                                  "--warmup", str(a.warmup), "--pairs", str(a.pairs), "--calls", str(a.calls)],
                                 capture_output=True, text=True, env=env, timeout=a.timeout, check=False)
            lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
            print(f"== {name} (PYTHONPATH {path}), round {rnd + 1}: rc {res.returncode}, {time.monotonic() - t0:.0f} s")
            if res.returncode != 0 or not lines:
                print("\n".join(res.stderr.strip().splitlines()[-5:]))
                continue
            doc = json.loads(lines[-1])
            out.append({"tree": name, "round": rnd + 1, **doc})
            for line in timing_cost.report(doc):
                print(line)
            sys.stdout.flush()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
