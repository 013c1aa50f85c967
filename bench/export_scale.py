"""Issue 29's export memory bench: the Perfetto export rank by rank against the whole-run export.

    python bench/export_scale.py RUN_FILE SHARD_DIR [--modes whole,file,dir,dask-local:2] [--export-args "..."]
    python bench/export_scale.py - SHARD_DIR --modes dir --export-args "--full-ranks 0-7 --flows collectives"

RUN_FILE and SHARD_DIR are the same run as one file and as a sharded directory (``tracekit ingest
SET -o run.parquet`` and ``-o run/``; ``-`` for no file: modes ``dir`` and ``dask-local:N`` only).
``--export-args`` are added to every ``tracekit export`` (e.g. ``--full-ranks 0-7``). Each mode is one child process, measured as ``bench/scale.py``
measures ingest (``scale._child``) (CPU s of the process tree from wait4, wall s, peak RSS of every process sampled every
0.1 s with psutil):

- ``whole``: the export before rank streams, the reference: ``load_run`` of the whole run, one layout
  (``build_layout``, attribution buckets included), one Perfetto stream (``write_perfetto``), as
  ``export_events`` did;
- ``file``: ``tracekit export RUN_FILE -o x.pftrace`` (rank by rank, batches of ranks read with a
  filtered scan);
- ``dir``: ``tracekit export SHARD_DIR -o x.pftrace`` (a shard at a time);
- ``dask-local:N``: ``tracekit export SHARD_DIR --executor dask-local:N`` (needs tracekit[dask]).

Printed: per mode the events, slices, CPU s, wall s, peak RSS (driver, workers), events per CPU s, and
the ratios: peak RSS / the whole-run export's (same run), peak / the 1.5 GB target. The rank-by-rank
files are compared byte for byte with each other, and their slice, counter and flow counts with the
whole-run layout's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import GB, _child

_WHOLE = """
import json, sys
from tracekit.export.buckets import attribution_buckets
from tracekit.export.layout import build_layout
from tracekit.export.perfetto import write_perfetto
from tracekit.store import load_run
r = load_run(sys.argv[1])
lay = build_layout(r.events, r.manifest, flows=("launches",), buckets=attribution_buckets(r.events, []))
with open(sys.argv[2], "wb") as fh:
    n = write_perfetto(lay, fh)
print(json.dumps({"slices": lay.n_slices, "counters": lay.n_counters, "flows": int(lay.flow_id.size),
                  "bytes": n, "events": r.events.height}))
"""


def run_one(cmd: list[str], work: Path, name: str) -> dict[str, object]:
    """One child process measured by ``scale._child`` (stdout kept)."""
    out = work / f"{name}.stdout"
    cpu, wall, driver, others, failed = _child(cmd, work / name, stdout=out)
    return {"rc": 0 if failed is None else 1, "cpu": cpu, "wall": wall, "driver": driver,
            "workers": sorted(others.values(), reverse=True), "stdout": out.read_text(errors="replace"),
            "stderr": failed or ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_file")
    ap.add_argument("shard_dir", type=Path)
    ap.add_argument("--modes", default="whole,file,dir")
    ap.add_argument("--export-args", default="", help="more arguments of every tracekit export")
    a = ap.parse_args(argv)
    import pyarrow.parquet as pq

    files = sorted(a.shard_dir.glob("rank-*.parquet")) if a.run_file == "-" else [Path(a.run_file)]
    events = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    print(f"# bench/export_scale.py {' '.join(sys.argv[1:])}; {os.cpu_count()} cores, load "
          f"{os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; {events:,} events")
    print(f"{'mode':<13} {'slices':>11} {'CPU s':>7} {'wall s':>7} {'peak MB':>8} {'workers MB':<16} {'ev/CPU s':>10}"
          f" {'MB out':>7}")
    work = Path(tempfile.mkdtemp(prefix="tk-export-scale-"))
    res: dict[str, dict[str, object]] = {}
    counts: dict[str, tuple[int, int, int]] = {}
    failed = False
    for mode in [m for m in a.modes.split(",") if m]:
        dest = work / f"{mode.replace(':', '')}.pftrace"
        if mode == "whole":
            cmd = [sys.executable, "-c", _WHOLE, str(a.run_file), str(dest)]
        else:
            src = a.run_file if mode == "file" else a.shard_dir
            cmd = [sys.executable, "-m", "tracekit", "export", str(src), "-o", str(dest), *a.export_args.split()]
            if mode.startswith("dask"):
                cmd += ["--executor", mode]
        r = run_one(cmd, work, mode.replace(":", ""))
        res[mode] = r
        if r["rc"] != 0:
            failed = True
            print(f"{mode:<13} FAILED {r['stderr']}")
            continue
        if mode == "whole":
            doc = json.loads(str(r["stdout"]).strip().splitlines()[-1])
            counts[mode] = (doc["slices"], doc["counters"], doc["flows"])
        else:
            line = str(r["stdout"]).splitlines()[0]  # "wrote X (Perfetto trace, N MB): ranks ..., S slices (...), C counter values, F flows, ..."
            import re

            m = re.search(r"([0-9]+) slices .*?([0-9]+) counter values, ([0-9]+) flows", line)
            assert m, line
            counts[mode] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        cpu, wall, drv = float(r["cpu"]), float(r["wall"]), int(r["driver"])  # type: ignore[arg-type]
        workers = ",".join(f"{w / 1e6:,.0f}" for w in r["workers"][:3]) or "-"  # type: ignore[index]
        print(f"{mode:<13} {counts[mode][0]:>11,} {cpu:>7.1f} {wall:>7.1f} {drv / 1e6:>8,.0f} {workers:<16} "
              f"{events / cpu:>10,.0f} {dest.stat().st_size / 1e6:>7.1f}", flush=True)
    ranked = [m for m in res if m != "whole" and res[m]["rc"] == 0]
    for m in ranked[1:]:
        same = (work / f"{m.replace(':', '')}.pftrace").read_bytes() == (work / f"{ranked[0]}.pftrace").read_bytes()
        print(f"{m}: bytes {'identical to' if same else 'DIFFER from'} {ranked[0]}'s")
        failed |= not same
    for m in ranked:
        if "whole" in counts:
            same = counts[m] == counts["whole"]
            print(f"{m}: slices, counters, flows {counts[m]} {'equal to' if same else 'DIFFER from'} the whole-run "
                  f"layout's {counts['whole']}")
            failed |= not same
    print("ratios (peak RSS of the largest process of the tree):")
    base = res.get("whole")
    for m in ranked:
        peak = max([int(res[m]["driver"]), *res[m]["workers"]])  # type: ignore[arg-type, misc]
        line = f"  {m}: {peak / 1e6:,.0f} MB = {peak / (1.5 * GB):.2f} x the 1.5 GB target"
        if base is not None and base["rc"] == 0:
            line += f"; {peak / int(base['driver']):.2f} x the whole-run export's {int(base['driver']) / 1e6:,.0f} MB"  # type: ignore[call-overload]
            line += f"; CPU {float(res[m]['cpu']) / float(base['cpu']):.2f} x"  # type: ignore[arg-type]
        print(line)
    for f in work.iterdir():
        f.unlink()
    work.rmdir()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
