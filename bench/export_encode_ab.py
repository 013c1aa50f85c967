"""Same-process A/B of ``encode_batch`` between builds of ``tracekit._core``: the batches one
``write_perfetto`` call gives the encoder (this checkout's layout), encoded by each build in turn
(the first-use flags reset before each pass), ``--reps`` times alternately; bytes checked equal.
First, where ``write_perfetto``'s CPU goes (this checkout): the write order, the flow tables, the
encoder calls.

Plain script (not a test). Build a variant, e.g. from an edited copy of _core.c:

    gcc -O2 -std=c99 -fPIC -shared -I$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \\
        /tmp/variant.c -o /tmp/variant.so
    python bench/export_encode_ab.py /tmp/runs/synthetic.parquet tracekit/_core.*.so /tmp/variant.so --reps 8

Diagnostic builds (``--diagnostic``) leave a part of the packet out to see what it costs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

from tracekit import _core
from tracekit.export import attribution_buckets
from tracekit.export import perfetto as P
from tracekit.export.layout import build_layout
from tracekit.export.select import Selection, select_events
from tracekit.store import load_run

DONE = (35, 42)  # name_done, str_done in encode_batch's arrays (updated by each call)


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("tracekit._core", path)
    assert spec is not None and spec.loader is not None
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("builds", type=Path, nargs="+", help="shared objects of tracekit._core")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--diagnostic", action="store_true",
                    help="builds that leave parts out on purpose (their byte counts printed, not compared)")
    a = ap.parse_args()
    mods = {f"{i}:{p.name}": load(p) for i, p in enumerate(a.builds)}
    r = load_run(a.run)
    n = r.events.height
    lay = build_layout(select_events(r.events, Selection()), r.manifest, buckets=attribution_buckets(r.events, []))
    calls: list[tuple[Any, bytes]] = []

    class Spy:
        def __getattr__(self, k: str) -> Any:
            return getattr(_core, k)

        def encode_batch(self, arrays: Any, prefix: bytes) -> bytes:
            calls.append((arrays, prefix))
            return _core.encode_batch(arrays, prefix)

    P.core = Spy()  # type: ignore[assignment]
    with open(os.devnull, "wb") as sink:
        P.write_perfetto(lay, sink)
    P.core = _core

    def run(m: Any) -> tuple[float, list[bytes]]:
        for i in DONE:
            calls[0][0][i][:] = 0
        t = time.process_time()
        out = [m.encode_batch(arr, pre) for arr, pre in calls]
        return time.process_time() - t, out

    def least(fn: Any) -> float:
        best = float("inf")
        for _ in range(a.reps):
            t = time.process_time()
            fn()
            best = min(best, time.process_time() - t)
        return best * 1e6 / n

    with open(os.devnull, "wb") as sink:
        parts = {"write_perfetto (this checkout)": least(lambda: P.write_perfetto(lay, sink)),
                 "of which records (write order)": least(lambda: P.records(lay)),
                 "of which flow CSR (2 x _csr)": least(lambda: (P._csr(lay.flow_src, lay.flow_id, lay.n_slices),
                                                                P._csr(lay.flow_dst, lay.flow_id, lay.n_slices))),
                 "of which encode_batch calls": least(lambda: run(_core))}
    print("least cpu-s per 1 M run events: " + "; ".join(f"{k} {v:.3f}" for k, v in parts.items()))
    ref = run(next(iter(mods.values())))[1]
    for k, m in mods.items():
        got = run(m)[1]
        if a.diagnostic:
            print(f"{k}: {sum(map(len, got))} bytes ({'the same' if got == ref else 'not the same'} as the first build's)")
        else:
            assert got == ref, f"{k}: bytes differ"
    del ref
    res: dict[str, list[float]] = {k: [] for k in mods}
    for _ in range(a.reps):
        for k, m in mods.items():
            res[k].append(run(m)[0])
    print(f"run {a.run}: {n} run events, {sum(int(c[0][0].size) for c in calls)} records in {len(calls)} batches; "
          + ("" if a.diagnostic else "same bytes from every build"))
    first = min(next(iter(res.values())))
    for k, v in res.items():
        print(f"{k:28s} least {min(v) * 1e6 / n:.3f} median {sorted(v)[len(v) // 2] * 1e6 / n:.3f} cpu-s per 1 M run events;"
              f" least / first build's {min(v) / first:.2f}")
    print("load average (1, 5, 15 min):", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    sys.exit(main())
