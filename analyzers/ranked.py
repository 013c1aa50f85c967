"""``attribute``, ``ranks``, ``gap``, ``diff`` and ``sol``'s inputs rank by rank: no task holds more than one
rank's events, the reports are the ones ``analyzers.analyses`` builds from the whole table (tests compare them).

Every task is a module-level function run through ``tracekit.executor`` (in this process one after
another, or on Dask workers) that reads one rank's events itself (``store.read_rank``: its shard, or
its rows of a one-file run through the file's row-group statistics):

1. ``scan_rank``: what the driver needs before per-rank work: the rank's distinct phase ids (for
   ``unique_phase_ids``' decision), the phases of its phase ranges, its first GPU event (the mode),
   its collective rows (kernels with a ``coll_seq``, rows with a message size) with a marker row
   naming the rank, its GPU time without a phase, whether it has host instances and thread ids.
2. The driver matches the collectives across ranks (``match_collectives``, ``matched_collectives``)
   and finds the late ones (``collective_skew``); then ``rank_pass`` per rank: its instance table
   (``attribute_instances`` with its matched rows), its segments before the late collectives
   (``stragglers.segments``), the kernel families there (``family_segments``, for ``ranks``), the
   kernel families of gap's instances (``gap.family_times``), diff's kernel counts per family and
   instance (``diff.family_counts``) and NCCL kernels per name (``nccl_mix.nccl_counts``).
3. The driver assembles the report from those tables (``attribution_tables``, ``straggler_tables``,
   ``gap_tables``, ``diff_tables``) as the whole-run path does.

What travels: per rank its collective rows, instance rows, segment and family rows (kilobytes on the
scale sets); never an event table. What this does not cover raises ``Unsupported`` and the caller
reads the run whole: host (CPU) and timing runs for ``attribute`` and ``gap``, a ``--phase`` that
selects ranges by name, a run without phase ranges (attributed whole).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import polars as pl

from tracekit.executor import DaskExecutor, LocalExecutor, run_each
from tracekit.schema import GPU_KINDS, owned
from tracekit.store import RankedRun, RankFile, open_ranked, read_rank

from .buckets import DEFAULT_LAUNCH_LATENCY_NS
from .reports import AttributionReport, DiffReport, GapReport, Mode, RanksReport

Say = Callable[[str], None]
R = TypeVar("R")
Executor = LocalExecutor | DaskExecutor

# one-file runs larger than this on disk are read rank by rank with --executor local (about 2.5 M events at
# the scale sets' compression, ~6.5 B per event); smaller ones are read whole (cheaper in CPU);
# TRACEKIT_ANALYSIS_WHOLE_MB moves the line
WHOLE_MAX_MB: Final = 16
_COLL_EXTRA: Final = ("coll_bytes",)


class Unsupported(Exception):
    """This run or selection is read whole (module doc); the message says why."""


def choose(path: str, executor: str) -> RankedRun | None:
    """The rule (docs/scale.md): rank by rank when ``executor`` is not ``local``, the run is a shard
    directory, or a one-file run larger than ``WHOLE_MAX_MB`` MiB (``TRACEKIT_ANALYSIS_WHOLE_MB``);
    None: read it whole."""
    from tracekit import settings
    from tracekit.urls import is_url

    if is_url(path):
        return None
    mb = settings.current().analysis_whole_mb
    try:
        big = os.path.isdir(path) or os.stat(path).st_size > (WHOLE_MAX_MB if mb is None else mb) << 20
    except OSError:
        return None  # the whole-run read says what is wrong
    return open_ranked(path) if executor != "local" or big else None


# --- pass 1 ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RankScan:
    """``scan_rank``'s result (module doc, 1)."""

    rank: int
    phase_ids: pl.Series
    phases: tuple[str, ...]
    gpu: pl.DataFrame  # rank, kind of its first GPU event (empty: none)
    coll: pl.DataFrame  # its collective rows, then a marker row (rank only)
    unphased: tuple[int, int, int, int]  # joins.unphased_parts
    host_instances: bool
    tids: bool
    info: Any = None  # light: summary.InfoParts of the rank (the report's info document)
    phase_rows: pl.DataFrame | None = None  # light: phase_rows.phase_rows (the report's spec, cycle composition)


