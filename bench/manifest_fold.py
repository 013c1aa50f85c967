"""Opening a sharded run: the driver's memory for its shards' manifests, held together (the code before
``store.open_ranked`` folded them: every footer parsed, then ``merge_manifests`` of the list) against
``open_ranked`` (folded one at a time). Each way in its own child process; RSS from /proc after the open.

    python bench/manifest_fold.py SHARD_DIR        e.g. /work/tk-scale/run1024

Also prints one shard's manifest size and its clock section's (shards written before
``store.CLOCK_BY_RANK`` repeat the run's clock maps)."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = {
    "held together (before)": "from tracekit import store; import pathlib; "
    "m = store.merge_manifests([store._footer(str(f))[0] for f in store._shards(pathlib.Path(D))])",
    "open_ranked (folded)": "from tracekit import store; r = store.open_ranked(D)",
}


def main() -> None:
    d = sys.argv[1]
    from pathlib import Path

    from tracekit import store

    shards = sorted(Path(d).glob("rank-*.parquet"))
    man = store._footer(str(shards[0]))[0]
    print(f"# bench/manifest_fold.py {d}: {len(shards)} shards; one shard's manifest {len(json.dumps(man)):,} B "
          f"of JSON, its clock section {len(json.dumps(man.get('clock', {}))):,} B")
    for what, code in CHILD.items():
        prog = f"D = {d!r}; {code}; print(int(open('/proc/self/status').read().split('VmRSS:')[1].split()[0]) // 1024)"
        out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True).stdout
        print(f"{what:<24} RSS after opening: {int(out):,} MB")


if __name__ == "__main__":
    main()
