"""The environment each rank process saw, as ``info`` shows it: every recorded variable, its value
and the ranks that saw it, and which of them tracekit itself set.

    rows = environment_rows(manifest)   # EnvRow per (variable, value), NCCL_* first
    doc = environment_doc(manifest)     # info --json's "environment"

Capture records, per rank, every ``NCCL_*``, ``CUDA_*``, ``TORCH_*``, ``PYTORCH_*``, ``SGLANG_*``,
``NVSHMEM_*``, ``TRACEKIT_*`` variable and a few named ones (``collectors/manifest.py``) as the
rank process saw them at start. A variable of ``tracekit.manifest.INJECTED_ENV`` with tracekit's
value in a captured run was set by tracekit (every rank gets it), not by the user. Ingested
traces carry no environment: the rows are empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracekit.manifest import INJECTED_ENV


@dataclass(frozen=True)
class EnvRow:
    """One value of one variable and the ranks that saw it (``value`` None: the ranks lacked it)."""

    var: str
    value: str | None
    ranks: tuple[int, ...]
    set_by_tracekit: bool


def _rank_envs(manifest: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    out: dict[int, Mapping[str, Any]] = {}
    for r, sec in (manifest.get("ranks") or {}).items():
        env = sec.get("env") if isinstance(sec, Mapping) else None
        if isinstance(env, Mapping) and str(r).lstrip("-").isdigit():
            out[int(r)] = env
    return out


def _order(var: str) -> tuple[int, str]:
    return (0 if var.startswith("NCCL_") else 1, var)


def environment_rows(manifest: Mapping[str, Any]) -> list[EnvRow]:
    """Every recorded variable, one row per distinct value (absent on some ranks: a row with value
    None), ``NCCL_*`` first, then by name."""
    envs = _rank_envs(manifest)
    captured = manifest.get("source") == "capture"
    rows: list[EnvRow] = []
    for var in sorted({v for env in envs.values() for v in env}, key=_order):
        by_value: dict[str | None, list[int]] = {}
        for r in sorted(envs):
            val = envs[r].get(var)
            by_value.setdefault(None if val is None else str(val), []).append(r)
        for val, ranks in by_value.items():
            mine = captured and val is not None and INJECTED_ENV.get(var) == val
            rows.append(EnvRow(var, val, tuple(ranks), mine))
    return rows


def environment_doc(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``{"by_rank": {rank: {var: value}}, "set_by_tracekit": {var: value}}`` (ranks as strings)."""
    envs = _rank_envs(manifest)
    mine = {row.var: row.value for row in environment_rows(manifest) if row.set_by_tracekit}
    return {
        "by_rank": {str(r): {k: envs[r][k] for k in sorted(envs[r], key=_order)} for r in sorted(envs)},
        "set_by_tracekit": mine,
    }


__all__ = ["EnvRow", "environment_doc", "environment_rows"]
