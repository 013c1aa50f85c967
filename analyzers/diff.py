"""Run vs run: what changed, at matched sequence length and batch size.

``diff_runs(old, new, phase)`` compares the instances of one phase (or every
phase both runs have) in two event tables. All figures are means per phase
instance over all ranks (each instance of each rank counts once), in ns.

- **Time basis**: the GPU window (first GPU event start to last end; the
  attribution buckets sum to it exactly) when both runs have GPU events in the
  phase, else the host range time.
- **Matched comparison**: instances are bucketed by (batch size, sequence-length
  bucket of width ``seq_width`` tokens; automatic: a 1/2/5 x 10^n width giving
  about eight buckets over the runs' combined range). A bucket present in both runs
  is matched. The matched means weight each matched bucket by the NEW run's
  instance count there (the old run re-weighted to the new run's mix), so
  ``matched_delta_ns`` is the change at equal sequence length and batch size and
  ``mix_shift_ns`` what the shift of the sequence-length / batch-size mix explains (see
  Statistic below).
- **Fit**: least squares time = a + b * seq_len (+ c * batch_size when it varies)
  on the old run (on the new run when the old one has a single sequence length);
  ``fit_shift_ns`` = the fitted change from the difference in mean sequence
  length (and batch size) alone; ``extrapolated`` when the new run's mean lies
  outside the fitted run's range. When the runs do not overlap in sequence
  length the fit is the only estimate (``overlap`` false, no matched buckets).
- **Buckets**: the attribution buckets (analyzers.attribution) plus allreduce
  wait / transfer, queue delay and overlapped communication, on the matched
  basis when there are matched buckets, else overall (``basis`` says which).
- **Kernels**: per kernel family (tracekit.finalize.names): count per instance, mean
  duration, time per instance, on the same basis as the buckets (matched:
  instance weights reproduce the matched means); ``status`` both / appeared /
  vanished.
- **Launches and graphs**: launches, eager and graph launches per instance,
  graphed share of instances.
- **Manifests**: analyzers.manifest_diff.
- **Statistic** (``stat``): the phase times, matched means and buckets compare the
  **median** per instance by default (nearest rank, ``analyzers.robust``; a stalled
  instance does not move it; bucket medians need not add up to the window median),
  or the mean (``stat="mean"``: the buckets add up). The phase row always carries
  both (``old_mean_ns``/``old_median_ns``, ...); ``delta_ns`` and the bucket
  columns follow ``statistic``, and so does the kernel families' time per instance (count per
  instance and mean duration stay means). The fit is a least-squares fit (means). With
  medians or means alike, each run's time is also taken as its buckets' statistics weighted by
  its own mix (for means: the run's mean exactly); ``mix_shift_ns`` is the change of that minus
  ``matched_delta_ns``: what the shift of the mix (unmatched buckets included) explains, 0 when
  both runs have the same mix. ``mix_residual_ns = delta_ns - matched_delta_ns - mix_shift_ns``
  is the difference between the runs' overall medians and their buckets' weighted medians (0
  for means).

The diff of a run with itself is exactly zero in every delta (same arithmetic on
the same numbers).
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import polars as pl

from tracekit.errors import AnalysisError
from tracekit.schema import KERNEL

from .attribution import BUCKET_COLUMNS, attribute_instances, prepare
from .families import family_column
from .robust import center, weighted_center

EXTRA_TIME: Final = ("allreduce_wait_ns", "allreduce_transfer_ns", "queue_delay_ns", "overlapped_comm_ns")
TIME_COLUMNS: Final = ("host_ns", "gpu_window_ns", *BUCKET_COLUMNS, *EXTRA_TIME)
COUNT_COLUMNS: Final = ("launches", "eager_launches", "graph_launches", "gpu_events")
TARGET_BUCKETS: Final = 8


def nice_width(lo: float, hi: float, target: int = TARGET_BUCKETS) -> int:
    """A 1/2/5 x 10^n bucket width giving about ``target`` buckets over [lo, hi] (>= 1)."""
    span = max(hi - lo, 1.0)
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * mag >= raw:
            return max(int(m * mag), 1)
    return max(int(10 * mag), 1)


def run_instances(events: pl.DataFrame, phase: str | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, attribution instance table) of the selected phase(s)."""
    ev, phases = prepare(events, phase)
    return ev, attribute_instances(ev, phases)


