"""Why phase A costs more than phase B (verify in extend mode vs a decode step), term by term.

Pure functions over polars frames. Both sides go through the same attribution
(``analyzers.attribution``); A and B can come from one run or two (with
speculation on, SGLang's target never runs a plain decode step, so B often
comes from a spec-off run).

- Buckets: mean per instance on each side (every instance of every selected
  rank counts once), delta = A - B, delta per token (A's mean per token minus
  B's; tokens = the ``num_tokens`` fact, for decode ``batch_size`` when
  ``num_tokens`` is missing), share of the total gap (delta / total delta of
  the GPU window; can be negative or above 1 for one bucket).
- Kernels: normalised kernel families (``tracekit.finalize.names.normalize_names``), count
  per instance and mean duration per side, time per instance and its delta,
  which side a family appears on only.
- Launches and graph use per side; mean sequence length per side and the gap
  per power-of-two sequence-length bucket present on both sides (comparing
  at different sequence lengths misleads).
- Explanations: one item per bucket with a material delta, ranked by |delta|, with
  its evidence (kernel families, allreduce wait shares); the words are
  ``tracekit.render.gap``'s.
- Statistic (``stat``): ``median`` per instance by default (nearest rank,
  ``analyzers.robust``): one stalled instance does not move it; bucket medians
  need not add up to the window median. ``mean``: the buckets add up to the
  window exactly. Kernel families: count per instance and mean duration are means (what the
  family is); their time per instance and its delta are in ``stat``, as the buckets'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from tracekit.buckets import CATEGORIES
from tracekit.errors import AnalysisError
from tracekit.finalize.names import normalize_names
from tracekit.schema import GPU_KINDS

from .attribution import attribute_instances, prepare
from .attribution_views import BUCKET_COLUMNS, seq_bucket_edges
from .buckets import BUCKETS, DEFAULT_LAUNCH_LATENCY_NS
from .robust import center, weighted_center

SIDE_MEANS: Final = (
    "gpu_window_ns",
    "host_ns",
    *BUCKET_COLUMNS,
    "queue_delay_ns",
    "overlapped_comm_ns",
    "launches",
    "eager_launches",
    "graph_launches",
    "gpu_events",
    "allreduce_kernel_ns",
    "allreduce_wait_ns",
)


def _tokens(inst: pl.DataFrame) -> pl.Expr:
    return pl.coalesce(
        pl.col("num_tokens"),
        pl.when(pl.col("phase") == "decode").then(pl.col("batch_size")).otherwise(None),
    ).cast(pl.Float64)


def side(events: pl.DataFrame, phase: str, rank: int | None, launch_latency_ns: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(instances, annotated events) of one side; AnalysisError when it has no instance."""
    ev, phases = prepare(events, phase)
    return side_instances(attribute_instances(ev, phases, launch_latency_ns=launch_latency_ns), phase, rank), ev


def side_instances(inst: pl.DataFrame, phase: str, rank: int | None) -> pl.DataFrame:
    """A side's instances (of ``rank``: None, every rank) with their tokens; AnalysisError when it has none."""
    if rank is not None:
        inst = inst.filter(pl.col("rank") == rank)
    if inst.height == 0:
        raise AnalysisError(f"no {phase} instances" + (f" on rank {rank}" if rank is not None else ""), rank=rank)
    return inst.with_columns(_tokens(inst).alias("tokens"))


def side_summary(inst: pl.DataFrame, stat: str = "median") -> dict[str, Any]:
    """Per-instance ``stat`` (median or mean) over a side's instances, plus counts; the facts
    (tokens, batch size, sequence and accept length) are means."""
    row = inst.select(
        pl.len().alias("instances"),
        pl.col("rank").n_unique().alias("ranks"),
        *[center(pl.col(c), stat).alias(c) for c in SIDE_MEANS],
        pl.col("tokens").mean().alias("mean_tokens"),
        pl.col("batch_size").cast(pl.Float64).mean().alias("mean_batch_size"),
        pl.col("seq_len").cast(pl.Float64).mean().alias("mean_seq_len"),
        pl.col("accept_len").mean().alias("mean_accept_len"),
        pl.col("graphed").fill_null(False).sum().alias("graphed_instances"),
    ).row(0, named=True)
    return {**row, "stat": stat}


def bucket_table(a: dict[str, Any], b: dict[str, Any]) -> pl.DataFrame:
    """One row per bucket (and a final ``gpu_window`` row): a_ns, b_ns (means per instance), delta."""
    total = a["gpu_window_ns"] - b["gpu_window_ns"]
    rows = []
    for name in (*BUCKETS, "gpu_window"):
        col = f"{name}_ns"
        av, bv = a[col], b[col]
        d = av - bv
        per_tok = None
        if a["mean_tokens"] and b["mean_tokens"]:
            per_tok = av / a["mean_tokens"] - bv / b["mean_tokens"]
        rows.append(
            {
                "bucket": name,
                "a_ns": av,
                "b_ns": bv,
                "delta_ns": d,
                "delta_per_token_ns": per_tok,
                "share": d / total if total else None,
            }
        )
    return pl.DataFrame(
        rows,
        schema={"bucket": pl.String, "a_ns": pl.Float64, "b_ns": pl.Float64, "delta_ns": pl.Float64,
                "delta_per_token_ns": pl.Float64, "share": pl.Float64},
    )


