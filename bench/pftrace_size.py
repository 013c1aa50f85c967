"""Size of a tracekit .pftrace against the Kineto JSON it came from (not a speed benchmark).

Ingests the committed 2-rank H200 Kineto traces (``samples/h200x2-builtin/<window>-rank-*.trace.json.gz``),
exports the run to ``.pftrace`` (all flows, attribution buckets) and prints the uncompressed JSON
bytes, the ``.pftrace`` bytes and their ratio. Output committed as ``bench/pftrace_size.txt``::

    python bench/pftrace_size.py > bench/pftrace_size.txt
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from pathlib import Path

from tracekit.export import export_run
from tracekit.ingest import ingest_traces
from tracekit.store import write_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"


def main() -> None:
    for window in ("eager", "graphed"):
        files = sorted(SAMPLE.glob(f"{window}-rank-*.trace.json.gz"))
        json_bytes = sum(len(gzip.decompress(f.read_bytes())) for f in files)
        run = ingest_traces([str(f) for f in files])
        with tempfile.TemporaryDirectory() as d:
            rp = write_run(run.events, Path(d) / "run.parquet", run.manifest)
            res = export_run(rp, Path(d) / "run.pftrace", flows=("launches", "collectives"))
        print(f"{window}: {len(files)} Kineto JSON files {json_bytes:,} bytes uncompressed, "
              f"{run.events.height:,} run events -> .pftrace {res.bytes_written:,} bytes "
              f"= {res.bytes_written / json_bytes:.3f} of the JSON")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
