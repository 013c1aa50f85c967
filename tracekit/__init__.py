"""tracekit: profiling and trace analysis for speculative decoding in LLM serving.

``import tracekit`` is light: it never imports torch, sglang, nvtx or pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "Run": "tracekit.facade",
    "read_run": "tracekit.store",
    "scan_run": "tracekit.store",
    "load_run": "tracekit.store",
    "write_run": "tracekit.store",
    "read_manifest": "tracekit.store",
    "TracekitError": "tracekit.errors",
    "ingest_traces": "tracekit.ingest",
    "export_run": "tracekit.export",
    "finalize_events": "tracekit.finalize.pipeline",
}

if TYPE_CHECKING:
    from tracekit.errors import TracekitError
    from tracekit.export import export_run
    from tracekit.facade import Run
    from tracekit.finalize.pipeline import finalize_events
    from tracekit.ingest import ingest_traces
    from tracekit.store import load_run, read_manifest, read_run, scan_run, write_run


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = [
    "Run",
    "TracekitError",
    "__version__",
    "export_run",
    "finalize_events",
    "ingest_traces",
    "load_run",
    "read_manifest",
    "read_run",
    "scan_run",
    "write_run",
]