def scan_rank(f: RankFile, light: bool = False, info: bool = True) -> RankScan:
    """Pass 1 of one rank (module doc); ``light``: also its ``phase_rows`` and, with ``info``, its ``info``
    (``ranked_light``)."""
    from .attribution import _COLL_COLS, phase_names
    from .joins import unphased_parts
    from .phase_rows import phase_instances

    ev = read_rank(f)
    cols = [*_COLL_COLS, *_COLL_EXTRA]
    coll = ev.filter(pl.col("coll_seq").is_not_null() | (pl.col("coll_bytes").is_not_null()
                                                        & (pl.col("coll_bytes") > 0))).select(cols)
    if ev.height:  # the rank is named even without a collective (matched_collectives counts ranks)
        marker = pl.DataFrame({"rank": [f.rank]}, schema={"rank": coll.schema["rank"]})
        coll = pl.concat([coll, marker], how="diagonal")
    inst = phase_instances(ev)
    extra: dict[str, Any] = {}
    if light:
        from tracekit.summary import info_parts

        from .phase_rows import phase_rows

        extra = {"info": info_parts(ev) if info else None, "phase_rows": phase_rows(ev)}
    return RankScan(
        f.rank, ev.get_column("phase_id").drop_nulls().unique().sort(), tuple(phase_names(ev)),
        ev.filter(pl.col("kind").is_in(list(GPU_KINDS))).select("rank", "kind").head(1), owned(coll),
        unphased_parts(ev), bool((inst.get_column("source") == "host").any()),
        ev.get_column("tid").null_count() < ev.height, **extra)


@dataclass(frozen=True)
class Scanned:
    """A run after pass 1: its ranks' scans and the cross-rank facts drawn from them."""

    run: RankedRun
    scans: tuple[RankScan, ...]
    top: int | None  # unique_phase_ids' shift, None: ids kept
    coll: pl.DataFrame  # every rank's collective rows (phase ids as the whole run reads them)

    @property
    def ranks(self) -> list[int]:
        return [s.rank for s in self.scans if s.coll.height]

    @property
    def present(self) -> list[str]:
        return sorted({p for s in self.scans for p in s.phases})

    @property
    def gpu(self) -> pl.DataFrame:
        return pl.concat([s.gpu for s in self.scans])

    @property
    def has_tid(self) -> bool:
        return any(s.host_instances for s in self.scans) and any(s.tids for s in self.scans)

    def files(self) -> list[RankFile]:
        return list(self.run.ranks)

    def phases_for(self, phase: str | None) -> list[str]:
        """``prepare``'s phase selection; Unsupported where it would attribute ranges or the whole trace."""
        from .attribution import select_phases
        from .whole_trace import WHOLE_TRACE_PHASE

        present = self.present
        if not present:
            raise Unsupported("the run has no phase ranges (attributed as a whole)")
        hits = select_phases(present, phase)
        if not hits:
            raise Unsupported(f"--phase {phase!r} names no phase (ranges are selected by name on the whole run)")
        if hits == [WHOLE_TRACE_PHASE]:
            raise Unsupported(f"a phase named {WHOLE_TRACE_PHASE!r}")
        return hits


def each_rank(run: RankedRun, executor: Executor, task: Callable[[RankFile], R], say: Say | None,
              what: str) -> list[R]:
    """``task`` of every rank of ``run`` through ``executor``, in rank order; a progress line per rank done
    (``{what}: rank R done, i/n``)."""
    got = []
    n = len(run.ranks)
    for i, (f, r) in enumerate(zip(run.ranks, run_each(executor, task, [(f,) for f in run.ranks]), strict=True), 1):
        got.append(r)
        if say is not None:
            say(f"{what}: rank {f.rank} done, {i}/{n}")
    return got