def _fit(df: pl.DataFrame, time_col: str) -> tuple[float, float | None, float, float] | None:
    """(slope per token, slope per batch-size unit or None, seq min, seq max) of time ~ seq (+ bs)."""
    d = df.filter(pl.col("seq_len").is_not_null() & pl.col(time_col).is_not_null())
    if d.height < 2 or d.get_column("seq_len").n_unique() < 2:
        return None
    seq = d.get_column("seq_len").cast(pl.Float64).to_numpy()
    y = d.get_column(time_col).cast(pl.Float64).to_numpy()
    cols = [np.ones_like(seq), seq]
    bs = d.get_column("batch_size")
    use_bs = bs.null_count() == 0 and bs.n_unique() > 1
    if use_bs:
        cols.append(bs.cast(pl.Float64).to_numpy())
    coef, *_ = np.linalg.lstsq(np.column_stack(cols), y, rcond=None)
    return float(coef[1]), (float(coef[2]) if use_bs else None), float(seq.min()), float(seq.max())


def _mean(df: pl.DataFrame, col: str) -> float | None:
    s = df.get_column(col)
    return None if s.is_empty() or s.null_count() == s.len() else float(s.mean())  # type: ignore[arg-type]


def _center(df: pl.DataFrame, col: str, stat: str) -> float | None:
    s = df.get_column(col)
    if s.is_empty() or s.null_count() == s.len():
        return None
    v = df.select(center(pl.col(col), stat)).item()
    return None if v is None else float(v)


