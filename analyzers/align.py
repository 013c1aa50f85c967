"""Cross-rank clock alignment from the collectives themselves.

The end of one allreduce is nearly simultaneous on every rank (nobody leaves
before the last one arrived and the data came back), so for collective j and
rank r the recorded end is ``E[j, r] = t_j + o_r + noise`` where ``o_r`` is how
far rank r's clock reads ahead of rank 0's. Least squares over all fully
matched collectives (two-way additive model, ``o_0 = 0``) gives
``o_r = mean_j (E[j, r] - E[j, 0])``; computed on int64 differences so the
absolute epoch (~1.7e18 ns) never passes through a float. One trimming pass
drops collectives whose worst residual exceeds 10x the median absolute residual
(a late kernel-end record, a preempted rank), if at least half remain.

Residual per (j, r): ``E - t_j - o_r``; reported as median |res| and max |res|,
the precision of the alignment.

Convention in the manifest: ``manifest["clock"]["offsets_ns"][str(r)]`` is what
was ADDED to rank r's raw times, so ``raw = start_ns - offsets_ns[r]``; it is
``-o_r``. Aligning an already aligned run composes the offsets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.manifest import hosts as rank_hosts
from tracekit.manifest import typed

from .coll_match import host_collectives, matched_collectives

METHODS: Final = ("collectives", "none")
SAME_HOST_SKEW_NS: Final = 100_000  # auto alignment with unknown hosts: larger offsets mean several hosts
TRIM_FACTOR: Final = 10.0


@dataclass(frozen=True)
class ClockFit:
    """Estimated clock offsets: ``offsets_ns[r]`` = how far rank r's clock reads ahead of rank 0."""

    offsets_ns: dict[int, int]
    residual_median_ns: int
    residual_max_ns: int
    collectives: int  # used in the fit
    rejected: int  # dropped by the trimming pass
    reference_rank: int = 0
    per_rank_residual_max_ns: dict[int, int] = field(default_factory=dict)
    source: str = "collective kernels"  # or "gloo collectives (host ranges)" on a CPU run


