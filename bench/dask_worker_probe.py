"""Where a Dask worker's memory goes during ``ingest --executor dask-local:2 -o DIR/`` (issue 29).

    python bench/dask_worker_probe.py SETS_DIR 1024 [--local] [OUT_DIR]

Runs ``ingest_sharded`` on ``SETS_DIR/N`` through a 2-worker LocalCluster and, every 128 files scanned,
ranks finalized and shards written, asks every worker (``client.run``) for its RSS, its anonymous
memory (``/proc/self/smaps_rollup``), its Python object count and the sizes of Dask's own worker
state (transition log, stimulus log, tasks known, results held). Printed one line per probe.
``--local``: the same tasks through the local executor, this process probed (no Dask): what the tasks
themselves keep.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any


def probe(dask_worker: Any = None) -> dict[str, Any]:
    import gc
    from pathlib import Path

    rss = int(Path("/proc/self/statm").read_text().split()[1]) * 4096 // 1_000_000
    sm = {ln.split(":")[0]: int(ln.split()[1]) // 1000 for ln in Path("/proc/self/smaps_rollup").read_text().splitlines()
          if ln.split(":")[0] in ("Anonymous",)}
    out = {"rss_mb": rss, "anon_mb": sm.get("Anonymous"), "py_objects": len(gc.get_objects())}
    if dask_worker is not None:
        ws = dask_worker.state
        out.update(log=len(ws.log), stimulus_log=len(ws.stimulus_log), tasks=len(ws.tasks),
                   results_held=len(dask_worker.data))
    return out


def main() -> None:
    from tracekit.executor import open_executor
    from tracekit.ingest.sharded import ingest_sharded

    args = [a for a in sys.argv[1:] if a != "--local"]
    local = "--local" in sys.argv
    sets, size = args[0], args[1]
    out = args[2] if len(args) > 2 else tempfile.mkdtemp(prefix="tk-probe-")
    ex: Any = open_executor("local" if local else "dask-local:2")

    def show(what: str) -> None:
        got = {"this process": probe()} if local else ex.client.run(probe)
        print(what, " | ".join(f"worker {i}: " + ", ".join(f"{k} {v}" for k, v in w.items())
                               for i, w in enumerate(got.values())), flush=True)

    t0 = time.time()
    show("start")
    files = [0]

    def progress(done: int, total: int, name: str) -> None:
        files[0] += 1
        if files[0] % 256 == 0:  # called before and after each file
            show(f"scan {files[0] // 2}")

    def say(msg: str) -> None:
        n = int(msg.split(": ")[1].split("/")[0])
        if n % 128 == 0 or n == 1 or msg.startswith("ingest: 1/"):
            show(msg)

    ingest_sharded([f"{sets}/{size}"], out, ex, say=say, progress=progress)
    show(f"end ({time.time() - t0:.0f} s)")
    ex.close()


if __name__ == "__main__":
    main()