def unique_ids(ids_by_rank: Sequence[pl.Series], frames: Sequence[pl.DataFrame]) -> tuple[int | None, pl.DataFrame]:
    """Every rank's ``frames`` in one, phase ids as the whole run reads them (``unique_phase_ids``' rule
    from each rank's distinct ids), and the ``top`` of that shift (None: ids kept)."""
    from tracekit.finalize.version import phase_id_top, shift_phase_ids

    top = phase_id_top(ids_by_rank)
    out = pl.concat(frames, how="vertical", rechunk=True)
    return top, out if top is None else shift_phase_ids(out, top)


def scan(run: RankedRun, executor: Executor, say: Say | None = None, what: str = "", *, light: bool = False,
         info: bool = True) -> Scanned:
    """Pass 1 over every rank of ``run`` (``light``, ``info``: ``scan_rank``'s)."""
    from functools import partial

    scans = each_rank(run, executor, partial(scan_rank, light=light, info=info) if light else scan_rank, say,
                      f"{what}pass 1 (collectives, phases)")
    top, coll = unique_ids([s.phase_ids for s in scans], [s.coll for s in scans])
    return Scanned(run, tuple(scans), top, coll)


# --- pass 2 ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Wanted:
    """What ``rank_pass`` computes besides the instance table (of ``phases``; None: none)."""

    phases: Sequence[str] | None = None
    segments: bool = False  # the segments before the late collectives (attribute, ranks)
    kernels: bool = False  # their kernel families (ranks)
    sides: Sequence[tuple[Sequence[str], int | None]] = ()  # gap: (phases, rank) whose family_times
    counts: Sequence[str] | None = None  # diff: the phases whose family_counts
    nccl: bool = False  # diff: nccl_counts


def rank_pass(f: RankFile, top: int | None, coll: pl.DataFrame, matched: pl.DataFrame, keys: pl.Series,
              launch_latency_ns: int, has_tid: bool, want: Wanted) -> dict[str, pl.DataFrame]:
    """Pass 2 of one rank (module doc): ``coll`` / ``matched`` its rows of ``match_collectives`` /
    ``matched_collectives``; ``keys`` the late collectives; ``want`` what to compute."""
    from tracekit.finalize.version import shift_phase_ids

    from .attribution import attribute_instances
    from .diff import family_counts
    from .gap import family_times
    from .nccl_mix import nccl_counts
    from .stragglers import family_segments, segments

    ev = read_rank(f)
    if top is not None:
        ev = shift_phase_ids(ev, top)
    out: dict[str, pl.DataFrame] = {}
    if want.segments:
        out["segments"] = segments(ev, matched, launch_latency_ns, keys=keys)
    if want.kernels:
        out["families"] = family_segments(ev, matched, keys)
    if want.nccl:
        out["nccl"] = nccl_counts(ev)
    if want.phases is not None:
        inst = attribute_instances(ev, want.phases, launch_latency_ns=launch_latency_ns, collectives=coll,
                                   has_tid=has_tid)
        out["instances"] = inst
        for i, (side_phases, rank) in enumerate(want.sides):
            sel = inst.filter(pl.col("phase").is_in(list(side_phases)))
            if rank is not None:
                sel = sel.filter(pl.col("rank") == rank)
            out[f"side{i}"] = family_times(ev, sel)
        if want.counts is not None:
            out["counts"] = family_counts(ev, inst.filter(pl.col("phase").is_in(list(want.counts))))
    return out


@dataclass(frozen=True)
class Passed:
    """Pass 2's tables of every rank, in rank order, with the collectives they were computed against."""

    coll: pl.DataFrame  # match_collectives over the run
    matched: pl.DataFrame  # matched_collectives
    skew: pl.DataFrame  # collective_skew
    tables: dict[str, pl.DataFrame]


