"""Same-process A/B of the export layout's string codes and arg-set key packing: the functions of
``tracekit/export/fastlayout.py`` at a git revision (``--base``) against the working tree's, on the
inputs one ``build_layout_fast`` call gives them, called alternately (least and median CPU of
``--reps``), results checked equivalent.

Plain script (not a test). The base's functions run against this checkout's compiled modules
(``tracekit._walk.intern`` still takes the base's ``null_as=""``).

    python bench/export_ab.py /tmp/runs/mainjob-x8.parquet --base 3718c8d --reps 10
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import tracekit.export.fastlayout as new
from tracekit.export import attribution_buckets
from tracekit.export.select import Selection, select_events
from tracekit.store import load_run


def base_module(rev: str) -> types.ModuleType:
    src = subprocess.run(["git", "show", f"{rev}:tracekit/export/fastlayout.py"], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parent.parent).stdout
    mod = types.ModuleType("fastlayout_base")
    mod.__dict__["__name__"] = "tracekit.export.fastlayout_base"
    exec(compile(src, f"{rev}:fastlayout.py", "exec"), mod.__dict__)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--base", default="3718c8d")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    old = base_module(a.base)
    r = load_run(a.run)
    ev = select_events(r.events, Selection())
    n = ev.height
    calls: dict[str, list[tuple[Any, ...]]] = {"_codes": [], "_pack": []}
    real_codes, real_pack = new._codes, new._pack

    def spy_codes(series: Any, rows: Any, strings: Any, head: Any = None, null_as: Any = None) -> Any:
        calls["_codes"].append((series, rows.copy(), None if head is None else head.copy(), null_as))
        return real_codes(series, rows, strings, head, null_as)

    def spy_pack(cols: Any) -> Any:
        calls["_pack"].append(tuple(c.copy() for c in cols))
        return real_pack(cols)

    new._codes, new._pack = spy_codes, spy_pack  # type: ignore[assignment]
    new.build_layout_fast(ev, r.manifest, buckets=attribution_buckets(r.events, []))
    new._codes, new._pack = real_codes, real_pack  # type: ignore[assignment]

    def codes(m: Any) -> tuple[float, list[list[Any]]]:
        st = m._Strings()
        t = time.process_time()
        got = [m._codes(s, rows, st, head, null_as) for s, rows, head, null_as in calls["_codes"]]
        d = time.process_time() - t
        return d, [[st.values[c] for c in g.tolist()] for g in got]

    def pack(m: Any) -> tuple[float, list[Any]]:
        t = time.process_time()
        got = [m._pack(cols) for cols in calls["_pack"]]
        d = time.process_time() - t
        return d, [new.first_seen(g)[0].tolist() for g in got]

    print(f"run {a.run} ({n} run events), base {a.base}; {len(calls['_codes'])} _codes calls, "
          f"{len(calls['_pack'])} _pack calls (columns: {[len(c) for c in calls['_pack']]})")
    for label, fn in (("string codes (_codes)", codes), ("key packing (_pack)", pack)):
        assert fn(old)[1] == fn(new)[1], f"{label}: results differ"
        res: dict[str, list[float]] = {"base": [], "new": []}
        for _ in range(a.reps):
            res["base"].append(fn(old)[0])
            res["new"].append(fn(new)[0])
        line = [f"{k} least {min(v) * 1e6 / n:.4f} median {sorted(v)[len(v) // 2] * 1e6 / n:.4f}" for k, v in res.items()]
        print(f"{label}: same results; cpu-s per 1 M run events: " + "; ".join(line)
              + f"; new/base (least) {min(res['new']) / min(res['base']):.2f}")
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    sys.exit(main())
