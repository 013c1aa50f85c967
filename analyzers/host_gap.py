"""``tracekit gap`` in host mode: phase A vs phase B on runs with no GPU events (CPU runs).

Pure functions over polars frames. Both sides go through
``analyzers.host_attribution`` (outermost CPU op per instant on the phase's
thread; buckets sum to the host range). Per bucket: mean per instance on each
side (every instance of every selected rank counts once), delta = A - B, delta
per token (A's mean per token minus B's; tokens = ``num_tokens``, else
``batch_size``), share of the total host-range gap. Explanations: one line per
bucket with a material delta, ranked by |delta| (the words: ``tracekit.render.host_attribute``).
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from tracekit.errors import AnalysisError, Side

from .gap import seq_check
from .host_attribution import HOST_BUCKET_COLUMNS, HOST_BUCKETS, host_report
from .robust import center

MIN_SHARE: Final = 0.03  # a bucket explains the gap when its |delta| is at least this share of it
MAX_LINES: Final = 6


def _side(events: pl.DataFrame, phase: str, rank: int | None, tag: Side) -> pl.DataFrame:
    try:
        inst = host_report(events, phase, rank)["instances"]
    except AnalysisError as exc:
        raise exc.located(side=tag) from None
    if inst.height == 0:
        raise AnalysisError(f"no {phase} instances with a host range", side=tag)
    return inst


def _summary(inst: pl.DataFrame, phase: str, stat: str = "median") -> dict[str, Any]:
    tokens = pl.coalesce(pl.col("num_tokens"), pl.col("batch_size"))
    row = inst.select(
        pl.len().alias("instances"),
        pl.col("rank").n_unique().alias("ranks"),
        *[center(pl.col(c), stat).alias(c) for c in ("host_ns", *HOST_BUCKET_COLUMNS, "ops", "outer_ops")],
        tokens.cast(pl.Float64).mean().alias("mean_tokens"),
        pl.col("seq_len").cast(pl.Float64).mean().alias("mean_seq_len"),
    ).row(0, named=True)
    return {"phase": phase, **row, "stat": stat}


def host_bucket_table(a: dict[str, Any], b: dict[str, Any]) -> pl.DataFrame:
    """bucket, a_ns, b_ns, delta_ns, delta_per_token_ns, share (of the host-range gap); last row host_range."""
    total = a["host_ns"] - b["host_ns"]
    rows = []
    for name, col in [*zip(HOST_BUCKETS, HOST_BUCKET_COLUMNS, strict=True), ("host_range", "host_ns")]:
        va, vb = float(a[col]), float(b[col])
        per_tok = (
            va / a["mean_tokens"] - vb / b["mean_tokens"] if a["mean_tokens"] and b["mean_tokens"] else None
        )
        rows.append({
            "bucket": name, "a_ns": va, "b_ns": vb, "delta_ns": va - vb, "delta_per_token_ns": per_tok,
            "share": (va - vb) / total if total else None,
        })
    return pl.DataFrame(rows, schema={"bucket": pl.String, "a_ns": pl.Float64, "b_ns": pl.Float64, "delta_ns": pl.Float64,
                                      "delta_per_token_ns": pl.Float64, "share": pl.Float64})


def host_gap_report(
    a_events: pl.DataFrame, b_events: pl.DataFrame | None = None, *, a: str = "verify", b: str = "decode",
    rank: int | None = None, stat: str = "median",
) -> dict[str, Any]:
    """Keys: a, b (side summaries: ``stat`` per instance, median by default as ``analyzers.gap``),
    buckets, explanations (the ``buckets`` rows whose |delta| is at least ``MIN_SHARE`` of the
    total, ranked, at most ``MAX_LINES``), total_delta_ns, seq_check (``analyzers.gap.seq_check``,
    ``differs`` only), stat.

    AnalysisError messages start with ``A:`` or ``B:`` (as ``analyzers.gap``)."""
    ia = _side(a_events, a, rank, "A")
    ib = _side(b_events if b_events is not None else a_events, b, rank, "B")
    sa, sb = _summary(ia, a, stat), _summary(ib, b, stat)
    buckets = host_bucket_table(sa, sb)
    total = sa["host_ns"] - sb["host_ns"]
    ranked = buckets.filter(pl.col("bucket") != "host_range").sort(pl.col("delta_ns").abs(), descending=True)
    material = ranked.filter(pl.lit(total != 0) & (pl.col("delta_ns").abs() >= MIN_SHARE * abs(total))).head(MAX_LINES)
    return {
        "a": sa,
        "b": sb,
        "buckets": buckets,
        "explanations": material,
        "total_delta_ns": total,
        "seq_check": "differs" if seq_check(sa, sb) == "differs" else None,
        "stat": stat,
    }


__all__ = ["host_bucket_table", "host_gap_report"]
