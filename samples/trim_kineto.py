"""Cut a raw Kineto JSON (.json.gz) to the events that start before the end of a given cycle.

    python samples/trim_kineto.py RUN.parquet IN.trace.json.gz OUT.trace.json.gz --rank R --last-cycle C

The cut time is the end of the last phase range of cycle C on rank R in RUN.parquet
(the same capture).  Metadata events (ph M) and every top-level key are kept; no
event is modified.  Used to keep samples/ small.
"""

from __future__ import annotations

import argparse
import gzip
import json

import polars as pl

from tracekit.store import read_run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--last-cycle", type=int, required=True)
    a = ap.parse_args()
    ev = read_run(a.run).filter(pl.col("rank") == a.rank, pl.col("kind") == "range", pl.col("cycle") <= a.last_cycle,
                                pl.col("phase_id").is_not_null())
    cut_ns = int((ev["start_ns"] + ev["dur_ns"]).max())
    doc = json.loads(gzip.decompress(open(a.src, "rb").read()))
    base = int(doc.get("baseTimeNanoseconds") or 0)
    cut_us = (cut_ns - base) / 1000.0
    n0 = len(doc["traceEvents"])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") == "M" or "ts" not in e or float(e["ts"]) <= cut_us]
    with gzip.open(a.dst, "wt") as f:
        json.dump(doc, f)
    print(f"{a.src}: kept {len(doc['traceEvents'])} of {n0} events (cut at cycle {a.last_cycle}, {cut_ns} ns)")


if __name__ == "__main__":
    main()