def second_pass(s: Scanned, executor: Executor, want: Wanted, *, min_skew_ns: int, launch_latency_ns: int,
                say: Say | None = None, what: str = "") -> Passed:
    """The driver's matching, then ``rank_pass`` over every rank (module doc, 2)."""
    from .attribution import matched
    from .coll_match import matched_collectives
    from .stragglers import collective_skew, late_keys

    coll = matched(s.coll)
    mc = matched_collectives(pl.DataFrame({"rank": s.ranks}, schema={"rank": pl.Int32()}), coll)
    skew = collective_skew(mc, min_skew_ns)
    keys = late_keys(skew)
    by_rank_c = coll.partition_by("rank", as_dict=True)
    by_rank_m = mc.partition_by("rank", as_dict=True)
    calls = [(f, s.top, by_rank_c.get((f.rank,), coll.clear()), by_rank_m.get((f.rank,), mc.clear()), keys,
              launch_latency_ns, s.has_tid, want) for f in s.files()]
    parts: dict[str, list[pl.DataFrame]] = {}
    for i, (f, got) in enumerate(zip(s.files(), run_each(executor, rank_pass, calls), strict=True), 1):
        for k, v in got.items():
            parts.setdefault(k, []).append(v)
        if say is not None:
            say(f"{what}pass 2 (per-rank tables): rank {f.rank} done, {i}/{len(calls)}")
    # one chunk per table (a frame of one chunk per rank is slow to filter: the report's estimates filter
    # the instances once per phase and rank)
    return Passed(coll, mc, skew, {k: pl.concat(v, how="vertical", rechunk=True) for k, v in parts.items()})


# --- the commands --------------------------------------------------------------------------------


def _gpu_mode(frames: Sequence[pl.DataFrame], manifest: Mapping[str, Any] | None, sel: tuple[int, ...] | None) -> None:
    from .reports import detect_mode

    mode = detect_mode(frames, manifest, sel)
    if mode is not Mode.GPU:
        raise Unsupported(f"a {mode.value} run")


def attribute(run: RankedRun, executor: Executor, phase: str | None = None, rank: int | None = None, *,
              launch_latency_ns: int, say: Say | None = None, scanned: Scanned | None = None,
              what: str = "attribute: ") -> tuple[AttributionReport, Any]:
    """``analyses.attribute`` rank by rank, and the ``joins.Unphased`` of the CLI's last line (of ``rank``);
    ``scanned``: the run's pass 1 when the caller made it already (``ranked_light.spec_inputs``)."""
    s, p, phases = _attribute_passes(run, executor, phase, rank, launch_latency_ns, say, scanned, what)
    return attribute_of(run, s, p, phases, rank)


def _attribute_passes(run: RankedRun, executor: Executor, phase: str | None, rank: int | None,
                      launch_latency_ns: int, say: Say | None, scanned: Scanned | None,
                      what: str) -> tuple[Scanned, Passed, list[str]]:
    """``attribute``'s two passes (pass 1 unless ``scanned``) and its phases; ``Unsupported`` where it reads
    the run whole."""
    from .stragglers import MIN_SKEW_NS

    s = scanned if scanned is not None else scan(run, executor, say, what)
    _gpu_mode([s.gpu], run.manifest, None if rank is None else (rank,))
    phases = s.phases_for(phase)
    p = second_pass(s, executor, Wanted(phases, segments=True), min_skew_ns=MIN_SKEW_NS,
                    launch_latency_ns=launch_latency_ns, say=say, what=what)
    return s, p, phases


