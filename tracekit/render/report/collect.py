"""Gather what the report draws: the analyzers' results, as the commands' ``--json`` documents.

The report computes nothing of its own: every figure on the page comes from the same
analyzer call and the same ``to_json`` as ``tracekit attribute / gap / spec / ranks /
info / diff --json`` (plus the matched collectives behind ``ranks`` and the cycle table
behind ``spec``, for the per-collective and per-cycle plots). An analysis a run cannot
support leaves its error message as the reason its plots are missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import polars as pl

from tracekit.analyzers.coll_match import matched_collectives
from tracekit.analyzers.composition import cycle_composition
from tracekit.errors import TracekitError
from tracekit.store import load_run

if TYPE_CHECKING:
    from tracekit.analyzers.ranked import Executor, Say

T = TypeVar("T")


@dataclass(frozen=True)
class Got(Generic[T]):
    """An analysis result, or why the run could not give it."""

    value: T | None
    why: str | None = None


def _try(fn: Any, *args: Any, **kwargs: Any) -> Got[Any]:
    try:
        return Got(fn(*args, **kwargs))
    except TracekitError as exc:
        return Got(None, exc.message)


@dataclass
class RunDocs:
    """One run's documents (each the matching command's ``--json``) and tables."""

    path: str
    manifest: dict[str, Any]
    info: dict[str, Any]
    attribute: Got[dict[str, Any]]
    gap: Got[dict[str, Any]]
    spec: Got[dict[str, Any]]
    ranks: Got[dict[str, Any]]
    arrivals: pl.DataFrame  # matched collectives: one row per (collective, rank), wait_ns
    composition: Got[pl.DataFrame]
    outdated: Any = None  # tracekit.store.Outdated for a run of an older finalize version
    extra: dict[str, Any] = field(default_factory=dict)


def attribute_doc(events: pl.DataFrame, manifest: dict[str, Any], path: str) -> dict[str, Any]:
    """``tracekit attribute RUN --by cycle --json`` (GPU, host or timing mode, as the command picks)."""
    from tracekit.analyzers import analyses
    from tracekit.render import attribute_doc as ad

    return ad.document(analyses.attribute(events, manifest), "cycle", path)


def gap_doc(a: pl.DataFrame, a_manifest: dict[str, Any], b: pl.DataFrame | None, b_manifest: dict[str, Any] | None,
            a_path: str, b_path: str | None, phase_a: str, phase_b: str) -> dict[str, Any]:
    """``tracekit gap A [--b-run B] --a phase_a --b phase_b --json``."""
    from tracekit.analyzers import analyses
    from tracekit.render import gap as render_gap

    rep = analyses.gap(a, a_manifest, b, b_manifest, a=phase_a, b=phase_b)
    return render_gap.document(rep, a_path, b_path or a_path)


def spec_doc(events: pl.DataFrame, manifest: dict[str, Any], baseline: pl.DataFrame | None,
             baseline_manifest: dict[str, Any] | None, target_tps: float | None) -> dict[str, Any]:
    """``tracekit spec RUN [--baseline B] [--target-tps T] --json``."""
    from tracekit.analyzers import analyses
    from tracekit.render import spec as render_spec

    return render_spec.to_json(analyses.spec(events, manifest, baseline=baseline, baseline_manifest=baseline_manifest,
                                             target_tps=target_tps))


def ranks_doc(events: pl.DataFrame, manifest: dict[str, Any]) -> dict[str, Any]:
    """``tracekit ranks RUN --json``."""
    from tracekit.analyzers import analyses
    from tracekit.analyzers.rank_summary import int_hosts
    from tracekit.render import ranks as render_ranks

    return render_ranks.to_json(analyses.ranks(events, manifest), int_hosts(manifest))


def diff_doc(a: RunDocs, a_events: pl.DataFrame, b: RunDocs, b_events: pl.DataFrame) -> dict[str, Any]:
    """``tracekit diff B A --phase all --json``: B (--b-run) is the old run, A (the report's run) the new one, so
    that every delta on the page is A minus B, as the gap's."""
    from tracekit.analyzers import analyses
    from tracekit.render import diff as render_diff

    return render_diff.to_json(analyses.diff(b_events, b.manifest, a_events, a.manifest, phase=None), b.path, a.path)


def _phases(doc: Got[dict[str, Any]]) -> set[str]:
    return set() if doc.value is None else {p["phase"] for p in doc.value["phases"]}


def collect(path: str, *, b_path: str | None = None, target_tps: float | None = None, executor: Executor | None = None,
            kind: str = "local", say: Say | None = None,
            whole: Say | None = None) -> tuple[RunDocs, RunDocs | None, Got[dict[str, Any]]]:
    """Every document of the run (and of ``b_path``), and their diff (``why`` set without ``b_path``).

    With ``executor`` (a ``tracekit.executor`` executor of ``kind``), a run that ``analyzers.ranked.choose``
    picks is read rank by rank (``collect_ranked``; ``b_path`` then too), ``say`` its progress; else whole,
    ``whole`` told why when rank by rank was chosen but does not apply."""
    from tracekit.summary import run_summary

    if executor is not None:
        from tracekit.analyzers.ranked import Unsupported, choose
        from tracekit.store import open_ranked

        from .collect_ranked import collect_ranked

        rra = choose(path, kind)
        rrb = open_ranked(b_path) if rra is not None and b_path is not None else None
        if rra is not None and (b_path is None or rrb is not None):
            try:
                return collect_ranked(path, rra, b_path, rrb, executor, target_tps=target_tps, say=say)
            except Unsupported as why:
                if whole is not None:
                    whole(str(why))
    ra = load_run(path)
    rb = load_run(b_path) if b_path is not None else None

    def one(run_path: str, r: Any, other: Any | None) -> RunDocs:
        att = _try(attribute_doc, r.events, r.manifest, run_path)
        present = _phases(att)
        if "verify" in present and "decode" in present:
            gap = _try(gap_doc, r.events, r.manifest, None, None, run_path, None, "verify", "decode")
        else:
            gap = Got(None, f"verify vs decode needs both phases in the run (phases here: {', '.join(sorted(present)) or 'none'})")
        return RunDocs(
            path=run_path,
            manifest=r.manifest,
            info=run_summary(r.events, r.manifest),
            attribute=att,
            gap=gap,
            spec=_try(spec_doc, r.events, r.manifest, None, None, target_tps),
            ranks=_try(ranks_doc, r.events, r.manifest),
            arrivals=matched_collectives(r.events),
            composition=_try(cycle_composition, r.events),
            outdated=r.outdated,
        )

    a = one(path, ra, rb)
    if rb is None or b_path is None:
        return a, None, Got(None, "no --b-run given")
    b = one(b_path, rb, ra)
    # A's verify against B: B's decode when B runs without speculation, else B's verify
    pb = _phases(b.attribute)
    phase_b = "verify" if "verify" in pb else "decode"
    if "decode" in pb and "draft" not in pb:  # B runs without speculation: its decode step is A's baseline
        a.spec = _try(spec_doc, ra.events, ra.manifest, rb.events, rb.manifest, target_tps)
    a.extra["gap_b_run"] = _try(gap_doc, ra.events, ra.manifest, rb.events, rb.manifest, path, b_path, "verify", phase_b)
    if a.attribute.value is None or b.attribute.value is None:
        diff: Got[dict[str, Any]] = Got(None, "diff needs phase instances in both runs")
    else:
        diff = _try(diff_doc, a, ra.events, b, rb.events)
    return a, b, diff
