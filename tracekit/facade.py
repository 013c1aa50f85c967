"""``tracekit.Run(path)``: the analyses of one run for notebooks, as the typed reports the CLI prints.

    import tracekit
    run = tracekit.Run("eager.parquet")
    rep = run.attribute(phase="verify")          # analyzers.reports.AttributionReport
    rep.by_phase, rep.estimate("verify"), rep.dilation
    run.gap("verify", "decode").explanations     # GapReport
    run.diff(tracekit.Run("graphed.parquet"))    # DiffReport: this run is OLD, the argument NEW

Each method is the command of the same name (``analyzers.analyses``): the same numbers, the same
report object the text, ``--json`` and HTML renderers read. The run is loaded on first use; errors
are ``TracekitError`` naming the file (``.one_line()`` is what the CLI prints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.analyzers.buckets import DEFAULT_LAUNCH_LATENCY_NS
from tracekit.analyzers.stragglers import MIN_SKEW_NS
from tracekit.errors import TracekitError, side_path

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.reports import (
        AttributionReport,
        DiffReport,
        GapReport,
        RanksReport,
        SpecReport,
    )
    from tracekit.store import Run as LoadedRun

class Run:
    """One run (``run.parquet`` or a capture's shard directory), loaded on first use."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._loaded: LoadedRun | None = None

    def __repr__(self) -> str:
        return f"tracekit.Run({self.path!r})"

    @property
    def loaded(self) -> LoadedRun:
        """The run as ``tracekit.store.load_run`` reads it."""
        if self._loaded is None:
            from tracekit.store import load_run

            try:
                self._loaded = load_run(self.path)
            except TracekitError as exc:
                raise exc.located(path=self.path) from None
        return self._loaded

    @property
    def events(self) -> pl.DataFrame:
        return self.loaded.events

    @property
    def manifest(self) -> dict[str, Any]:
        return dict(self.loaded.manifest)

    def attribute(self, phase: str | None = None, rank: int | None = None, *,
                  launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> AttributionReport:
        """``tracekit attribute``: the run's mode, its buckets per phase / rank / instance, estimates, dilation."""
        from tracekit.analyzers import analyses

        try:
            return analyses.attribute(self.events, self.manifest, phase, rank, launch_latency_ns=launch_latency_ns)
        except TracekitError as exc:
            raise exc.located(path=self.path) from None

    def gap(self, a: str = "verify", b: str = "decode", *, b_run: Run | None = None, rank: int | None = None,
            stat: str = "median", launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> GapReport:
        """``tracekit gap``: phase ``a`` against phase ``b`` (of ``b_run`` when given)."""
        from tracekit.analyzers import analyses

        try:
            return analyses.gap(self.events, self.manifest, None if b_run is None else b_run.events,
                                None if b_run is None else b_run.manifest, a=a, b=b, rank=rank,
                                launch_latency_ns=launch_latency_ns, stat=stat)
        except TracekitError as exc:
            raise exc.located(path=side_path(exc, self.path, None if b_run is None else b_run.path)) from None

    def spec(self, *, baseline: Run | None = None, baseline_tps: float | None = None, target_tps: float | None = None,
             rank: int | None = None, draft_tokens: int | None = None, accept_len: float | None = None) -> SpecReport:
        """``tracekit spec``: speculation economics (break-even accept length, accept rate for a target)."""
        from tracekit.analyzers import analyses

        try:
            return analyses.spec(self.events, self.manifest, baseline=None if baseline is None else baseline.events,
                                 baseline_manifest=None if baseline is None else baseline.manifest,
                                 baseline_tps=baseline_tps, target_tps=target_tps, rank=rank,
                                 draft_tokens=draft_tokens, accept_len=accept_len)
        except TracekitError as exc:
            raise exc.located(path=side_path(exc, self.path, None if baseline is None else baseline.path)) from None

    def diff(self, new: Run, phase: str | None = "verify", *, seq_width: int | None = None,
             stat: str = "median") -> DiffReport:
        """``tracekit diff THIS NEW``: what changed from this run (old) to ``new``."""
        from tracekit.analyzers import analyses

        try:
            return analyses.diff(self.events, self.manifest, new.events, new.manifest, phase=phase,
                                 seq_width=seq_width, stat=stat)
        except TracekitError as exc:
            raise exc.located(path=side_path(exc, self.path, new.path, both=f"{self.path}, {new.path}")) from None

    def ranks(self, *, min_skew_ns: int = MIN_SKEW_NS, launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS) -> RanksReport:
        """``tracekit ranks``: stragglers and each rank's GPU state."""
        from tracekit.analyzers import analyses

        return analyses.ranks(self.events, self.manifest, min_skew_ns=min_skew_ns, launch_latency_ns=launch_latency_ns)


__all__ = ["Run"]