def attribute_of(run: RankedRun, s: Scanned, p: Passed, phases: list[str],
                 rank: int | None) -> tuple[AttributionReport, Any]:
    """``attribute``'s report from its passes (``phases``' instances and the segments in ``p``)."""
    from .analyses import gpu_attribution
    from .joins import unphased_of
    from .sol.run import try_sol

    sel = None if rank is None else (rank,)
    g = _attribution_tables(s, p, phases, rank)
    sol, why = try_sol(s.coll, dict(run.manifest), instances=g["instances"])
    unphased = unphased_of(x.unphased for x in s.scans if rank is None or x.rank == rank)
    return gpu_attribution(g, run.manifest, sel, sol, why), unphased


def _attribution_tables(s: Scanned, p: Passed, phases: list[str], rank: int | None) -> dict[str, Any]:
    """``attribution_tables`` of ``phases`` (of ``rank``; None: every rank) from the passes."""
    from .attribution import attribution_tables, only_rank
    from .stragglers import phase_stragglers, straggler_tables

    inst = only_rank(p.tables["instances"], rank, phases)
    view = straggler_tables(s.ranks, p.matched, p.skew, p.tables["segments"], None)
    return attribution_tables(inst, phase_stragglers(view, inst.get_column("phase").unique().to_list()), p.coll,
                              False)


def sol_inputs(run: RankedRun, executor: Executor, *, say: Say | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What ``sol_of_run`` reads of a run, rank by rank: every rank's collective rows (its allreduce fit) and
    attribute's instance table of every phase at the default launch latency (as its whole read computes it);
    ``Unsupported`` where ``attribute`` reads the run whole."""
    s, p, phases = _attribute_passes(run, executor, None, None, DEFAULT_LAUNCH_LATENCY_NS, say, None, "sol: ")
    return s.coll, _attribution_tables(s, p, phases, None)["instances"]


def ranks(run: RankedRun, executor: Executor, *, min_skew_ns: int, launch_latency_ns: int,
          say: Say | None = None) -> RanksReport:
    """``analyses.ranks`` rank by rank."""
    return ranks_and_arrivals(run, executor, min_skew_ns=min_skew_ns, launch_latency_ns=launch_latency_ns,
                              say=say)[0]


def ranks_and_arrivals(run: RankedRun, executor: Executor, *, min_skew_ns: int, launch_latency_ns: int,
                       say: Say | None = None) -> tuple[RanksReport, pl.DataFrame]:
    """``ranks`` and the run's ``matched_collectives`` it was computed from (the report's skew plot)."""
    s = scan(run, executor, say, "ranks: ")
    p = second_pass(s, executor, Wanted(segments=True, kernels=True), min_skew_ns=min_skew_ns,
                    launch_latency_ns=launch_latency_ns, say=say, what="ranks: ")
    return ranks_of(run, s, p), p.matched


def ranks_of(run: RankedRun, s: Scanned, p: Passed) -> RanksReport:
    """``ranks``' report from its passes (the segments and their kernel families in ``p``)."""
    from .analyses import ranks_report
    from .stragglers import straggler_tables

    return ranks_report(straggler_tables(s.ranks, p.matched, p.skew, p.tables["segments"], p.tables["families"]),
                        run.manifest)


def gap(run_a: RankedRun, run_b: RankedRun | None, executor: Executor, *, a: str = "verify", b: str = "decode",
        rank: int | None = None, launch_latency_ns: int, stat: str = "median", say: Say | None = None) -> GapReport:
    """``analyses.gap`` rank by rank (B from ``run_b`` when given, else from ``run_a``)."""
    from .analyses import gap_timing
    from .stragglers import MIN_SKEW_NS

    sa = scan(run_a, executor, say, "gap: ")
    sb = scan(run_b, executor, say, "gap (B): ") if run_b is not None else sa
    sel = None if rank is None else (rank,)
    _gpu_mode([sa.gpu, sb.gpu], None, sel)
    bm = run_b.manifest if run_b is not None else run_a.manifest
    timing = gap_timing(run_a.manifest, bm, a, b, sel)
    pa, pb = sa.phases_for(a), sb.phases_for(b)
    sides = [(pa, rank)] if run_b is not None else [(pa, rank), (pb, rank)]
    ka = second_pass(sa, executor, Wanted(sa.present, sides=sides), min_skew_ns=MIN_SKEW_NS,
                     launch_latency_ns=launch_latency_ns, say=say, what="gap: ").tables
    kb = ka if run_b is None else second_pass(sb, executor, Wanted(sb.present, sides=[(pb, rank)]),
                                              min_skew_ns=MIN_SKEW_NS, launch_latency_ns=launch_latency_ns, say=say,
                                              what="gap (B): ").tables
    return gap_of(run_a, run_b, sa, sb, ka, kb, a=a, b=b, rank=rank, stat=stat, timing=timing)


