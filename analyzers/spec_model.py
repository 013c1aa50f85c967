"""Speculation economics from plain numbers: break-even accept length, tok/s, the chain model.

The conventions (tokens per cycle include the bonus token; cycle and decode-step
times in ns) are stated once in ``analyzers/spec.py``'s docstring; this module
holds the formulas, ``analyzers/spec.py`` takes their inputs from a trace.

- **Break-even accept length** = cycle time / decode step time, in tokens per
  cycle (bonus included): speculation beats plain decode only above it.
- **Chain model**: with k draft tokens each accepted with probability p given
  its predecessors were, expected tokens per cycle (bonus included) is
  ``1 + p + p^2 + ... + p^k``; k = None means an unbounded chain, 1 / (1 - p).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

NS_PER_S: Final = 1_000_000_000


def step_ns_from_tps(tps: float) -> float:
    """Decode step time (ns) of a sequence decoding at ``tps`` tokens/s (one token per step)."""
    if tps <= 0:
        raise ValueError("tok/s must be positive")
    return NS_PER_S / tps


def break_even_accept_len(cycle_ns: float, decode_step_ns: float) -> float:
    """Tokens per cycle (bonus included) at which a cycle matches plain decode."""
    if decode_step_ns <= 0:
        raise ValueError("decode step time must be positive")
    return cycle_ns / decode_step_ns


def tokens_per_s(tokens_per_cycle: float, cycle_ns: float) -> float:
    """Tokens per second of one sequence emitting ``tokens_per_cycle`` every ``cycle_ns``."""
    if cycle_ns <= 0:
        raise ValueError("cycle time must be positive")
    return tokens_per_cycle * NS_PER_S / cycle_ns


def tokens_needed(target_tps: float, cycle_ns: float) -> float:
    """Tokens per cycle (bonus included) a sequence needs for ``target_tps`` at this cycle time."""
    return target_tps * cycle_ns / NS_PER_S


def chain_accept_len(p: float, k: int | None) -> float:
    """Expected tokens per cycle, bonus included: 1 + p + ... + p^k (k=None: 1/(1-p))."""
    if not 0.0 <= p <= 1.0:
        raise ValueError("p must lie in [0, 1]")
    if k is None:
        return math.inf if p >= 1.0 else 1.0 / (1.0 - p)
    if k < 0:
        raise ValueError("k must be >= 0")
    if p == 1.0:
        return float(k + 1)
    return (1.0 - p ** (k + 1)) / (1.0 - p)


def solve_accept_prob(tokens_per_cycle: float, k: int | None, tol: float = 1e-12) -> float | None:
    """Per-position accept probability p with chain_accept_len(p, k) == tokens_per_cycle.

    ``tokens_per_cycle`` includes the bonus token. Returns 0.0 when one token per
    cycle (the bonus alone) is enough, None when it is unreachable with k draft
    tokens (more than k + 1 tokens needed). Bisection: the chain sum is
    increasing in p.
    """
    if tokens_per_cycle <= 1.0:
        return 0.0
    if k is not None and tokens_per_cycle > k + 1:
        return None
    if k is not None and tokens_per_cycle == k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if chain_accept_len(mid, k) < tokens_per_cycle:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Economics:
    """Speculation economics of one operating point (all times ns, lengths in tokens)."""

    cycle_ns: float
    decode_step_ns: float | None
    tokens_per_cycle: float | None  # bonus included
    batch_size: float
    draft_tokens: int | None  # k; None: unknown, chain model taken unbounded
    target_tps: float | None  # per sequence
    tps_per_seq: float | None
    tps_per_batch: float | None
    decode_tps_per_seq: float | None
    break_even_tokens: float | None
    needed_tokens: float | None
    needed_accept_prob: float | None  # None: unreachable with k draft tokens
    needed_cycle_ns: float | None  # cycle time giving target at the current accept length


def economics(
    cycle_ns: float,
    *,
    tokens_per_cycle: float | None,
    decode_step_ns: float | None,
    target_tps: float | None = None,
    draft_tokens: int | None = None,
    batch_size: float = 1.0,
) -> Economics:
    """Everything ``tracekit spec`` reports for one operating point, from plain numbers."""
    tps = None if tokens_per_cycle is None else tokens_per_s(tokens_per_cycle, cycle_ns)
    needed = None if target_tps is None else tokens_needed(target_tps, cycle_ns)
    return Economics(
        cycle_ns=cycle_ns,
        decode_step_ns=decode_step_ns,
        tokens_per_cycle=tokens_per_cycle,
        batch_size=batch_size,
        draft_tokens=draft_tokens,
        target_tps=target_tps,
        tps_per_seq=tps,
        tps_per_batch=None if tps is None else tps * batch_size,
        decode_tps_per_seq=None if decode_step_ns is None else NS_PER_S / decode_step_ns,
        break_even_tokens=None
        if decode_step_ns is None
        else break_even_accept_len(cycle_ns, decode_step_ns),
        needed_tokens=needed,
        needed_accept_prob=None if needed is None else solve_accept_prob(needed, draft_tokens),
        needed_cycle_ns=None
        if target_tps is None or tokens_per_cycle is None
        else tokens_per_cycle * NS_PER_S / target_tps,
    )


def shrink_targets(parts_ns: dict[str, float], needed_cycle_ns: float) -> dict[str, float | None]:
    """For each part of the cycle: the time it must fall to (others unchanged) for the cycle
    to reach ``needed_cycle_ns``; None when removing that part entirely is not enough.
    A part already fast enough keeps its time."""
    total = sum(parts_ns.values())
    excess = total - needed_cycle_ns
    out: dict[str, float | None] = {}
    for name, ns in parts_ns.items():
        if excess <= 0:
            out[name] = ns
        else:
            left = ns - excess
            out[name] = left if left >= 0 else None
    return out
