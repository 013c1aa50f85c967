"""The one definition of accept length and accept rate across engines and versions.

- ``accept_length``: tokens per verify **including the bonus token** (so >= 1): SGLang's
  ``accept len`` as printed; vLLM V1 ``1 + k * Accepted / Drafted`` (its ``Mean acceptance
  length`` computed from the printed integers; the printed 2-decimal value is kept raw); vLLM V0
  ``emitted * k / draft tokens`` (emitted tokens per verify step); metrics: ``1 + accepted / drafts``.
- ``accept_rate``: the mean acceptance of one draft token, ``(accept_length - 1) / k``, where
  ``k`` = ``draft_tokens_per_verify`` (draft tokens proposed per verify, the bonus excluded).
  vLLM's ``Avg Draft acceptance rate`` and V0's ``Draft acceptance rate`` are this quantity.
  SGLang's ``accept rate`` is **not** always: up to 0.5.9 it printed ``accept len /
  num_draft_tokens``; from 0.5.12 on ``(accept len - 1) / (num_draft_tokens - 1)``, with
  ``num_draft_tokens = k + 1``; both raw values are kept in ``sglang_accept_rate``.
- ``accept_pos_cond``: per-position **conditional** acceptance (position i accepted given
  position i-1 was): vLLM's per-position rates are unconditional (accepted at i / drafts), so
  ``c_1 = r_1``, ``c_i = r_i / r_{i-1}``.

``k`` for SGLang comes from the log's server arguments (``speculative_num_draft_tokens - 1``,
else ``speculative_num_steps``); without them from the printed accept rate when only one of the
two meanings gives one integer ``num_draft_tokens`` for every line of the file
(:func:`infer_sglang_draft_tokens`); else it is unknown and ``accept_rate`` is null for SGLang.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

import polars as pl

Meaning = Literal["len/N (sglang <= 0.5.9)", "(len-1)/(N-1) (sglang >= 0.5.12)"]
OLD: Final[Meaning] = "len/N (sglang <= 0.5.9)"
NEW: Final[Meaning] = "(len-1)/(N-1) (sglang >= 0.5.12)"
_HALF_CENT: Final = 0.005  # SGLang prints both values with 2 decimals


@dataclass(frozen=True)
class DraftTokens:
    """k for one file and how it was found."""

    k: int
    source: str  # "server_args", "accept rate (meaning ...)", "engine config"
    meaning: Meaning | None = None


def _n_range(length: float, rate: float, meaning: Meaning) -> tuple[float, float] | None:
    """The num_draft_tokens interval that the 2-decimal (len, rate) admits under ``meaning``."""
    lo_r, hi_r = rate - _HALF_CENT, rate + _HALF_CENT
    if lo_r <= 0:
        return None
    lo_l, hi_l = length - _HALF_CENT, length + _HALF_CENT
    if meaning == OLD:
        return lo_l / hi_r, hi_l / lo_r
    return 1 + max(lo_l - 1, 0) / hi_r, 1 + (hi_l - 1) / lo_r


def _consistent(pairs: Iterable[tuple[float, float]], meaning: Meaning) -> int | None:
    lo, hi = 1.0, math.inf
    n = 0
    for length, rate in pairs:
        r = _n_range(length, rate, meaning)
        if r is None:
            continue
        lo, hi = max(lo, r[0]), min(hi, r[1])
        n += 1
    if n == 0:
        return None
    ints = [i for i in range(max(2, math.ceil(lo)), math.floor(min(hi, 64)) + 1)]
    return ints[0] if len(ints) == 1 else None


def infer_sglang_draft_tokens(pairs: Iterable[tuple[float, float]]) -> DraftTokens | None:
    """``num_draft_tokens`` from the (accept len, accept rate) pairs of one file, when exactly one
    meaning gives exactly one integer for all of them (lines with accept len 1 or rate 0 say
    nothing and are skipped)."""
    useful = [(a, r) for a, r in pairs if r > _HALF_CENT and a > 1 + _HALF_CENT]
    if len({round(a, 2) for a, _r in useful}) < 2:
        return None  # one accept len fits both meanings: no evidence
    found = {m: _consistent(useful, m) for m in (OLD, NEW)}
    hits = [(m, n) for m, n in found.items() if n is not None]
    if len(hits) != 1:
        return None
    meaning, n = hits[0]
    return DraftTokens(k=n - 1, source=f"printed accept rate ({meaning})", meaning=meaning)


def meaning_given(pairs: Iterable[tuple[float, float]], n: int) -> Meaning | None:
    """Which meaning the printed (accept len, accept rate) pairs have, num_draft_tokens ``n`` known:
    the one every pair fits within the 2-decimal rounding (None: neither, both, or no pair)."""
    useful = [(a, r) for a, r in pairs if r > _HALF_CENT and a > 1 + _HALF_CENT]
    if not useful or n < 2:
        return None
    fits = [m for m in (OLD, NEW)
            if all((rng := _n_range(a, r, m)) is not None and rng[0] - 1e-9 <= n <= rng[1] + 1e-9 for a, r in useful)]
    return fits[0] if len(fits) == 1 else None


def sglang_draft_tokens(server_args: Mapping[str, str]) -> DraftTokens | None:
    """k from SGLang's server arguments (as printed: ``speculative_num_draft_tokens=4``)."""
    for key, minus in (("speculative_num_draft_tokens", 1), ("speculative_num_steps", 0)):
        raw = server_args.get(key)
        if raw is not None and raw.strip().isdigit() and int(raw) - minus >= 1:
            return DraftTokens(k=int(raw) - minus, source=f"server_args {key}={raw}")
    return None


