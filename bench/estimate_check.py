"""Check the unprofiled estimate of the buckets against a lite capture of the same workload.

    python bench/estimate_check.py FULL.parquet LITE.parquet [--json out.json]

For every phase both runs have: the full capture's measured buckets (its typical
instance: the median GPU window over all ranks), its unprofiled estimate (``analyzers.unprofiled``:
kernels as measured, host-bound buckets scaled to the capture's unprofiled
timer), the lite capture's measured buckets (its typical instance; the least
dilated capture that still has buckets), and the lite capture's own estimate. Prints the
error of the full run's estimate against the lite measurement, bucket by bucket
and for the host-bound part, next to the error of the full run's measured
(unscaled) buckets against the same reference.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def buckets_of(inst: dict[str, Any]) -> dict[str, float]:
    from tracekit.buckets import BUCKETS

    return {b: float(inst[f"{b}_ns"]) for b in BUCKETS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("full")
    ap.add_argument("lite")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    from tracekit.analyzers.analyses import instance_estimate, typical_instance
    from tracekit.analyzers.attribution import attribute_report
    from tracekit.analyzers.unprofiled import phase_timers
    from tracekit.store import load_run

    runs = {k: load_run(p) for k, p in (("full", args.full), ("lite", args.lite))}
    reps = {k: attribute_report(run.events)["instances"] for k, run in runs.items()}
    rows = {k: {p: t for p in inst["phase"].unique().to_list() if (t := typical_instance(inst, p)) is not None}
            for k, inst in reps.items()}
    timers = {k: phase_timers(run.manifest) for k, run in runs.items()}
    out: dict[str, Any] = {"full": args.full, "lite": args.lite, "phases": {}}
    host = ("launch_overhead", "idle", "allreduce")
    for ph in sorted(set(rows["full"]) & set(rows["lite"])):
        fr, lr = rows["full"][ph], rows["lite"][ph]
        fe, le = instance_estimate(fr, timers["full"].get(ph)), instance_estimate(lr, timers["lite"].get(ph))
        if fe is None:
            continue
        fm, lm = buckets_of(fr), buckets_of(lr)
        lw = sum(lm.values()) or float("nan")
        est_host = sum(fe.buckets_ns[b] for b in host)
        meas_host = sum(fm[b] for b in host)
        ref_host = sum(lm[b] for b in host)
        item = {
            "unprofiled_ns_full_timer": timers["full"][ph].unprofiled_ns,
            "unprofiled_ns_lite_timer": timers["lite"][ph].unprofiled_ns if ph in timers["lite"] else None,
            "full_window_ns": sum(fm.values()),
            "lite_window_ns": lw,
            "full_estimate_window_ns": fe.window_ns,
            "scale": fe.scale,
            "host_bound": {"full_measured_ns": meas_host, "full_estimate_ns": est_host, "lite_measured_ns": ref_host,
                           "lite_estimate_ns": None if le is None else sum(le.buckets_ns[b] for b in host),
                           "estimate_error_ns": est_host - ref_host, "measured_error_ns": meas_host - ref_host},
            "buckets": {b: {"full_measured_ns": fm[b], "full_estimate_ns": fe.buckets_ns[b], "lite_measured_ns": lm[b]}
                        for b in fm if fm[b] or lm[b]},
        }
        out["phases"][ph] = item
        hb = item["host_bound"]
        print(f"{ph}: unprofiled timer {item['unprofiled_ns_full_timer'] / 1e6:.3f} ms (full run) / "
              f"{(item['unprofiled_ns_lite_timer'] or 0) / 1e6:.3f} ms (lite run); GPU window full "
              f"{item['full_window_ns'] / 1e6:.3f} ms, lite {lw / 1e6:.3f} ms; estimate from full "
              f"{fe.window_ns / 1e6:.3f} ms (host-bound x{fe.scale:.2f})")
        print(f"  host-bound (launch overhead + idle + exposed allreduce): full measured {meas_host / 1e6:.3f} ms, "
              f"full ESTIMATE {est_host / 1e6:.3f} ms, lite measured {ref_host / 1e6:.3f} ms: estimate error "
              f"{(est_host - ref_host) / 1e6:+.3f} ms ({100 * (est_host - ref_host) / lw:+.1f}% of the lite window) vs "
              f"unscaled {(meas_host - ref_host) / 1e6:+.3f} ms ({100 * (meas_host - ref_host) / lw:+.1f}%); lite's own "
              f"ESTIMATE {('n/a' if hb['lite_estimate_ns'] is None else format(hb['lite_estimate_ns'] / 1e6, '.3f'))} ms")
        for b, v in item["buckets"].items():
            print(f"    {b:<16} full {v['full_measured_ns'] / 1e6:8.3f}  estimate {v['full_estimate_ns'] / 1e6:8.3f}  "
                  f"lite {v['lite_measured_ns'] / 1e6:8.3f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
