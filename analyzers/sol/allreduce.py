"""The allreduce floor: the ring model, its fit to a run's own collectives, the fallback to the GPU table.

Ring allreduce of M bytes over n ranks: t(M) = 2(n-1) alpha + 2(n-1)/n * M / beta (alpha: latency
per ring step, beta: bandwidth per direction). ``fit_ring`` fits alpha and beta by least squares
through the fastest transfer of each message size: the TRANSFER part of each collective (its time minus the
wait for the last rank to arrive, analyzers/coll_match.py), so that waiting for a straggler is
never taken for link time. A fit needs at least ``MIN_SIZES`` distinct sizes; with fewer, or
a fit whose alpha or beta is not positive, the GPU table's link (alpha estimate, beta = the
link's bandwidth) is used and the reason said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MIN_SIZES: Final = 2


@dataclass(frozen=True)
class RingModel:
    ranks: int
    alpha_ns: float
    beta_Bps: float
    source: str  # "fit" | "gpu table" | "fixed"
    detail: str  # the fit and its residual, or why the table's link is used
    fixed_ns: float | None = None  # a user's per-allreduce time (--allreduce-us), overriding the model

    def latency_ns(self) -> float:
        return 2 * (self.ranks - 1) * self.alpha_ns

    def bandwidth_ns(self, nbytes: float) -> float:
        return 2 * (self.ranks - 1) / self.ranks * nbytes / self.beta_Bps * 1e9 if self.ranks > 1 else 0.0

    def allreduce_ns(self, nbytes: float) -> float:
        if self.ranks <= 1:
            return 0.0
        if self.fixed_ns is not None:
            return self.fixed_ns
        return self.latency_ns() + self.bandwidth_ns(nbytes)

    def allgather_ns(self, nbytes_total: float) -> float:
        """Ring all-gather of ``nbytes_total`` (the gathered result): (n-1) alpha + (n-1)/n M / beta."""
        if self.ranks <= 1:
            return 0.0
        n = self.ranks
        return (n - 1) * self.alpha_ns + (n - 1) / n * nbytes_total / self.beta_Bps * 1e9

    def bound(self, nbytes: float) -> str:
        if self.fixed_ns is not None:
            return "link latency (given)"
        return "link latency" if self.latency_ns() >= self.bandwidth_ns(nbytes) else "link bandwidth"


@dataclass(frozen=True)
class RingFit:
    alpha_ns: float
    beta_Bps: float
    points: int
    sizes: int
    rms_residual_ns: float  # of every transfer about the fitted line
    rel_residual: float  # rms residual / mean transfer time
    beta_from_table: bool = False  # the transfers showed no bandwidth term (all latency-bound): beta given


def fit_ring(ranks: int, sizes: Sequence[float], times_ns: Sequence[float],
             fallback_beta_Bps: float | None = None) -> RingFit | None:
    """alpha, beta of t = 2(n-1) alpha + 2(n-1)/n M / beta through the fastest transfer of each message size
    (least squares over the sizes): a floor is a lower bound, so the line runs under every transfer, not
    through the typical one; the residual is every transfer's about that line. None with
    fewer than MIN_SIZES distinct sizes. Where the per-size floors do not rise with the size (every size
    latency-bound) and ``fallback_beta_Bps`` is given, beta is that and alpha the smallest latency left."""
    n = len(sizes)
    if n != len(times_ns) or ranks < 2 or len(set(sizes)) < MIN_SIZES:
        return None
    by: dict[float, list[float]] = {}
    for m, t in zip(sizes, times_ns, strict=True):
        by.setdefault(float(m), []).append(float(t))
    xs = sorted(by)
    ys = [min(by[x]) for x in xs]
    k = len(xs)
    mx, my = sum(xs) / k, sum(ys) / k
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    steps = 2 * (ranks - 1)
    from_table = False
    if b <= 0 and fallback_beta_Bps:
        b = steps / ranks / fallback_beta_Bps * 1e9
        a = min(y - b * x for x, y in zip(xs, ys, strict=True))  # under every size's fastest transfer
        from_table = True
    else:
        a = my - b * mx
    res = [t - (a + b * m) for m, t in zip(sizes, times_ns, strict=True)]
    rms = (sum(r * r for r in res) / n) ** 0.5
    mean_t = sum(times_ns) / n
    beta = steps / ranks / b * 1e9 if b > 0 else float("inf")
    return RingFit(a / steps, beta, n, k, rms, rms / mean_t if mean_t else 0.0, from_table)


def ring_model(ranks: int, table_alpha_ns: float, table_beta_Bps: float, link: str, fit: RingFit | None,
               why_no_fit: str, fixed_ns: float | None = None) -> RingModel:
    """The model the floor uses: a fixed time, the run's fit, or the table's link (see module doc).
    ``why_no_fit``: without a fit, why; with one, where its message sizes came from."""
    if fixed_ns is not None:
        return RingModel(ranks, table_alpha_ns, table_beta_Bps, "fixed",
                         f"{fixed_ns / 1000:g} us per allreduce, as given (--allreduce-us)", fixed_ns)
    if fit is not None and fit.alpha_ns > 0 and 0 < fit.beta_Bps < float("inf"):
        beta = f"beta {fit.beta_Bps / 1e9:.1f} GB/s" + (
            " (the GPU table's link: every size latency-bound)" if fit.beta_from_table else "")
        return RingModel(ranks, fit.alpha_ns, fit.beta_Bps, "fit",
                         f"fit to the fastest of {fit.points} transfers per size over {fit.sizes} message sizes: alpha "
                         f"{fit.alpha_ns / 1000:.2f} us, {beta}, rms residual {fit.rms_residual_ns / 1000:.2f} us"
                         f" ({fit.rel_residual * 100:.0f}% of the mean transfer); {why_no_fit}")
    if fit is not None:
        why_no_fit = (f"the fit to {fit.points} transfers gave alpha {fit.alpha_ns / 1000:.2f} us, beta "
                      f"{fit.beta_Bps / 1e9:.3g} GB/s (not both positive)")
    return RingModel(ranks, table_alpha_ns, table_beta_Bps, "gpu table",
                     f"{why_no_fit}: the GPU table's {link} link, alpha {table_alpha_ns / 1000:.2f} us (estimate), "
                     f"beta {table_beta_Bps / 1e9:.0f} GB/s")