def gap_of(run_a: RankedRun, run_b: RankedRun | None, sa: Scanned, sb: Scanned, ka: Mapping[str, pl.DataFrame],
           kb: Mapping[str, pl.DataFrame], *, a: str, b: str, rank: int | None, stat: str, timing: Any) -> GapReport:
    """``gap``'s report from its passes' tables (``ka``: A's instances and ``side0`` its families, ``side1``
    B's when B is from ``run_a``; ``kb``: B's when from ``run_b``)."""
    from tracekit.errors import AnalysisError

    from .analyses import _gap_sol, gpu_gap
    from .gap import gap_tables, side_instances

    sel = None if rank is None else (rank,)
    bm = run_b.manifest if run_b is not None else run_a.manifest
    pa, pb = sa.phases_for(a), sb.phases_for(b)
    fam_b = kb["side1"] if run_b is None else kb["side0"]
    try:
        inst_a = side_instances(ka["instances"].filter(pl.col("phase").is_in(pa)), a, rank)
    except AnalysisError as exc:
        raise exc.located(side="A") from None
    try:
        inst_b = side_instances(kb["instances"].filter(pl.col("phase").is_in(pb)), b, rank)
    except AnalysisError as exc:
        raise exc.located(side="B") from None
    g = gap_tables(inst_a, inst_b, ka["side0"], fam_b, a=a, b=b, stat=stat)
    splits, why = _gap_sol(sa.coll, run_a.manifest, None if run_b is None else sb.coll, bm, a, b, g["buckets"],
                           float(g["total_delta_ns"]), ka["instances"], None if run_b is None else kb["instances"])
    return gpu_gap(g, stat, timing, run_a.manifest, bm, a, b, sel, splits, why)


@dataclass(frozen=True)
class Shared:
    """One scan and one pass 2 of a run for ``attribute`` (every phase), ``ranks``, ``gap`` (verify
    against decode or another run's phase) and, asked for, ``diff`` (``phase=None``), at the default
    settings: what the report reads (the run read twice, not twice per analysis)."""

    scanned: Scanned
    passed: Passed
    phases: list[str]
    sides: dict[str, str]  # verify / decode (those present) -> the table of its instances' kernel families

    @property
    def gap(self) -> bool:
        """verify and decode both present: ``shared_gap`` of the run alone applies."""
        return "verify" in self.sides and "decode" in self.sides


def shared_passes(s: Scanned, executor: Executor, *, launch_latency_ns: int, diff: bool = False,
                  say: Say | None = None, what: str = "") -> Shared:
    """``Shared`` of the run of ``s`` (``diff``: with diff's tables); ``Unsupported`` where ``attribute``
    reads the run whole."""
    from .stragglers import MIN_SKEW_NS

    _gpu_mode([s.gpu], s.run.manifest, None)
    phases = s.phases_for(None)
    names = [x for x in ("verify", "decode") if x in phases]
    want = Wanted(phases, segments=True, kernels=True, sides=[(s.phases_for(x), None) for x in names],
                  counts=phases if diff else None, nccl=diff)
    p = second_pass(s, executor, want, min_skew_ns=MIN_SKEW_NS, launch_latency_ns=launch_latency_ns, say=say,
                    what=what)
    return Shared(s, p, phases, {x: f"side{i}" for i, x in enumerate(names)})