def unify(lf: pl.LazyFrame, k_by_file: Mapping[int, int]) -> pl.LazyFrame:
    """Add ``draft_tokens_per_verify``, ``accept_length``, ``accept_rate``, ``accept_pos_cond``.

    ``k_by_file``: k of the SGLang lines of each file (``file`` index), where known.
    """
    rates = pl.col("vllm_per_position_rate")
    k_file = pl.col("file").replace_strict(dict(k_by_file), default=None, return_dtype=pl.Int64) \
        if k_by_file else pl.lit(None, pl.Int64)
    n_pos = rates.list.len().cast(pl.Int64)
    k = (pl.when(pl.col("record") == "spec_stats").then(
            pl.when(pl.col("num_spec_tokens").is_not_null()).then(pl.col("num_spec_tokens"))
            .when(n_pos > 0).then(n_pos))
         .when(pl.col("record") == "metrics_interval").then(pl.when(n_pos > 0).then(n_pos))
         .when(pl.col("engine") == "sglang").then(k_file)
         .otherwise(None)).cast(pl.Int64)
    acc = pl.col("accepted_tokens").cast(pl.Float64)
    drafted = pl.col("drafted_tokens").cast(pl.Float64)
    length = (
        pl.when((pl.col("record") == "spec_stats") & pl.col("emitted_tokens").is_not_null() & (drafted > 0))
        .then(pl.col("emitted_tokens") * pl.col("_k") / drafted)
        .when(pl.col("record").is_in(["spec_stats", "metrics_interval"]) & (drafted > 0) & pl.col("_k").is_not_null())
        .then(1 + pl.col("_k") * acc / drafted)
        .when(pl.col("record") == "spec_stats").then(pl.col("vllm_mean_acceptance_length"))
        .when(pl.col("record") == "finish").then(pl.col("spec_accept_length"))
        .when(pl.col("engine") == "sglang").then(pl.col("sglang_accept_len"))
        .otherwise(None)
    )
    return (lf.with_columns(k.alias("_k"))
            .with_columns(length.alias("accept_length"))
            .with_columns(
                pl.col("_k").alias("draft_tokens_per_verify"),
                pl.when(pl.col("accept_length").is_not_null() & (pl.col("_k") > 0))
                .then((pl.col("accept_length") - 1) / pl.col("_k")).otherwise(None).alias("accept_rate"),
                _conditional(rates).alias("accept_pos_cond"),
            ).drop("_k"))


def _conditional(rates: pl.Expr) -> pl.Expr:
    """c_1 = r_1, c_i = r_i / r_{i-1} (null where r_{i-1} is 0); null where there are no rates."""
    e, prev = pl.element(), pl.element().shift(1)
    cond = rates.list.eval(pl.when(prev.is_null()).then(e).when(prev == 0).then(None).otherwise(e / prev))
    return pl.when(rates.list.len() > 0).then(cond).otherwise(None)


__all__ = ["NEW", "OLD", "DraftTokens", "Meaning", "infer_sglang_draft_tokens", "meaning_given", "sglang_draft_tokens",
           "unify"]
