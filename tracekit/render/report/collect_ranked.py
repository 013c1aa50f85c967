"""``collect`` for a run read rank by rank (``analyzers.ranked.choose``: a shard directory, a large file,
an executor other than ``local``): the same documents, no table of every event.

``attribute`` / ``gap`` / ``ranks`` come from one scan and one pass 2 of ``analyzers.ranked``
(``shared_passes``; each apart where that fails, so that each says its own error), and with a B run
``diff`` and A's gap against B from the same passes of both runs; the skew plot's matched collectives
from the pass of ``ranks``; info's document, ``spec``
and the cycle composition from what the scan gathers besides (``analyzers.ranked_light``: info's
per-rank tables and the phase rows, the only rows cycles and decode steps read); ``spec``'s "% of SOL" is attribute's (the same ``try_sol`` of the whole run).
``Unsupported`` where ``analyzers.ranked`` reads the run whole (its module doc): ``collect`` then does.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.analyzers.buckets import DEFAULT_LAUNCH_LATENCY_NS
from tracekit.analyzers.ranked import Executor, Say
from tracekit.errors import TracekitError
from tracekit.store import RankedRun

from .collect import Got, RunDocs, _phases, _try


def _spec(light: Any, rr: RankedRun, att: Got[Any], base: tuple[Any, RankedRun] | None,
          target_tps: float | None) -> Got[dict[str, Any]]:
    from tracekit.analyzers import analyses
    from tracekit.render import spec as render_spec

    sol = (None, att.why) if att.value is None else (att.value.sol, att.value.sol_why)
    bl, bm = (None, None) if base is None else (base[0].phases, base[1].manifest)
    return _try(lambda: render_spec.to_json(analyses.spec(light.phases, rr.manifest, baseline=bl, baseline_manifest=bm,
                                                            target_tps=target_tps, sol=sol)))


def _one(path: str, rr: RankedRun, ex: Executor, target_tps: float | None, say: Say | None, tag: str,
         diff: bool) -> tuple[RunDocs, Any, Got[Any], Any]:
    from tracekit.analyzers import ranked
    from tracekit.analyzers.coll_match import OUT_SCHEMA
    from tracekit.analyzers.composition import cycle_composition
    from tracekit.analyzers.rank_summary import int_hosts
    from tracekit.analyzers.ranked_light import light_of
    from tracekit.analyzers.stragglers import MIN_SKEW_NS
    from tracekit.render import attribute_doc as ad
    from tracekit.render import gap as render_gap
    from tracekit.render import ranks as render_ranks
    from tracekit.summary import info_document

    scanned = ranked.scan(rr, ex, say, tag, light=True)
    light = light_of(scanned)
    try:  # one pass 2 for attribute, gap, ranks (and diff)
        sh: ranked.Shared | None = ranked.shared_passes(scanned, ex, launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS,
                                                        diff=diff, say=say, what=tag)
    except TracekitError:  # each analysis apart, each with its own error (as the whole-run path)
        sh = None
    if sh is not None:
        att_rep = _try(lambda: ranked.attribute_of(rr, sh.scanned, sh.passed, sh.phases, None)[0])
    else:
        att_rep = _try(lambda: ranked.attribute(rr, ex, launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say)[0])
    att = Got(None if att_rep.value is None else ad.document(att_rep.value, "cycle", path), att_rep.why)
    present = _phases(att)
    if "verify" in present and "decode" in present:
        gap = _try(lambda: render_gap.document(
            ranked.shared_gap(rr, sh) if sh is not None and sh.gap else
            ranked.gap(rr, None, ex, a="verify", b="decode", launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say),
            path, path))
    else:
        gap = Got(None, f"verify vs decode needs both phases in the run (phases here: {', '.join(sorted(present)) or 'none'})")
    try:
        if sh is not None:
            rk, arrivals = ranked.ranks_of(rr, sh.scanned, sh.passed), sh.passed.matched
        else:
            rk, arrivals = ranked.ranks_and_arrivals(rr, ex, min_skew_ns=MIN_SKEW_NS,
                                                     launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say)
        ranks: Got[dict[str, Any]] = Got(render_ranks.to_json(rk, int_hosts(rr.manifest)))
    except TracekitError as exc:
        ranks, arrivals = Got(None, exc.message), pl.DataFrame(schema=OUT_SCHEMA)
    docs = RunDocs(path=path, manifest=dict(rr.manifest), info=info_document(light.info, rr.manifest),
                   attribute=att, gap=gap, spec=_spec(light, rr, att_rep, None, target_tps), ranks=ranks,
                   arrivals=arrivals, composition=_try(cycle_composition, light.phases), outdated=rr.outdated)
    return docs, light, att_rep, sh


def collect_ranked(path: str, ra: RankedRun, b_path: str | None, rb: RankedRun | None, ex: Executor, *,
                   target_tps: float | None = None, say: Say | None = None
                   ) -> tuple[RunDocs, RunDocs | None, Got[dict[str, Any]]]:
    """``collect`` of ``ra`` (against ``rb``) rank by rank; ``ranked.Unsupported`` where a run is read whole."""
    from tracekit.analyzers import ranked
    from tracekit.render import diff as render_diff
    from tracekit.render import gap as render_gap

    a, light_a, att_a, sa = _one(path, ra, ex, target_tps, say, "report: ", rb is not None)
    if rb is None or b_path is None:
        return a, None, Got(None, "no --b-run given")
    b, light_b, _, sb = _one(b_path, rb, ex, target_tps, say, "report (B): ", True)
    pb = _phases(b.attribute)
    phase_b = "verify" if "verify" in pb else "decode"
    if "decode" in pb and "draft" not in pb:  # B runs without speculation: its decode step is A's baseline
        a.spec = _spec(light_a, ra, att_a, (light_b, rb), target_tps)
    shared = sa is not None and sb is not None
    a.extra["gap_b_run"] = _try(lambda: render_gap.document(
        ranked.shared_gap(ra, sa, rb, sb, phase_b) if shared and "verify" in sa.sides and phase_b in sb.sides else
        ranked.gap(ra, rb, ex, a="verify", b=phase_b, launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say),
        path, b_path))
    if a.attribute.value is None or b.attribute.value is None:
        diff: Got[dict[str, Any]] = Got(None, "diff needs phase instances in both runs")
    else:
        diff = _try(lambda: render_diff.to_json(
            ranked.diff_of((sb.scanned, sb.phases, sb.passed.tables), (sa.scanned, sa.phases, sa.passed.tables),
                           seq_width=None, stat="median") if sa is not None and sb is not None else
            ranked.diff(rb, ra, ex, phase=None, say=say), b_path, path))
    return a, b, diff


__all__ = ["collect_ranked"]
