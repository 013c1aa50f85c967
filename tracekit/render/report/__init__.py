"""``tracekit report``: one self-contained HTML page of plots (and PNGs) of a run.

A renderer: it consumes the analyzers' results (``collect``), draws them with plotly
(``plots_time``, ``plots_comm``), lays out the page (``page``, ``facts``) and, on request,
writes PNGs (``png``). plotly (and kaleido for PNGs) come with the ``report`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.analyzers.ranked import Executor, Say


@dataclass
class ReportResult:
    path: str
    drawn: list[str]  # plot keys drawn
    missing: dict[str, str]  # plot key -> why not
    pngs: list[str] = field(default_factory=list)
    bytes: int = 0
    outdated: list[Any] = field(default_factory=list)  # tracekit.store.Outdated of each run of an older finalize version


def _documents(a: Any, b: Any, diff: Any) -> dict[str, Any]:
    def docs(side: Any) -> dict[str, Any]:
        att = side.attribute.value
        return {
            "run": side.path,
            "info": side.info,
            "attribute": None if att is None else {k: v for k, v in att.items() if k != "cycles"},
            "gap": side.gap.value,
            "spec": side.spec.value,
            "ranks": side.ranks.value,
            "missing": {k: g.why for k, g in (("attribute", side.attribute), ("gap", side.gap), ("spec", side.spec),
                                              ("ranks", side.ranks), ("composition", side.composition)) if g.why},
        }

    out: dict[str, Any] = {"a": docs(a)}
    if b is not None:
        out["b"] = docs(b)
        out["diff"] = diff.value
        g = a.extra.get("gap_b_run")
        out["gap_b_run"] = None if g is None else g.value
    return out


def build_report(path: str, out: str, *, b_path: str | None = None, png_dir: str | None = None,
                 target_tps: float | None = None, executor: Executor | None = None, kind: str = "local",
                 say: Say | None = None, whole: Say | None = None) -> ReportResult:
    """Write the report of ``path`` (against ``b_path``) to ``out``; PNGs to ``png_dir``. ``executor`` ..
    ``whole``: ``collect``'s (a large or sharded run read rank by rank)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise TracekitError("tracekit report needs plotly: pip install 'tracekit[report]'", path=path) from None
    from tracekit.outputs import atomic_write

    from .collect import collect
    from .common import short_name
    from .facts import diff_section, run_facts
    from .page import Section, meta_line, page
    from .plots_comm import gap_plot, skew_plot, spec_plot
    from .plots_sol import floor_plot, pct_seq_plot
    from .plots_time import bucket_plots, composition_plot, seq_plot

    a, b, diff = collect(path, b_path=b_path, target_tps=target_tps, executor=executor, kind=kind, say=say, whole=whole)
    sides = [("A", a)] + ([("B", b)] if b is not None else [])
    gaps = [gap_plot(a.gap, "gap-verify-decode", f"A's verify vs A's decode ({short_name(a.path)})")]
    if b is not None:
        gaps.append(gap_plot(a.extra["gap_b_run"], "gap-a-vs-b", "A's verify vs B"))
    sections = [
        Section("buckets", "1. Where each rank's time went (per phase)", bucket_plots(a, b)),
        Section("seq", "2. Phase time vs sequence length", [seq_plot(a, b)]),
        Section("cycle", "3. Cycle composition (median and p90 per rank)", [composition_plot(a, b)]),
        Section("skew", "4. Who waits for whom (collective arrival skew)",
                [skew_plot(s, tag if b is not None else "") for tag, s in sides]),
        Section("gap", "5. Gap, bucket by bucket", gaps),
        Section("spec", "6. Speculation economics", [spec_plot(s, tag if b is not None else "") for tag, s in sides]),
        Section("sol", "7. Speed of light (% of SOL: floor estimates, docs/sol.md)",
                [p for tag, s in sides for p in (floor_plot(s, tag if b is not None else ""),
                                                 pct_seq_plot(s, tag if b is not None else ""))]),
        Section("facts", "8. The run's facts", [], "\n".join(run_facts(s, tag) for tag, s in sides)),
        Section("diff", "9. A vs B (diff)", [], diff_section(diff) if b is not None else "",
                None if b is not None else "no --b-run given: run tracekit report RUN --b-run OTHER for the side-by-side plots and the diff table"),
    ]
    plots = [p for s in sections for p in s.plots]
    title = f"tracekit report: {short_name(path)}" + (f" vs {short_name(b_path)}" if b_path else "")
    html = page(title, meta_line(path, b_path), sections, _documents(a, b, diff))
    with atomic_write(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(html)
    res = ReportResult(out, [p.key for p in plots if p.figure is not None],
                       {p.key: str(p.why) for p in plots if p.figure is None}, bytes=len(html.encode()),
                       outdated=[s.outdated for _, s in sides if s.outdated is not None])
    if png_dir is not None:
        from .png import write_pngs

        res.pngs = write_pngs(plots, png_dir)
    return res


__all__ = ["ReportResult", "build_report"]