def _fit(diff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LS offsets (column means) and residuals of a J x R matrix of ends minus the reference."""
    off = diff.mean(axis=0)
    centred = diff - off
    res = centred - centred.mean(axis=1, keepdims=True)
    return off, res


def estimate_offsets(events: pl.DataFrame) -> ClockFit:
    """Fit per-rank clock offsets from matched collective ends (see module doc)."""
    coll = matched_collectives(events)
    source = "collective kernels"
    if coll.is_empty():  # a CPU run: gloo's collective ranges (coll_match.host_collectives)
        coll, source = host_collectives(events), "gloo collectives (host ranges)"
    if coll.is_empty():
        raise AnalysisError(
            "no collective matched on every rank: cannot estimate clock offsets "
            "(use --align none, or capture with collectives)"
        )
    wide = coll.pivot(on="rank", index="key", values="end_ns", aggregate_function="first")
    ranks = sorted(int(c) for c in wide.columns if c != "key")
    ref = ranks[0]
    ends = wide.select([str(r) for r in ranks]).to_numpy().astype(np.int64)
    diff = (ends - ends[:, :1]).astype(np.float64)  # small numbers: float64 is exact to the ns
    off, res = _fit(diff)
    worst = np.abs(res).max(axis=1)
    med = float(np.median(np.abs(res)))
    rejected = 0
    if med > 0:
        keep = worst <= TRIM_FACTOR * med
        if keep.sum() >= max(1, diff.shape[0] // 2) and not keep.all():
            rejected = int((~keep).sum())
            diff = diff[keep]
            off, res = _fit(diff)
    ares = np.abs(res)
    return ClockFit(
        offsets_ns={r: round(float(o)) for r, o in zip(ranks, off, strict=True)},
        residual_median_ns=round(float(np.median(ares))),
        residual_max_ns=round(float(ares.max())),
        collectives=int(diff.shape[0]),
        rejected=rejected,
        reference_rank=ref,
        per_rank_residual_max_ns={
            r: round(float(ares[:, i].max())) for i, r in enumerate(ranks)
        },
        source=source,
    )


def hosts(manifest: dict[str, Any]) -> set[str]:
    """Distinct known host names of the ranks in a manifest (``tracekit.manifest.hosts``)."""
    return {h for h in rank_hosts(manifest).values() if h}


def auto_method(manifest: dict[str, Any], events: pl.DataFrame | None = None) -> tuple[str, str]:
    """(method, why) for ``--align auto``: ``collectives`` when the ranks ran on more than one
    host. Where the manifest does not name every rank's host (a Kineto trace names none) and
    ``events`` are given, the offsets are fitted and applied only when one exceeds
    SAME_HOST_SKEW_NS: ranks of one host share its clock to the µs, ranks of several hosts are
    NTP-synchronised (typically 0.1-10 ms apart)."""
    by_rank = rank_hosts(manifest)
    known = {h for h in by_rank.values() if h}
    if len(known) > 1:
        return "collectives", f"ranks on {len(known)} hosts"
    if by_rank and all(by_rank.values()):
        return "none", "every rank on one host"
    if events is None:
        return "none", "hosts unknown"
    try:
        fit = estimate_offsets(events)
    except AnalysisError:
        return "none", "hosts unknown and no collective on every rank to fit offsets from"
    worst = max((abs(v) for v in fit.offsets_ns.values()), default=0)
    if worst > SAME_HOST_SKEW_NS:
        return "collectives", f"hosts unknown; fitted offsets up to {worst} ns > {SAME_HOST_SKEW_NS} ns (not one host)"
    return "none", f"hosts unknown; fitted offsets up to {worst} ns <= {SAME_HOST_SKEW_NS} ns (one host's clock)"


def default_method(manifest: dict[str, Any], events: pl.DataFrame | None = None) -> str:
    """The method of ``auto_method``."""
    return auto_method(manifest, events)[0]


def shift_ranks(events: pl.DataFrame, add_ns: dict[int, int]) -> pl.DataFrame:
    """Add ``add_ns[rank]`` to start_ns of every event of that rank (others unchanged)."""
    if not add_ns:
        return events
    table = pl.DataFrame(
        {"rank": list(add_ns), "_add": list(add_ns.values())},
        schema={"rank": events.schema["rank"], "_add": pl.Int64()},
    )
    return (
        events.join(table, on="rank", how="left", maintain_order="left")
        .with_columns((pl.col("start_ns") + pl.col("_add").fill_null(0)).alias("start_ns"))
        .drop("_add")
    )


def align_events(
    events: pl.DataFrame, manifest: dict[str, Any], method: str | None = None
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Shift every rank onto rank 0's clock; record offsets and residual in the manifest.

    ``method``: ``collectives`` (fit offsets), ``none`` (leave times, record zero
    offsets unless the run was aligned before) or None (``auto_method``; its reason goes to
    ``clock["auto"]``).
    Returns new (events, manifest); the inputs are not modified.
    """
    why = None
    if method is None:
        method, why = auto_method(manifest, events)
    if method not in METHODS:
        raise ValueError(f"unknown alignment method {method!r}; choose from {', '.join(METHODS)}")
    man = dict(manifest)
    prev = dict(man.get("clock") or {})
    prev_off = {int(k): int(v) for k, v in (prev.get("offsets_ns") or {}).items()}
    ranks = sorted(int(r) for r in events.get_column("rank").drop_nulls().unique().to_list())
    if method == "none":
        clock = dict(prev)
        clock.setdefault("align", "none")
        clock["offsets_ns"] = {str(r): prev_off.get(r, 0) for r in ranks}
        if why is not None:
            clock["auto"] = why
        man["clock"] = clock
        return events, man
    fit = estimate_offsets(events)
    add = {r: -fit.offsets_ns.get(r, 0) for r in ranks}
    out = shift_ranks(events, add)
    man["clock"] = {
        "align": "collectives",
        "offsets_ns": {str(r): prev_off.get(r, 0) + add[r] for r in ranks},
        "reference_rank": fit.reference_rank,
        "residual_ns": {"median": fit.residual_median_ns, "max": fit.residual_max_ns},
        "residual_max_ns_by_rank": {str(r): v for r, v in fit.per_rank_residual_max_ns.items()},
        "collectives": fit.collectives,
        "collective_source": fit.source,
        "rejected": fit.rejected,
        "unaligned_ranks": [str(r) for r in ranks if r not in fit.offsets_ns],
        "note": "raw start_ns = start_ns - offsets_ns[rank]",
    }
    if why is not None:
        man["clock"]["auto"] = why
    return out, man


def raw_times(events: pl.DataFrame, manifest: dict[str, Any]) -> pl.DataFrame:
    """Undo the recorded alignment: start_ns back on each rank's own clock."""
    off = {int(k): int(v) for k, v in (typed(manifest).clock.get("offsets_ns") or {}).items()}
    return shift_ranks(events, {r: -v for r, v in off.items() if v})
