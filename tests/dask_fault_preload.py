"""A Dask worker preload (``distributed.worker.preload``) for the worker-death test of tests/test_executor.py.

Loaded by every worker of the command's LocalCluster (the test sets ``DASK_DISTRIBUTED__WORKER__PRELOAD``
to this file: Dask's own configuration, nothing of tracekit reads it). It wraps ``tracekit.store.write_run``
in the worker, which ``write_rank`` looks up when it runs: the worker writing the named rank's shard
begins the shard's temp file, then dies (``os._exit``) as a killed process would, once (a marker file).

``TRACEKIT_TEST_WORKER_FAULT`` = ``RANK:MARKER`` names the rank and the marker file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tracekit.store

FAULT_ENV = "TRACEKIT_TEST_WORKER_FAULT"
# Dask may run a preload file more than once in a worker (re-executing this module): wrap the original once
_write_run = getattr(tracekit.store, "_unwrapped_write_run", tracekit.store.write_run)


def _dying_write_run(events: Any, path: Any, manifest: Any = None, **kw: Any) -> Path:
    spec = os.environ.get(FAULT_ENV, "")
    rank, _, marker = spec.partition(":")
    if marker and os.path.basename(os.fspath(path)) == f"rank-{int(rank):05d}.parquet" and not os.path.exists(marker):
        Path(marker).write_text(str(os.getpid()), encoding="utf-8")
        from tracekit.outputs import temp_beside

        with open(temp_beside(path), "wb") as f:  # a write begun: what a death mid-write leaves
            f.write(b"PAR1 half a shard")
        os._exit(17)
    return _write_run(events, path, manifest, **kw)


tracekit.store._unwrapped_write_run = _write_run  # type: ignore[attr-defined]
tracekit.store.write_run = _dying_write_run  # type: ignore[assignment]