def family_times(events: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """Per (phase_id, family) of the instances ``inst``: the family's GPU time in that instance (``fam_ns``),
    its event count (``n``), duration sum and category."""
    ids = inst.get_column("phase_id").implode()
    g = events.filter(pl.col("kind").is_in(list(GPU_KINDS)) & pl.col("phase_id").is_in(ids))
    g = g.with_columns(normalize_names(g.get_column("name")).alias("family"))
    return g.group_by(["phase_id", "family"]).agg(
        pl.col("category").drop_nulls().first().alias("category"), pl.len().alias("n"),
        pl.col("dur_ns").sum().cast(pl.Float64).alias("fam_ns"))


def kernel_table(fam_a: pl.DataFrame, inst_a: pl.DataFrame, fam_b: pl.DataFrame, inst_b: pl.DataFrame,
                 stat: str = "mean") -> pl.DataFrame:
    """Kernel families (``family_times`` of each side's instances): count per instance and mean duration
    (means: what the family is), and its time per instance in ``stat`` over the instances (an instance
    without the family counts 0), the statistic the buckets are compared in."""

    def per_side(per: pl.DataFrame, inst: pl.DataFrame, tag: str) -> pl.DataFrame:
        n = inst.height
        rows = []
        for (fam,), g in per.group_by(["family"], maintain_order=True):
            cnt = int(g.get_column("n").sum())
            tot = float(g.get_column("fam_ns").sum())
            rows.append({"family": fam, f"{tag}_category": g.get_column("category").drop_nulls().first(),
                         f"{tag}_count": cnt / n, f"{tag}_mean_ns": tot / cnt if cnt else None,
                         f"{tag}_per_instance_ns": weighted_center([(v, 1.0) for v in g.get_column("fam_ns")], n, stat)})
        return pl.DataFrame(rows, schema={"family": pl.String, f"{tag}_category": pl.String, f"{tag}_count": pl.Float64,
                                          f"{tag}_mean_ns": pl.Float64, f"{tag}_per_instance_ns": pl.Float64})

    ka = per_side(fam_a, inst_a, "a")
    kb = per_side(fam_b, inst_b, "b")
    k = ka.join(kb, on="family", how="full", coalesce=True)
    return (
        k.with_columns(
            pl.coalesce(pl.col("a_category"), pl.col("b_category")).alias("category"),
            pl.col("a_count").fill_null(0.0),
            pl.col("b_count").fill_null(0.0),
            pl.col("a_per_instance_ns").fill_null(0.0),
            pl.col("b_per_instance_ns").fill_null(0.0),
        )
        .with_columns(
            (pl.col("a_per_instance_ns") - pl.col("b_per_instance_ns")).alias("delta_ns"),
            pl.when(pl.col("b_count") == 0).then(pl.lit("a")).when(pl.col("a_count") == 0).then(pl.lit("b")).otherwise(None).alias("only"),
        )
        .select("family", "category", "a_count", "b_count", "a_mean_ns", "b_mean_ns", "a_per_instance_ns", "b_per_instance_ns", "delta_ns", "only")
        .sort([pl.col("delta_ns").abs(), "family"], descending=[True, False])
    )


def seq_table(inst_a: pl.DataFrame, inst_b: pl.DataFrame, stat: str = "median") -> pl.DataFrame:
    """GPU window per instance (``stat``) per power-of-two sequence-length bucket found on both sides."""
    lo, hi = seq_bucket_edges(pl.col("seq_len"))

    def agg(inst: pl.DataFrame, tag: str) -> pl.DataFrame:
        return (
            inst.filter(pl.col("seq_len").is_not_null())
            .with_columns(lo.alias("seq_lo"), hi.alias("seq_hi"))
            .group_by(["seq_lo", "seq_hi"])
            .agg(pl.len().alias(f"{tag}_instances"), center(pl.col("gpu_window_ns"), stat).alias(f"{tag}_window_ns"))
        )

    t = agg(inst_a, "a").join(agg(inst_b, "b"), on=["seq_lo", "seq_hi"], how="inner")
    return t.with_columns((pl.col("a_window_ns") - pl.col("b_window_ns")).alias("delta_ns")).sort("seq_lo")


SEQ_RATIO: Final = 1.25  # sides whose mean sequence lengths differ by more than this are flagged


def seq_check(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """``differs`` when the sides' mean sequence lengths differ by more than ``SEQ_RATIO`` either
    way, ``unknown`` when a side has none, else None (side summaries with ``mean_seq_len``)."""
    if a["mean_seq_len"] and b["mean_seq_len"]:
        ratio = a["mean_seq_len"] / b["mean_seq_len"]
        return "differs" if ratio > SEQ_RATIO or ratio < 1 / SEQ_RATIO else None
    if a["mean_seq_len"] is None or b["mean_seq_len"] is None:
        return "unknown"
    return None


@dataclass(frozen=True)
class Explanation:
    """A bucket whose delta is material, with its evidence (words: ``tracekit.render.gap``).

    ``families``: the kernel rows (``kernel_table``) of the bucket's category that moved the same
    way as the bucket, largest first, at most two; ``wait_share_a`` / ``_b``: for ``allreduce``,
    the share of allreduce kernel time spent waiting for the last rank on each side."""

    bucket: str
    a_ns: float
    b_ns: float
    delta_ns: float
    families: tuple[dict[str, Any], ...] = ()
    wait_share_a: float | None = None
    wait_share_b: float | None = None


def _wait_share(side: dict[str, Any]) -> float | None:
    k, w = side["allreduce_kernel_ns"], side["allreduce_wait_ns"]
    return w / k if k and w is not None else None


def explanations(buckets: pl.DataFrame, kern: pl.DataFrame, a: dict[str, Any], b: dict[str, Any],
                 min_share: float = 0.02, families: int = 2) -> list[Explanation]:
    """One item per bucket whose |delta| is at least ``min_share`` of the total, ranked by |delta|."""
    total = abs(a["gpu_window_ns"] - b["gpu_window_ns"])
    rows = [r for r in buckets.iter_rows(named=True) if r["bucket"] != "gpu_window"]
    rows.sort(key=lambda r: abs(r["delta_ns"]), reverse=True)
    out = []
    for r in rows:
        d, bucket = r["delta_ns"], r["bucket"]
        if d == 0 or (total > 0 and abs(d) < min_share * total):
            continue
        fam: tuple[dict[str, Any], ...] = ()
        if bucket in CATEGORIES:  # a bucket of kernels (not a gap): its kernel families
            k = kern.filter((pl.col("category") == bucket) & ((pl.col("delta_ns") * d) > 0)).head(families)
            fam = tuple(k.to_dicts())
        wa, wb = (_wait_share(a), _wait_share(b)) if bucket == "allreduce" else (None, None)
        out.append(Explanation(bucket, r["a_ns"], r["b_ns"], d, fam, wa, wb))
    return out


def gap_report(
    a_events: pl.DataFrame,
    b_events: pl.DataFrame | None = None,
    *,
    a: str = "verify",
    b: str = "decode",
    rank: int | None = None,
    launch_latency_ns: int = DEFAULT_LAUNCH_LATENCY_NS,
    stat: str = "median",
) -> dict[str, Any]:
    """Everything ``tracekit gap`` shows. ``b_events`` None: B comes from the same run;
    ``stat``: median (default) or mean per instance (module doc).

    Keys: a, b (side summaries: dicts of means per instance), buckets, kernels,
    seq, by_rank (bucket means per side and rank), explanations (``Explanation`` items),
    total_delta_ns, seq_check (``seq_check``). An AnalysisError carries
    ``side`` "A" or "B" so the caller can name the right file.
    """
    try:
        inst_a, ev_a = side(a_events, a, rank, launch_latency_ns)
    except AnalysisError as exc:
        raise exc.located(side="A") from None
    try:
        inst_b, ev_b = side(b_events if b_events is not None else a_events, b, rank, launch_latency_ns)
    except AnalysisError as exc:
        raise exc.located(side="B") from None
    return gap_tables(inst_a, inst_b, family_times(ev_a, inst_a), family_times(ev_b, inst_b), a=a, b=b, stat=stat)


def gap_tables(inst_a: pl.DataFrame, inst_b: pl.DataFrame, fam_a: pl.DataFrame, fam_b: pl.DataFrame, *, a: str,
               b: str, stat: str) -> dict[str, Any]:
    """``gap_report`` from each side's instances (``side_instances``) and their ``family_times``."""
    sa, sb = side_summary(inst_a, stat), side_summary(inst_b, stat)
    sa["phase"], sb["phase"] = a, b
    buckets = bucket_table(sa, sb)
    kern = kernel_table(fam_a, inst_a, fam_b, inst_b, stat)
    per_rank = pl.concat(
        [
            inst_a.group_by("rank").agg(pl.lit("a").alias("side"), pl.len().alias("instances"),
                                       *[center(pl.col(c), stat).alias(c) for c in ("gpu_window_ns", *BUCKET_COLUMNS)]),
            inst_b.group_by("rank").agg(pl.lit("b").alias("side"), pl.len().alias("instances"),
                                       *[center(pl.col(c), stat).alias(c) for c in ("gpu_window_ns", *BUCKET_COLUMNS)]),
        ]
    ).sort(["rank", "side"])
    return {
        "a": sa,
        "b": sb,
        "buckets": buckets,
        "kernels": kern,
        "seq": seq_table(inst_a, inst_b, stat),
        "stat": stat,
        "by_rank": per_rank,
        "explanations": explanations(buckets, kern, sa, sb),
        "total_delta_ns": sa["gpu_window_ns"] - sb["gpu_window_ns"],
        "seq_check": seq_check(sa, sb),
    }


__all__ = ["SEQ_RATIO", "Explanation", "bucket_table", "explanations", "family_times", "gap_report", "gap_tables",
           "kernel_table", "seq_check", "seq_table", "side", "side_instances", "side_summary"]
