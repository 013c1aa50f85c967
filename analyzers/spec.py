"""Speculation economics: what a speculative cycle costs and what it must accept to pay.

Conventions (stated once, used everywhere here):

- **Tokens per cycle** counts every token a sequence emits in one cycle:
  the accepted draft tokens *plus the bonus token* the target always emits.
  The ``accept_len`` fact on verify rows is SGLang v1's
  ``accept_length_per_req_cpu``: accepted draft tokens, bonus EXCLUDED, so
  tokens per cycle = ``accept_len + 1``. (SGLang v2's ``accept_lens`` already
  includes the bonus; tracekit's SGLang hooks subtract it before labelling.)
- **Cycle time** is measured on one rank's host timeline from the start of a
  cycle's draft to the start of the next cycle's draft: draft + verify +
  draft_extend + whatever the host did between them. With TP every rank waits
  for the others, so the binding rank is the slowest one (largest mean cycle);
  that rank is used unless the caller picks one.
- **Decode step time** is the period of plain decode steps (start to start of
  consecutive ``decode`` ranges on one rank), or ``1 / baseline tok/s``.
- **Break-even accept length** and the **chain model**: the formulas are in
  ``analyzers/spec_model.py``; this module feeds them a trace's times.
- **Timing source**: a capture times every phase (and the whole cycle) without
  the profiler during its warm-up cycles (manifest ``ranks[r].unprofiled`` and
  ``cycle_time.unprofiled``, host clock). Where those timers exist, the cycle,
  its parts and the plain-decode step are their medians (``timing_source``
  "unprofiled"); host time between phases is the unprofiled cycle minus the
  unprofiled phase medians. A run captured in profile mode ``timing`` ran no
  profiler: the same timers of its window (``timed``) are used. Otherwise the profiled
  ranges are used and ``timing_source`` says "profiled". The profiled cycle is
  always kept beside it (``profiled_cycle_ns``).

All times are int64 ns in frames; the plain-number API takes and returns
floats in ns or tokens.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit.errors import AnalysisError

from .phase_rows import phase_instances
from .spec_model import Economics, economics, shrink_targets, step_ns_from_tps

SPEC_PHASES: Final = ("draft", "verify", "draft_extend")
PART_COLUMNS: Final = ("draft_ns", "verify_ns", "draft_extend_ns", "host_between_ns")


# ---------------------------------------------------------------- from a trace


CYCLE_SCHEMA: Final[dict[str, pl.DataType]] = {
    "rank": pl.Int32(),
    "cycle": pl.Int64(),
    "start_ns": pl.Int64(),
    "cycle_ns": pl.Int64(),
    **{c: pl.Int64() for c in PART_COLUMNS},
    "other_phases_ns": pl.Int64(),
    "batch_size": pl.Int64(),
    "verify_tokens": pl.Float64(),
    "accept_len": pl.Float64(),
    "graphed": pl.Boolean(),
}


def cycles(events: pl.DataFrame) -> pl.DataFrame:
    """One row per complete speculative cycle per rank.

    A cycle is what the trace shows of one: from the first ``draft`` range after the
    rank's previous verify / draft_extend (or other phase) up to and including the next
    ``verify`` and the first ``draft_extend`` after it. Consecutive draft ranges are one
    cycle's draft: SGLang 0.5.12 labels every eager draft step ``step[DECODE ...]`` (k
    ranges per cycle, remapped to ``draft``), tracekit's hooks give one range around all
    k steps. The cycle ends where the first phase range after its last member starts:
    the next cycle's draft in a serving loop, or a plain ``decode`` / ``prefill`` step
    (or a draft_extend for a prefill) the program runs between cycles (the built-in
    workload runs a reference decode after each cycle), which is then not part of the
    cycle. A decode/prefill range that starts inside the cycle is subtracted
    (``other_phases_ns``). A cycle with no later phase range on its rank (the last
    one) and a cycle without a verify are dropped.

    Columns: rank, cycle (the verify's cycle fact, else the ordinal), start_ns,
    cycle_ns, draft_ns, verify_ns, draft_extend_ns (host range time summed over
    the cycle's ranges of that phase), host_between_ns (the rest of the cycle),
    other_phases_ns, batch_size, verify_tokens (tokens per request in verify),
    accept_len (bonus excluded), graphed (verify ran from a CUDA graph).
    """
    inst = phase_instances(events, ("draft", "verify", "draft_extend", "decode", "prefill"))
    if inst.filter(pl.col("phase") == "draft").is_empty():
        return pl.DataFrame(schema=CYCLE_SCHEMA)
    inst = inst.sort(["rank", "start_ns", "host_ns"], descending=[False, False, True])
    is_draft = pl.col("phase") == "draft"
    # a draft opens a cycle unless the rank's previous phase instance is a draft too (k draft steps)
    opens = is_draft & (pl.col("phase").shift(1).over("rank") != "draft").fill_null(True)
    inst = inst.with_columns(opens.cast(pl.Int64()).cum_sum().over("rank").alias("_ord")).filter(pl.col("_ord") > 0)
    # members: the leading drafts, the first verify after them, the first draft_extend after that verify
    is_verify = pl.col("phase") == "verify"
    inst = inst.with_columns(is_verify.cast(pl.Int64()).cum_sum().over(["rank", "_ord"]).alias("_nv"))
    is_de = (pl.col("phase") == "draft_extend") & (pl.col("_nv") == 1)
    inst = inst.with_columns(is_de.cast(pl.Int64()).cum_sum().over(["rank", "_ord"]).alias("_nde"))
    inst = inst.with_columns(
        ((is_draft & (pl.col("_nv") == 0)) | (is_verify & (pl.col("_nv") == 1) & (pl.col("_nde") == 0))
         | (is_de & (pl.col("_nde") == 1))).alias("_spec"),
    )
    per = inst.group_by(["rank", "_ord"]).agg(
        pl.col("start_ns").filter(pl.col("phase") == "draft").min().alias("_c0"),
        pl.col("end_ns").filter(pl.col("_spec")).max().alias("_spec_end"),
        pl.col("host_ns").filter(pl.col("_spec") & (pl.col("phase") == "draft")).sum().alias("draft_ns"),
        pl.col("host_ns").filter(pl.col("_spec") & (pl.col("phase") == "verify")).sum().alias("verify_ns"),
        pl.col("host_ns").filter(pl.col("_spec") & (pl.col("phase") == "draft_extend")).sum().alias("draft_extend_ns"),
        pl.col("cycle").filter(pl.col("phase") == "verify").first().alias("_vcycle"),
        pl.col("batch_size").filter(pl.col("phase") == "verify").first().alias("batch_size"),
        pl.col("num_tokens").filter(pl.col("phase") == "verify").first().alias("_vtok"),
        pl.col("accept_len").filter(pl.col("phase") == "verify").first().alias("accept_len"),
        pl.col("graphed").filter(pl.col("phase") == "verify").first().alias("graphed"),
        (pl.col("phase") == "verify").any().alias("_has_verify"),
    )
    # decode/prefill ranges that start inside [c0, spec_end) are not cycle time
    inner = (
        inst.filter(~pl.col("_spec"))
        .join(per.select("rank", "_ord", "_spec_end"), on=["rank", "_ord"])
        .filter(pl.col("start_ns") < pl.col("_spec_end"))
        .group_by(["rank", "_ord"])
        .agg(pl.col("host_ns").sum().alias("other_phases_ns"))
    )
    starts = inst.select("rank", pl.col("start_ns").alias("_next")).sort("_next")
    nxt = (
        per.select("rank", "_ord", "_spec_end")
        .drop_nulls("_spec_end")
        .sort("_spec_end")
        .join_asof(starts, left_on="_spec_end", right_on="_next", by="rank", strategy="forward",
                   check_sortedness=False)
    )
    out = (
        per.join(nxt.select("rank", "_ord", "_next"), on=["rank", "_ord"], how="left")
        .join(inner, on=["rank", "_ord"], how="left")
        .with_columns(pl.col("other_phases_ns").fill_null(0))
        .filter(pl.col("_next").is_not_null() & pl.col("_has_verify") & pl.col("_c0").is_not_null())
        .with_columns(
            (pl.col("_next") - pl.col("_c0") - pl.col("other_phases_ns")).alias("cycle_ns"),
            pl.coalesce(pl.col("_vcycle"), pl.col("_ord")).alias("cycle"),
            (pl.col("_vtok").cast(pl.Float64()) / pl.col("batch_size").cast(pl.Float64())).alias("verify_tokens"),
            pl.col("_c0").alias("start_ns"),
        )
        .with_columns(
            (pl.col("cycle_ns") - pl.col("draft_ns") - pl.col("verify_ns") - pl.col("draft_extend_ns")).alias(
                "host_between_ns"
            )
        )
    )
    return out.select([pl.col(c).cast(t) for c, t in CYCLE_SCHEMA.items()]).sort(["rank", "start_ns"])


def decode_steps(events: pl.DataFrame) -> pl.DataFrame:
    """Plain decode step times per rank. ``step_ns`` is the period (start of a ``decode``
    range to the start of the rank's next range) when the next range is a decode too,
    else the decode range's own host time (``basis`` "period" or "range": decodes
    interleaved with other phases, as in the built-in workload). Columns: rank,
    batch_size, step_ns, dur_ns, basis."""
    inst = phase_instances(events, ("draft", "verify", "draft_extend", "decode", "prefill")).sort(
        ["rank", "start_ns"]
    )
    inst = inst.with_columns(
        pl.col("phase").shift(-1).over("rank").alias("_next_phase"),
        pl.col("start_ns").shift(-1).over("rank").alias("_next_start"),
    )
    periodic = (pl.col("_next_phase") == "decode") & pl.col("_next_start").is_not_null()
    return inst.filter(pl.col("phase") == "decode").select(
        pl.col("rank"),
        pl.col("batch_size"),
        pl.when(periodic).then(pl.col("_next_start") - pl.col("start_ns")).otherwise(pl.col("host_ns")).alias("step_ns"),
        pl.col("host_ns").alias("dur_ns"),
        pl.when(periodic).then(pl.lit("period")).otherwise(pl.lit("range")).alias("basis"),
    )


def pick_rank(cyc: pl.DataFrame, rank: int | None) -> tuple[int, str]:
    """The rank whose cycles are used and why ("slowest" or "chosen")."""
    if cyc.is_empty():
        raise AnalysisError("no complete speculative cycle (draft -> verify -> next draft) in the run")
    if rank is not None:
        if rank not in set(cyc.get_column("rank").to_list()):
            raise AnalysisError("no complete speculative cycle on this rank", rank=rank)
        return rank, "chosen"
    means = cyc.group_by("rank").agg(pl.col("cycle_ns").mean()).sort(
        ["cycle_ns", "rank"], descending=[True, False]
    )
    return int(means.get_column("rank")[0]), "slowest"


def spec_table(
    cyc: pl.DataFrame,
    *,
    decode_step_ns: dict[int, float] | float | None,
    target_tps: float | None = None,
    draft_tokens: int | None = None,
    accept_len: float | None = None,
) -> pl.DataFrame:
    """Economics per batch-size bucket of one rank's cycles (``cycles`` filtered to one rank).

    ``decode_step_ns``: a number for every bucket, or a dict batch_size -> ns (buckets
    without a decode step of their batch size get none). ``draft_tokens`` overrides k
    (else verify tokens per request - 1); ``accept_len`` (bonus excluded) overrides the
    measured one. Columns: batch_size, cycles, cycle_ns (mean), the four part means,
    accept_len, tokens_per_cycle, graphed_share, k, then every Economics field and
    ``shrink_<part>`` (the part's time needed for the target, null: not reachable by
    that part alone).
    """
    if cyc.is_empty():
        raise AnalysisError("no complete speculative cycle to analyse")
    grp = (
        cyc.with_columns(pl.col("batch_size").fill_null(1))
        .group_by("batch_size")
        .agg(
            pl.len().alias("cycles"),
            pl.col("cycle_ns").mean(),
            *[pl.col(c).mean() for c in PART_COLUMNS],
            pl.col("accept_len").mean(),
            pl.col("accept_len").is_not_null().sum().alias("_n_acc"),
            pl.col("verify_tokens").median().alias("_vtok"),
            pl.col("graphed").cast(pl.Float64()).mean().alias("graphed_share"),
        )
        .sort("batch_size")
    )
    rows: list[dict[str, object]] = []
    for g in grp.iter_rows(named=True):
        bs = int(g["batch_size"])
        acc = accept_len if accept_len is not None else g["accept_len"]
        tpc = None if acc is None else float(acc) + 1.0
        k = draft_tokens
        if k is None and g["_vtok"] is not None and g["_vtok"] >= 1:
            k = round(g["_vtok"]) - 1
        dstep = decode_step_ns.get(bs) if isinstance(decode_step_ns, dict) else decode_step_ns
        eco = economics(
            float(g["cycle_ns"]),
            tokens_per_cycle=tpc,
            decode_step_ns=dstep,
            target_tps=target_tps,
            draft_tokens=k,
            batch_size=float(bs),
        )
        row: dict[str, object] = {
            "batch_size": bs,
            "cycles": int(g["cycles"]),
            **{c: float(g[c]) for c in ("cycle_ns", *PART_COLUMNS)},
            "accept_len": None if acc is None else float(acc),
            "accept_len_source": "given" if accept_len is not None else (
                "measured" if g["_n_acc"] else "missing"
            ),
            "graphed_share": g["graphed_share"],
            **{f: getattr(eco, f) for f in Economics.__dataclass_fields__},
        }
        row["draft_tokens"] = k
        row["batch_size"] = bs
        parts = {c: float(g[c]) for c in PART_COLUMNS}
        shrink = (
            shrink_targets(parts, eco.needed_cycle_ns) if eco.needed_cycle_ns is not None else {}
        )
        for c in PART_COLUMNS:
            row[f"shrink_{c}"] = shrink.get(c)
        rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)


def unprofiled_timers(manifest: dict[str, object] | None, rank: int, window: str = "unprofiled") -> dict[str, float] | None:
    """The capture's unprofiled host-clock medians for ``rank``: draft_ns, verify_ns, draft_extend_ns (and
    decode_ns, cycle_ns where timed), or None when the manifest has no unprofiled timer for every
    speculative phase (draft_extend counts 0 where no window timed one: an engine without that phase). Host medians (``host_median_ns``): the cycle parts are host range times.
    ``window``: ``unprofiled`` (the warm-up) or ``timed`` (a timing-mode window: no profiler ran either)."""
    ranks = manifest.get("ranks") if isinstance(manifest, dict) else None
    sec = ranks.get(str(rank)) if isinstance(ranks, dict) else None
    if not isinstance(sec, dict) or not isinstance(sec.get(window), dict):
        return None
    un: dict[str, dict[str, float]] = sec[window]
    out: dict[str, float] = {}
    timed = {ph for w in sec.values() if isinstance(w, dict) for ph in w}  # phases any window timed
    for ph in (*SPEC_PHASES, "decode"):
        st = un.get(ph)
        v = st.get("host_median_ns") if isinstance(st, dict) else None
        if v:
            out[f"{ph}_ns"] = float(v)
        elif ph == "draft_extend" and ph not in timed:  # an engine without one (transformers): 0, not missing
            out[f"{ph}_ns"] = 0.0
        elif ph != "decode":
            return None
    cyc = sec.get("cycle_time")
    cu = cyc.get(window) if isinstance(cyc, dict) else None
    if isinstance(cu, dict) and cu.get("host_median_ns"):
        out["cycle_ns"] = float(cu["host_median_ns"])
    return out


def unprofiled_decode(manifest: dict[str, object] | None, rank: int, window: str = "unprofiled") -> float | None:
    """A plain-decode run's unprofiled decode step (host median) on ``rank``, else the slowest rank's; None
    when it timed none (a baseline run has no speculative phases, so ``unprofiled_timers`` gives None)."""
    ranks = manifest.get("ranks") if isinstance(manifest, dict) else None
    if not isinstance(ranks, dict):
        return None
    med: dict[str, float] = {}
    for r, sec in ranks.items():
        st = sec.get(window, {}).get("decode") if isinstance(sec, dict) and isinstance(sec.get(window), dict) else None
        if isinstance(st, dict) and st.get("host_median_ns"):
            med[str(r)] = float(st["host_median_ns"])
    return med.get(str(rank), max(med.values())) if med else None


def _unprofiled_row(row: dict[str, object], un: dict[str, float], decode_step_ns: float | None,
                    target_tps: float | None) -> dict[str, object]:
    """``row`` (one spec_table bucket) with its cycle, parts and economics from the unprofiled timers."""
    parts = {c: un[c] for c in ("draft_ns", "verify_ns", "draft_extend_ns")}
    spec_sum = sum(parts.values())
    if "cycle_ns" in un:
        cycle, basis = un["cycle_ns"], "unprofiled cycle timer"
        parts["host_between_ns"] = max(cycle - spec_sum, 0.0)
    else:  # an older capture: no cycle timer, the profiled host time between phases is added
        parts["host_between_ns"] = float(row["host_between_ns"])  # type: ignore[arg-type]
        cycle, basis = spec_sum + parts["host_between_ns"], "unprofiled phase timers + profiled host between phases"
    acc = row["accept_len"]
    eco = economics(
        cycle,
        tokens_per_cycle=None if acc is None else float(acc) + 1.0,  # type: ignore[arg-type]
        decode_step_ns=decode_step_ns,
        target_tps=target_tps,
        draft_tokens=row["draft_tokens"],  # type: ignore[arg-type]
        batch_size=float(row["batch_size"]),  # type: ignore[arg-type]
    )
    out = {**row, "profiled_cycle_ns": row["cycle_ns"], "cycle_ns": cycle, **parts,
           **{f: getattr(eco, f) for f in Economics.__dataclass_fields__},
           "timing_source": "unprofiled", "timing_basis": basis}
    out["draft_tokens"] = row["draft_tokens"]
    out["batch_size"] = row["batch_size"]
    shrink = shrink_targets(parts, eco.needed_cycle_ns) if eco.needed_cycle_ns is not None else {}
    for c in PART_COLUMNS:
        out[f"shrink_{c}"] = shrink.get(c)
    return out


def decode_step_by_bs(events: pl.DataFrame) -> dict[int, float]:
    """Mean plain-decode step period per batch size, on the slowest rank of each batch size."""
    steps = decode_steps(events)
    if steps.is_empty():
        return {}
    if steps.filter(pl.col("basis") == "period").height:  # consecutive steps: use their periods only
        steps = steps.filter(pl.col("basis") == "period")
    per = (
        steps.with_columns(pl.col("batch_size").fill_null(1))
        .group_by(["batch_size", "rank"])
        .agg(pl.col("step_ns").mean())
        .group_by("batch_size")
        .agg(pl.col("step_ns").max())
    )
    return {int(b): float(s) for b, s in per.iter_rows()}


def _decode_basis(events: pl.DataFrame) -> str:
    steps = decode_steps(events)
    if steps.filter(pl.col("basis") == "period").height:
        return "period of consecutive decode steps"
    return "decode range host time (decode steps not consecutive)"


def spec_report(
    events: pl.DataFrame,
    *,
    baseline: pl.DataFrame | None = None,
    baseline_tps: float | None = None,
    target_tps: float | None = None,
    rank: int | None = None,
    draft_tokens: int | None = None,
    accept_len: float | None = None,
    manifest: dict[str, object] | None = None,
    baseline_manifest: dict[str, object] | None = None,
) -> tuple[pl.DataFrame, dict[str, object]]:
    """``spec_table`` for a run, choosing rank and decode step; returns (table, context).

    Decode step time, first that applies: ``baseline_tps`` (1 / tok/s, every batch
    size), the ``baseline`` run's decode steps, this run's own decode steps (its
    unprofiled decode timer where the cycle is unprofiled). The context says which
    rank was used and why, where the decode step came from, and the cycles of every
    rank (mean cycle per rank) so a reader sees the spread. ``manifest``: the run's
    manifest, for its unprofiled timers and profile mode (module doc, "Timing source");
    ``baseline_manifest``: the baseline run's, whose unprofiled decode timer then gives the decode step
    (the same clock as the unprofiled cycle).
    """
    cyc = cycles(events)
    used, why = pick_rank(cyc, rank)
    decode: dict[int, float] | float | None
    if baseline_tps is not None:
        decode, source = step_ns_from_tps(baseline_tps), f"baseline {baseline_tps:g} tok/s"
    elif baseline is not None:
        decode = decode_step_by_bs(baseline)
        if not decode:
            raise AnalysisError("the baseline run has no decode phase", side="B")
        source = f"baseline run: {_decode_basis(baseline)}"
    else:
        own = decode_step_by_bs(events)
        decode, source = (own, f"this run: {_decode_basis(events)}") if own else (None, "none")
    table = spec_table(
        cyc.filter(pl.col("rank") == used),
        decode_step_ns=decode,
        target_tps=target_tps,
        draft_tokens=draft_tokens,
        accept_len=accept_len,
    )
    cap = manifest.get("capture") if isinstance(manifest, dict) else None
    timing_run = isinstance(cap, dict) and cap.get("profile_mode") == "timing"
    un = unprofiled_timers(manifest, used, "timed" if timing_run else "unprofiled")
    timing_note = "profiled phase ranges (no unprofiled timers in the manifest)"
    if timing_run and un is not None and table.height == 1:  # the window's own timers: medians, like the others
        dstep = decode if not isinstance(decode, dict) else decode.get(int(table["batch_size"][0]))
        if baseline is None and baseline_tps is None and "decode_ns" in un:
            dstep, source = un["decode_ns"], "this run: timing-mode decode timer (host median)"
        table = pl.DataFrame([_unprofiled_row(table.row(0, named=True), un, dstep, target_tps)],
                             infer_schema_length=None).with_columns(
            pl.lit("timing-mode window timers (no profiler ran; host-clock medians)").alias("timing_basis"),
            pl.lit(None, dtype=pl.Float64()).alias("profiled_cycle_ns"))  # no profiled window in a timing run
        timing_note = f"timing-mode run: the window's own timers of rank {used} (no profiler ran)"
    elif timing_run:
        table = table.with_columns(pl.col("cycle_ns").alias("profiled_cycle_ns"),
                                   pl.lit("unprofiled").alias("timing_source"),
                                   pl.lit("timing-mode phase ranges (no profiler ran)").alias("timing_basis"))
        timing_note = "timing-mode run: its phase ranges are unprofiled times"
    elif un is not None and table.height == 1:
        dstep = decode if not isinstance(decode, dict) else decode.get(int(table["batch_size"][0]))
        if baseline is None and baseline_tps is None and "decode_ns" in un:
            dstep, source = un["decode_ns"], "this run: unprofiled decode timer (host median)"
        elif baseline is not None and (bstep := unprofiled_decode(baseline_manifest, used)) is not None:
            dstep, source = bstep, "baseline run: unprofiled decode timer (host median)"
        table = pl.DataFrame([_unprofiled_row(table.row(0, named=True), un, dstep, target_tps)],
                             infer_schema_length=None)
        timing_note = f"unprofiled timers of rank {used} (capture warm-up, host-clock medians)"
    else:
        if un is not None:
            timing_note = "profiled phase ranges (unprofiled timers are not split by batch size)"
        table = table.with_columns(pl.col("cycle_ns").alias("profiled_cycle_ns"),
                                   pl.lit("profiled").alias("timing_source"),
                                   pl.lit("profiled phase ranges").alias("timing_basis"))
    per_rank = cyc.group_by("rank").agg(pl.len().alias("cycles"), pl.col("cycle_ns").mean()).sort("rank")
    context: dict[str, object] = {
        "rank": used,
        "rank_choice": why,
        "decode_source": source,
        "timing": timing_note,
        "target_tps": target_tps,
        "cycles_by_rank": [
            {"rank": int(r), "cycles": int(n), "cycle_ns": float(c)} for r, n, c in per_rank.iter_rows()
        ],
    }
    return table, context
