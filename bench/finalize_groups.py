"""Finalize's cost per rank by how many ranks one call finalizes (issue 29: ``sharded.GROUP_BYTES``).

    python bench/finalize_groups.py SETS_DIR/64 [1 2 4 8]

For each K, a fresh process stages the first 16 ranks' files of the set (``sharded.scan_file``), then
finalizes them K ranks per call (``sharded.finalize_ranks``): CPU per rank of the finalize calls and the
process's peak RSS (ru_maxrss) after them, beside its peak after the scans alone.
"""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import os, resource, sys, tempfile, time
from tracekit.ingest.sharded import _stage_part, finalize_ranks, scan_file
d, k = sys.argv[1], int(sys.argv[2])
stage = tempfile.mkdtemp(prefix="tk-groups-")
for i in range(16):
    scan_file(os.path.join(d, f"rank-{i:05d}.trace.json.gz"), stage, i)
size = os.path.getsize(_stage_part(stage, 0, 0))
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t = time.process_time()
for g in range(16 // k):
    finalize_ranks(g, stage, [(r, [(r, 0)]) for r in range(g * k, g * k + k)], None)
cpu = (time.process_time() - t) / 16
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(f"{k:>2} rank(s) per call: {cpu * 1000:6.1f} ms CPU per rank; peak RSS {peak >> 10} MB "
      f"(after the scans {base >> 10} MB); staged part {size / 2**20:.1f} MiB per rank")
"""


def main() -> int:
    d = sys.argv[1]
    ks = [int(k) for k in sys.argv[2:]] or [1, 2, 4, 8]
    print(f"# python bench/finalize_groups.py {' '.join(sys.argv[1:])}")
    for k in ks:
        r = subprocess.run([sys.executable, "-c", CHILD, d, str(k)], capture_output=True, text=True)
        print(r.stdout.strip() or r.stderr.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
