"""Which rank a trace (or a part of a merged trace) belongs to.

Order of trust: Kineto's ``distributedInfo.rank``; then the file name
(SGLang ``...-TP-<r>[-DP-<d>][-PP-<p>][-EP-<e>][-EXTEND|-DECODE]...``,
``rank-<r>`` / ``rank<r>`` / ``rank_<r>``, ``worker<r>``); then, for SGLang's
``merged-*.trace.json.gz``, the ``[TP00-PP01]`` label merge_profiles puts in
front of every pid. A single input with no rank anywhere is rank 0 (and the
manifest says it was assumed); several such inputs are an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracekit.errors import RankError
from tracekit.limits import rank_problem, world_size_problem
from tracekit.ranklist import format_rank_list

_PART = re.compile(r"(?<![A-Za-z])(TP|DP|PP|EP)-?(\d+)")
_SGLANG = re.compile(r"(?<![A-Za-z])TP-\d+")
_STAGE = re.compile(r"-(EXTEND|DECODE)(?=[-.]|$)")
_GENERIC = re.compile(r"(?<![A-Za-z])(?:rank|worker)[-_]?(\d+)(?!\d)", re.IGNORECASE)
MERGED_LABEL = re.compile(r"^\[(?P<label>[A-Z]{2}\d+(?:-[A-Z]{2}\d+)*)\] ?(?P<pid>.*)$")


@dataclass(frozen=True)
class RankHint:
    """What a name says about its rank."""

    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    ep: int | None = None
    rank: int | None = None  # from rank-<r> / worker<r>
    stage: str | None = None  # SGLang EXTEND / DECODE split

    @property
    def empty(self) -> bool:
        return self.tp is None and self.rank is None


def hint_from_name(name: str) -> RankHint:
    """Parse a file name (or a merged-trace label like ``TP01-DP00``)."""
    stage_m = _STAGE.search(name)
    stage = stage_m.group(1) if stage_m else None
    if _SGLANG.search(name) or re.fullmatch(r"[A-Z]{2}\d+(?:-[A-Z]{2}\d+)*", name):
        parts: dict[str, int] = {}
        for m in _PART.finditer(name):
            parts.setdefault(m.group(1).lower(), int(m.group(2)))
        if "tp" in parts:
            return RankHint(tp=parts["tp"], dp=parts.get("dp"), pp=parts.get("pp"), ep=parts.get("ep"), stage=stage)
    g = _GENERIC.search(name)
    if g:
        return RankHint(rank=int(g.group(1)), stage=stage)
    return RankHint(stage=stage)


@dataclass
class Unit:
    """One rank's worth of input: a file, or one labelled part of a merged file."""

    source: str  # file path (plus " [label]" for merged parts)
    hint: RankHint
    dist_rank: int | None = None  # distributedInfo.rank
    world_size: int | None = None
    rank: int = -1
    rank_source: str = ""
    extra: dict[str, object] = field(default_factory=dict)


def assign_ranks(units: Sequence[Unit], *, allow_missing_ranks: bool = False) -> tuple[int, dict[str, str]]:
    """Set ``unit.rank`` on every unit. Returns (world_size, missing ranks -> reason).

    Several units of one rank are allowed only as SGLang stage files (distinct -EXTEND /
    -DECODE); anything else is a duplicate. Gaps in 0..world_size-1 are an error unless
    ``allow_missing_ranks``.
    """
    named = [u for u in units if u.dist_rank is None]
    tp_sizes = {u.hint.tp for u in named if u.hint.tp is not None}
    tp_size = max(tp_sizes) + 1 if tp_sizes else 1
    pp_vals = {u.hint.pp for u in named if u.hint.pp is not None}
    pp_size = max(pp_vals) + 1 if pp_vals else 1
    # DP replicas that each number their TP ranks from 0 need the DP index in the global rank
    tp_keys = [(u.hint.pp, u.hint.tp) for u in named if u.hint.tp is not None]
    dp_collide = len(tp_keys) != len(set(tp_keys)) and any(u.hint.dp for u in named)
    for u in units:
        h = u.hint
        if u.dist_rank is not None:
            u.rank, u.rank_source = u.dist_rank, "distributedInfo"
        elif h.tp is not None:
            r = (h.pp or 0) * tp_size + h.tp
            if dp_collide:
                r += (h.dp or 0) * tp_size * pp_size
            u.rank, u.rank_source = r, "file name"
        elif h.rank is not None:
            u.rank, u.rank_source = h.rank, "file name"
        elif len(units) == 1:
            u.rank, u.rank_source = 0, "assumed (single input, no distributedInfo and no rank in its name)"
        else:
            raise RankError(
                "cannot tell its rank: no distributedInfo.rank and no TP-<r> / rank-<r> / worker<r> in the name",
                path=u.source,
            )
        if (why := rank_problem(u.rank)) is not None:
            raise RankError(f"{why} ({u.rank_source})", path=u.source)
        if u.world_size is not None and (why := world_size_problem(u.world_size)) is not None:
            raise RankError(f"{why} (distributedInfo)", path=u.source)
    by_rank: dict[int, list[Unit]] = {}
    for u in units:
        by_rank.setdefault(u.rank, []).append(u)
    for r, group in sorted(by_rank.items()):
        if len(group) == 1:
            continue
        stages = [u.hint.stage for u in group]
        if None in stages or len(set(stages)) != len(stages):
            names = ", ".join(u.source for u in group)
            raise RankError(f"duplicate rank {r}: {names}", path=group[1].source, rank=r)
    declared = [u.world_size for u in units if u.world_size]
    world = max([*declared, max(by_rank) + 1])
    missing = {str(r): "no trace for this rank among the inputs" for r in range(world) if r not in by_rank}
    if missing and not allow_missing_ranks:
        first = int(next(iter(missing)))
        raise RankError(
            f"missing rank(s) {format_rank_list(missing)} of world size {world} (use --allow-missing-ranks to ingest anyway)",
            path=units[0].source if len(units) == 1 else None,
            rank=first,
        )
    return world, missing