def shared_gap(run_a: RankedRun, sa: Shared, run_b: RankedRun | None = None, sb: Shared | None = None,
               b: str = "decode") -> GapReport:
    """``gap(run_a, run_b, a="verify", b=b)`` at the default settings from ``Shared`` (A's verify and B's
    ``b`` among their ``sides``; without ``run_b``: ``sa.gap``)."""
    from .analyses import gap_timing

    ta = sa.passed.tables
    ka = {"instances": ta["instances"], "side0": ta[sa.sides["verify"]]}
    if run_b is None or sb is None:
        kb = {**ka, "side1": ta[sa.sides[b]]}
        ka = kb
    else:
        tb = sb.passed.tables
        kb = {"instances": tb["instances"], "side0": tb[sb.sides[b]]}
    bm = run_a.manifest if run_b is None else run_b.manifest
    return gap_of(run_a, run_b, sa.scanned, (sb or sa).scanned, ka, kb, a="verify", b=b, rank=None, stat="median",
                  timing=gap_timing(run_a.manifest, bm, "verify", b, None))


def diff(run_o: RankedRun, run_n: RankedRun, executor: Executor, *, phase: str | None = "verify",
         seq_width: int | None = None, stat: str = "median", say: Say | None = None) -> DiffReport:
    """``analyses.diff`` rank by rank (OLD, then NEW)."""
    from .stragglers import MIN_SKEW_NS

    runs = []
    for run, tag in ((run_o, "diff (old): "), (run_n, "diff (new): ")):
        s = scan(run, executor, say, tag)
        ph = s.phases_for(phase)
        t = second_pass(s, executor, Wanted(s.present, counts=ph, nccl=True), min_skew_ns=MIN_SKEW_NS,
                        launch_latency_ns=DEFAULT_LAUNCH_LATENCY_NS, say=say, what=tag).tables
        runs.append((s, ph, t))
    return diff_of(runs[0], runs[1], seq_width=seq_width, stat=stat)


def diff_of(old: tuple[Scanned, list[str], Mapping[str, pl.DataFrame]],
            new: tuple[Scanned, list[str], Mapping[str, pl.DataFrame]], *, seq_width: int | None,
            stat: str) -> DiffReport:
    """``diff``'s report from each run's scan, selected phases and pass 2 tables (instances, counts, nccl)."""
    from .analyses import diff_report
    from .diff import diff_tables
    from .nccl_mix import mix_of
    from .sol.run import try_sol

    (so, po, to), (sn, pn, tn) = old, new
    run_o, run_n = so.run, sn.run
    view = diff_tables(to["instances"].filter(pl.col("phase").is_in(po)),
                       tn["instances"].filter(pl.col("phase").is_in(pn)), to["counts"], tn["counts"], seq_width, stat)
    om, nm = dict(run_o.manifest), dict(run_n.manifest)
    sol_old, why = try_sol(so.coll, om, instances=to["instances"])
    sol_new, why_new = try_sol(sn.coll, nm, instances=tn["instances"]) if sol_old is not None else (None, None)
    return diff_report(view, om, nm, stat, (sol_old, sol_new, why or why_new), mix_of(to["nccl"]), mix_of(tn["nccl"]))


__all__ = ["WHOLE_MAX_MB", "Passed", "RankScan", "Scanned", "Shared", "Unsupported", "Wanted", "attribute",
           "attribute_of", "choose", "diff", "diff_of", "each_rank", "gap", "gap_of", "rank_pass", "ranks", "ranks_and_arrivals",
           "ranks_of", "scan", "scan_rank", "second_pass", "shared_gap", "shared_passes", "sol_inputs", "unique_ids"]