def _phase_summary(
    phase: str, old: pl.DataFrame, new: pl.DataFrame, width: int | None, stat: str = "median"
) -> tuple[dict[str, object], pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Phase row, bucket rows, seq-bucket rows, and the instance weights (phase_id, w) of the
    old and new run: on the matched basis an old instance in bucket b weighs n_new(b) / n_old(b),
    a new one 1, instances outside matched buckets 0; on the overall basis every instance 1."""
    gpu_both = old.get_column("gpu_events").sum() > 0 and new.get_column("gpu_events").sum() > 0
    tcol = "gpu_window_ns" if gpu_both else "host_ns"
    seqs = pl.concat([old.get_column("seq_len"), new.get_column("seq_len")]).drop_nulls()
    w = width or (nice_width(float(seqs.min()), float(seqs.max())) if seqs.len() else 1)  # type: ignore[arg-type]
    both = pl.concat([old.with_columns(pl.lit("old").alias("run")), new.with_columns(pl.lit("new").alias("run"))])
    both = both.with_columns((pl.col("seq_len") // w * w).alias("seq_lo"))
    keys = ["batch_size", "seq_lo"]
    per = both.group_by(["run", *keys]).agg(pl.len().alias("n"), *[center(pl.col(c), stat).alias(c) for c in TIME_COLUMNS])
    o = per.filter(pl.col("run") == "old").drop("run")
    n = per.filter(pl.col("run") == "new").drop("run")
    j = o.join(n, on=keys, how="full", coalesce=True, suffix="_new", nulls_equal=True)
    matched = j.filter(pl.col("n").is_not_null() & pl.col("n_new").is_not_null())
    wsum = float(matched.get_column("n_new").sum()) if matched.height else 0.0

    def mw(col: str) -> float | None:
        if not matched.height or wsum == 0 or matched.get_column(col).null_count():
            return None
        return float((matched.get_column(col) * matched.get_column("n_new")).sum()) / wsum

    old_mean = _mean(old, tcol)
    new_mean = _mean(new, tcol)
    old_c, new_c = _center(old, tcol, stat), _center(new, tcol, stat)
    delta = None if old_c is None or new_c is None else new_c - old_c
    m_old, m_new = mw(tcol), mw(f"{tcol}_new")
    m_delta = None if m_old is None or m_new is None else m_new - m_old
    # like with like: each run's statistic as its buckets' statistics weighted by its own mix (every bucket;
    # for means the run's mean exactly); the change of that minus the matched change is the mix's share,
    # 0 when both runs have the same mix
    def own_mix(run: pl.DataFrame) -> float | None:
        r = run.filter(pl.col(tcol).is_not_null())
        tot = float(r.get_column("n").sum()) if r.height else 0.0
        return None if tot == 0 else float((r.get_column(tcol) * r.get_column("n")).sum()) / tot

    w_old_c, w_new_c = own_mix(o), own_mix(n)
    mix = (None if m_delta is None or w_old_c is None or w_new_c is None
           else (w_new_c - w_old_c) - m_delta)
    fit = _fit(old, tcol)
    fit_basis = "old"
    if fit is None:
        fit, fit_basis = _fit(new, tcol), "new"
    seq_o, seq_n = _mean(old, "seq_len"), _mean(new, "seq_len")
    bs_o, bs_n = _mean(old, "batch_size"), _mean(new, "batch_size")
    fit_shift: float | None = None
    extrapolated = None
    if fit is not None and seq_o is not None and seq_n is not None:
        slope, bslope, lo, hi = fit
        fit_shift = slope * (seq_n - seq_o)
        if bslope is not None and bs_o is not None and bs_n is not None:
            fit_shift += bslope * (bs_n - bs_o)
        target = seq_n if fit_basis == "old" else seq_o
        extrapolated = not (lo <= target <= hi)
    so, sn = old.get_column("seq_len").drop_nulls(), new.get_column("seq_len").drop_nulls()
    overlap = bool(so.len() and sn.len() and so.min() <= sn.max() and sn.min() <= so.max())  # type: ignore[operator]

    def per_inst(df: pl.DataFrame, col: str) -> float | None:
        return None if df.is_empty() else float(df.get_column(col).fill_null(0).sum()) / df.height

    def graphed_share(df: pl.DataFrame) -> float | None:
        g = df.get_column("graphed").drop_nulls()
        return None if g.is_empty() else float(g.cast(pl.Float64).mean())  # type: ignore[arg-type]

    row: dict[str, object] = {
        "phase": phase,
        "time_basis": tcol,
        "old_instances": old.height,
        "new_instances": new.height,
        "old_ranks": old.get_column("rank").n_unique(),
        "new_ranks": new.get_column("rank").n_unique(),
        "statistic": stat,
        "old_mean_ns": old_mean,
        "new_mean_ns": new_mean,
        "old_median_ns": _center(old, tcol, "median"),
        "new_median_ns": _center(new, tcol, "median"),
        "delta_ns": delta,
        "old_host_mean_ns": _mean(old, "host_ns"),
        "new_host_mean_ns": _mean(new, "host_ns"),
        "old_host_median_ns": _center(old, "host_ns", "median"),
        "new_host_median_ns": _center(new, "host_ns", "median"),
        "old_seq_min": None if so.is_empty() else int(so.min()),  # type: ignore[arg-type]
        "old_seq_max": None if so.is_empty() else int(so.max()),  # type: ignore[arg-type]
        "old_seq_mean": seq_o,
        "new_seq_min": None if sn.is_empty() else int(sn.min()),  # type: ignore[arg-type]
        "new_seq_max": None if sn.is_empty() else int(sn.max()),  # type: ignore[arg-type]
        "new_seq_mean": seq_n,
        "old_bs_mean": bs_o,
        "new_bs_mean": bs_n,
        "seq_width": w,
        "overlap": overlap,
        "matched_buckets": matched.height,
        "matched_new_share": None if new.is_empty() else wsum / new.height,
        "matched_old_share": None if old.is_empty() or not matched.height else float(matched.get_column("n").sum()) / old.height,
        "matched_old_ns": m_old,
        "matched_new_ns": m_new,
        "matched_delta_ns": m_delta,
        "mix_shift_ns": mix,
        "mix_residual_ns": None if delta is None or m_delta is None or mix is None else delta - m_delta - mix,
        "fit_basis": None if fit is None else fit_basis,
        "fit_slope_ns_per_token": None if fit is None else fit[0],
        "fit_shift_ns": fit_shift,
        "fit_seq_min": None if fit is None else fit[2],
        "fit_seq_max": None if fit is None else fit[3],
        "extrapolated": extrapolated,
        "old_graphed_share": graphed_share(old),
        "new_graphed_share": graphed_share(new),
        **{f"old_{c}_per_instance": per_inst(old, c) for c in COUNT_COLUMNS},
        **{f"new_{c}_per_instance": per_inst(new, c) for c in COUNT_COLUMNS},
    }
    basis = "matched" if m_delta is not None else "overall"
    brows = []
    for c in (*BUCKET_COLUMNS, *EXTRA_TIME):
        if basis == "matched":
            a, b = mw(c), mw(f"{c}_new")
        else:
            a, b = _center(old, c, stat), _center(new, c, stat)
        oa, ob = _center(old, c, stat), _center(new, c, stat)
        brows.append({
            "phase": phase,
            "bucket": c.removesuffix("_ns"),
            "basis": basis,
            "old_ns": a,
            "new_ns": b,
            "delta_ns": None if a is None or b is None else b - a,
            "overall_old_ns": oa,
            "overall_new_ns": ob,
            "overall_delta_ns": None if oa is None or ob is None else ob - oa,
        })
    seq_rows = j.select(
        pl.lit(phase).alias("phase"),
        "batch_size",
        "seq_lo",
        (pl.col("seq_lo") + w).alias("seq_hi"),
        pl.col("n").fill_null(0).alias("old_n"),
        pl.col("n_new").fill_null(0).alias("new_n"),
        pl.col(tcol).alias("old_ns"),
        pl.col(f"{tcol}_new").alias("new_ns"),
        (pl.col(f"{tcol}_new") - pl.col(tcol)).alias("delta_ns"),
    ).sort(["batch_size", "seq_lo"], nulls_last=True)
    if basis == "matched":
        wt = matched.select(*keys, (pl.col("n_new") / pl.col("n")).alias("_wo"))
        w_old = both.filter(pl.col("run") == "old").join(wt, on=keys, how="left", nulls_equal=True).select(
            "phase_id", pl.col("_wo").fill_null(0.0).alias("w")
        )
        w_new = both.filter(pl.col("run") == "new").join(wt, on=keys, how="left", nulls_equal=True).select(
            "phase_id", pl.when(pl.col("_wo").is_not_null()).then(1.0).otherwise(0.0).alias("w")
        )
    else:
        w_old = old.select("phase_id", pl.lit(1.0).alias("w"))
        w_new = new.select("phase_id", pl.lit(1.0).alias("w"))
    return row, pl.DataFrame(brows, infer_schema_length=None), seq_rows, w_old, w_new


COUNTS_SCHEMA: Final = {"family": pl.String(), "phase_id": pl.Int64(), "n": pl.UInt32(), "d": pl.Int64()}


def family_counts(events: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """Per (family, phase_id) of the instances ``inst``: its kernels' count ``n`` and duration sum ``d``
    (what ``kernel_families`` weighs; per rank: a rank's rows need only its own events)."""
    ids = inst.get_column("phase_id").implode()
    k = events.filter((pl.col("kind") == KERNEL) & pl.col("phase_id").is_in(ids)).select("phase_id", "name", "dur_ns")
    if k.is_empty():
        return pl.DataFrame(schema=COUNTS_SCHEMA)
    k = k.with_columns(family_column(k.get_column("name")))
    per = k.group_by(["family", "phase_id"]).agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("d"))
    return per.select([pl.col(c).cast(t) for c, t in COUNTS_SCHEMA.items()])


def kernel_families(counts: pl.DataFrame, inst: pl.DataFrame, weights: pl.DataFrame | None = None,
                    stat: str = "mean") -> pl.DataFrame:
    """Per (phase, family), from the instances' ``family_counts``: count_per_instance and mean_ns (weighted
    means: what the family is) and per_instance_ns, the family's time per instance in ``stat`` over the
    instances (one without the family counts 0; ``robust.weighted_center``), the statistic the buckets
    compare. ``weights``: phase_id, w (default 1 each), so that all follow the same matched basis as the
    buckets."""
    w = weights if weights is not None else inst.select("phase_id", pl.lit(1.0).alias("w"))
    iw = inst.select("phase_id", pl.col("phase").alias("_p")).join(w, on="phase_id", how="left").with_columns(
        pl.col("w").fill_null(0.0)
    )
    tot = dict(iw.group_by("_p").agg(pl.col("w").sum()).iter_rows())
    schema = {"phase": pl.String(), "family": pl.String(), "count_per_instance": pl.Float64(), "mean_ns": pl.Float64(),
              "per_instance_ns": pl.Float64()}
    # in one order whatever order the counts came in (a weighted mean's float sum depends on it)
    per = counts.join(iw, on="phase_id", how="inner").filter(pl.col("w") > 0).sort(["_p", "family", "phase_id"])
    if per.is_empty():
        return pl.DataFrame(schema=schema)
    rows = []
    for (ph, fam), g in per.group_by(["_p", "family"], maintain_order=True):
        W = float(tot[ph])
        cw = float((g.get_column("n") * g.get_column("w")).sum())
        dw = float((g.get_column("d") * g.get_column("w")).sum())
        rows.append({"phase": ph, "family": fam, "count_per_instance": cw / W, "mean_ns": dw / cw,
                     "per_instance_ns": weighted_center(list(zip(g.get_column("d").cast(pl.Float64).to_list(),
                                                                 g.get_column("w").to_list(), strict=True)), W, stat)})
    return pl.DataFrame(rows, schema=schema)


def kernel_diff(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Family-level comparison; sorted by |delta per instance| descending."""
    cols = ["count_per_instance", "mean_ns", "per_instance_ns"]
    o = old.select("phase", "family", *[pl.col(c).alias(f"old_{c}") for c in cols])
    n = new.select("phase", "family", *[pl.col(c).alias(f"new_{c}") for c in cols])
    j = o.join(n, on=["phase", "family"], how="full", coalesce=True)
    return (
        j.with_columns(
            pl.when(pl.col("old_mean_ns").is_null()).then(pl.lit("appeared"))
            .when(pl.col("new_mean_ns").is_null()).then(pl.lit("vanished"))
            .otherwise(pl.lit("both")).alias("status"),
            (pl.col("new_per_instance_ns").fill_null(0.0) - pl.col("old_per_instance_ns").fill_null(0.0)).alias("delta_per_instance_ns"),
            (pl.col("new_count_per_instance").fill_null(0.0) - pl.col("old_count_per_instance").fill_null(0.0)).alias("delta_count_per_instance"),
            (pl.col("new_mean_ns") - pl.col("old_mean_ns")).alias("delta_mean_ns"),
        )
        .with_columns(pl.col("delta_per_instance_ns").abs().alias("_abs"))
        .sort(["phase", "_abs", "family"], descending=[False, True, False])
        .drop("_abs")
    )


def diff_runs(
    old: pl.DataFrame, new: pl.DataFrame, phase: str | None = "verify", seq_width: int | None = None,
    stat: str = "median",
) -> dict[str, pl.DataFrame]:
    """The run diff (module doc): frames ``phases``, ``buckets``, ``seq_buckets``, ``kernels``,
    ``presence`` (every selected phase and whether each run has it); ``stat``: median (default)
    or mean per instance.

    ``phase`` None compares every phase present in both runs. Raises AnalysisError with
    ``side`` "A" (old run) or "B" (new run) when a run lacks the phase.
    """
    try:
        ev_o, inst_o = run_instances(old, phase)
    except AnalysisError as exc:
        raise exc.located(side="A") from None
    try:
        ev_n, inst_n = run_instances(new, phase)
    except AnalysisError as exc:
        raise exc.located(side="B") from None
    return diff_tables(inst_o, inst_n, family_counts(ev_o, inst_o), family_counts(ev_n, inst_n), seq_width, stat)


def diff_tables(inst_o: pl.DataFrame, inst_n: pl.DataFrame, counts_o: pl.DataFrame, counts_n: pl.DataFrame,
                seq_width: int | None = None, stat: str = "median") -> dict[str, pl.DataFrame]:
    """``diff_runs`` from each run's instances of the selected phases and their ``family_counts``."""
    phases = sorted(set(inst_o.get_column("phase").to_list()) & set(inst_n.get_column("phase").to_list()))
    if not phases:
        raise AnalysisError(
            "the runs share no phase (old: " + ", ".join(sorted(set(inst_o.get_column("phase").to_list()))) +
            "; new: " + ", ".join(sorted(set(inst_n.get_column("phase").to_list()))) + ")"
        )
    rows, brows, srows, wo, wn = [], [], [], [], []
    for p in phases:
        r, b, s, w_old, w_new = _phase_summary(
            p, inst_o.filter(pl.col("phase") == p), inst_n.filter(pl.col("phase") == p), seq_width, stat
        )
        rows.append(r)
        brows.append(b)
        srows.append(s)
        wo.append(w_old)
        wn.append(w_new)
    kd = kernel_diff(
        kernel_families(counts_o, inst_o.filter(pl.col("phase").is_in(phases)), pl.concat(wo), stat),
        kernel_families(counts_n, inst_n.filter(pl.col("phase").is_in(phases)), pl.concat(wn), stat),
    )
    basis = pl.DataFrame(
        {"phase": [r["phase"] for r in rows],
         "basis": ["matched" if r["matched_delta_ns"] is not None else "overall" for r in rows]},
        schema={"phase": pl.String(), "basis": pl.String()},
    )
    kd = kd.join(basis, on="phase", how="left")
    seen_o = set(inst_o.get_column("phase").to_list())
    seen_n = set(inst_n.get_column("phase").to_list())
    presence = pl.DataFrame(
        {"phase": sorted(seen_o | seen_n)},
        schema={"phase": pl.String()},
    ).with_columns(
        pl.col("phase").is_in(sorted(seen_o)).alias("in_old"),
        pl.col("phase").is_in(sorted(seen_n)).alias("in_new"),
    )
    return {
        "presence": presence,
        "phases": pl.DataFrame(rows, infer_schema_length=None),
        "buckets": pl.concat(brows, how="diagonal_relaxed"),
        "seq_buckets": pl.concat(srows, how="diagonal_relaxed"),
        "kernels": kd,
    }
