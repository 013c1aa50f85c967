"""Where the compiled export layout's CPU goes, statement by statement: ``fastlayout.build_layout_fast``
run with a tick after each top-level statement of its body (user and system CPU, minor page faults),
first call in a fresh process and then warm calls in the same process.

Plain script (not a test). The run: a file written by ``python bench/export.py --write-runs DIR``.

    python bench/export_lines.py /tmp/runs/synthetic.parquet --calls 3 --top 20
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import os
import resource
import sys
from pathlib import Path
from typing import Any

import tracekit.export.fastlayout as fastlayout
from tracekit.export import attribution_buckets
from tracekit.store import load_run

Mark = tuple[int, float, float, int]  # line, user, system, minor faults


def instrumented(marks: list[Mark]) -> tuple[Any, list[str], int]:
    """``build_layout_fast`` compiled from its source with ``_tick(line)`` after each statement of its body."""
    path = Path(inspect.getsourcefile(fastlayout) or "")
    src = path.read_text().splitlines()
    fn = next(n for n in ast.parse("\n".join(src)).body if isinstance(n, ast.FunctionDef) and n.name == "build_layout_fast")
    ends = {s.end_lineno for s in fn.body[1:-1]}
    out: list[str] = []
    for i, line in enumerate(src, 1):
        out.append(line)
        if i in ends:
            out.append(f"    _tick({i})")

    def tick(line: int) -> None:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((line, ru.ru_utime, ru.ru_stime, ru.ru_minflt))

    ns: dict[str, Any] = {"__name__": "fastlayout_lines", "_tick": tick}
    exec(compile("\n".join(out), str(path), "exec"), ns)  # the package's own source, with ticks
    return ns["build_layout_fast"], src, fn.body[0].end_lineno or fn.lineno


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    marks: list[Mark] = []
    build, src, first = instrumented(marks)
    r = load_run(a.run)
    bk = attribution_buckets(r.events, [])
    for call in range(a.calls):
        marks.clear()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((first, ru.ru_utime, ru.ru_stime, ru.ru_minflt))
        build(r.events, r.manifest, buckets=bk)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        marks.append((len(src), ru.ru_utime, ru.ru_stime, ru.ru_minflt))
        u, s, f = (marks[-1][k] - marks[0][k] for k in (1, 2, 3))
        print(f"call {call + 1}{' (first in the process)' if call == 0 else ''}: user {u:.3f} system {s:.3f} cpu-s, "
              f"{f} minor faults ({r.events.height} run events)")
        rows = [(u1 - u0 + s1 - s0, s1 - s0, f1 - f0, l0) for (l0, u0, s0, f0), (_, u1, s1, f1) in itertools.pairwise(marks)]
        for cpu, sys_s, faults, l0 in sorted(rows, reverse=True)[:a.top]:
            text = src[l0].strip() if l0 < len(src) else ""
            print(f"  {cpu:6.3f} (system {sys_s:.3f}, {faults:6d} faults)  line {l0 + 1}: {text[:80]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
