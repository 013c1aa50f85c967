"""The steps done once, when a run is written: the finalized run.

A run is written by capture (per-rank shards, then merge), ingest, ``align``, ``upgrade``
and ``merge``. Before it is written it goes through :func:`finalize_events`
(``pipeline.py``): kernel categories and collectives by name (``categories.py``,
``names.py``), communicator and order of every collective (``collectives.py``),
phase ranges and the phase instance of every event with the trace's own span
rules (``phases.py``, ``membership.py``), phase ids unique in the run. The
manifest then records ``finalize_version`` (:data:`FINALIZE_VERSION`, ``version.py``: what a
reader of a run uses from here, without importing any step).

Readers (analyzers, exporters, renderers) never re-annotate: they rely on this.
A run written before the current version is read as stored (``Run.outdated`` says so) until
``tracekit upgrade`` (``upgrade.py``) finalizes it again and writes it, once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

_LAZY = {
    "FINALIZE_VERSION": "tracekit.finalize.version",
    "finalize_events": "tracekit.finalize.pipeline",
    "is_finalized": "tracekit.finalize.version",
    "stamp": "tracekit.finalize.version",
}

if TYPE_CHECKING:
    from tracekit.finalize.pipeline import finalize_events
    from tracekit.finalize.version import FINALIZE_VERSION, is_finalized, stamp


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'tracekit.finalize' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


__all__ = ["FINALIZE_VERSION", "finalize_events", "is_finalized", "stamp"]
