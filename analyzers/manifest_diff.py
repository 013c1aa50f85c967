"""Every difference between two run manifests, rank by rank.

Both manifests are flattened to dotted key paths (``env.NCCL_PROTO``,
``gpu.sm_clock_mhz``, ``versions.torch``, ``capture.cycles``, ...) and compared
per scope: ``run`` (top level: world size, capture/workload config, missing
ranks), ``launcher`` (the launching process) and each rank. Values are compared
as canonical JSON. Keys that differ between any two captures by nature (time
stamps, pids, file hashes, measured timings and profiler session counters) are
left out: VOLATILE (``tracekit.manifest.RUN_VOLATILE``, the one table of key kinds)
lists them; sections come from ``tracekit.manifest.section_of``.

Each difference has a ``section`` used to rank it: rank (a rank present in one
run only), env, version, gpu_state (clocks, throttle reasons, power limit),
pcie, hardware, world, config, gpu_sensor (power draw and temperature: they
move between any two runs, so they rank last), other.
"""

from __future__ import annotations

import json
from typing import Any, Final

import polars as pl

from tracekit.manifest import RUN_VOLATILE, SECTION_ORDER, section_of

VOLATILE: Final = RUN_VOLATILE
DIFF_SCHEMA: Final = {
    "scope": pl.String(),  # "run", "launcher" or the rank number as text
    "section": pl.String(),
    "key": pl.String(),
    "status": pl.String(),  # changed | only_old | only_new
    "old": pl.String(),  # canonical JSON, null when absent
    "new": pl.String(),
}


def flatten(obj: Any, prefix: str = "") -> dict[str, str]:
    """Dotted key path -> canonical JSON of every leaf (lists are leaves)."""
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif prefix:
        out[prefix] = json.dumps(obj, sort_keys=True, default=str)
    return out


def _scope_diff(scope: str, old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str, str, str, str | None, str | None]]:
    rows: list[tuple[str, str, str, str, str | None, str | None]] = []
    for key in sorted(set(old) | set(new)):
        if VOLATILE.search(key):
            continue
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        status = "changed" if a is not None and b is not None else ("only_old" if b is None else "only_new")
        rows.append((scope, section_of(scope, key), key, status, a, b))
    return rows


def manifest_diff(old: dict[str, Any], new: dict[str, Any]) -> pl.DataFrame:
    """Every difference between two manifests (module doc), sorted by section, key, scope."""
    rows: list[tuple[str, str, str, str, str | None, str | None]] = []
    top_old = {k: v for k, v in old.items() if k not in ("ranks", "launcher")}
    top_new = {k: v for k, v in new.items() if k not in ("ranks", "launcher")}
    rows += _scope_diff("run", flatten(top_old), flatten(top_new))
    rows += _scope_diff("launcher", flatten(old.get("launcher") or {}), flatten(new.get("launcher") or {}))
    ro: dict[str, Any] = old.get("ranks") or {}
    rn: dict[str, Any] = new.get("ranks") or {}
    for r in sorted(set(ro) | set(rn), key=lambda x: (len(x), x)):
        if r not in rn:
            rows.append((r, "rank", "rank", "only_old", json.dumps("present"), None))
            continue
        if r not in ro:
            rows.append((r, "rank", "rank", "only_new", None, json.dumps("present")))
            continue
        rows += _scope_diff(r, flatten(ro[r]), flatten(rn[r]))
    df = pl.DataFrame(rows, schema=DIFF_SCHEMA, orient="row")
    order = pl.DataFrame({"section": list(SECTION_ORDER), "_o": list(range(len(SECTION_ORDER)))})
    return (
        df.join(order, on="section", how="left")
        .with_columns(pl.col("scope").str.to_integer(strict=False).alias("_r"))
        .sort(["_o", "key", "status", "old", "new", "_r", "scope"], nulls_last=True)
        .drop(["_o", "_r"])
    )


def collapse(diff: pl.DataFrame) -> pl.DataFrame:
    """One row per distinct (section, key, status, old, new) with the scopes it applies to:
    ``scopes`` (list, ranks in numeric order) and ``n_scopes``. The same NCCL variable
    missing on all eight ranks is one row."""
    if diff.is_empty():
        return diff.with_columns(pl.lit(None, dtype=pl.List(pl.String())).alias("scopes"), pl.lit(0).alias("n_scopes")).drop("scope")
    order = pl.DataFrame({"section": list(SECTION_ORDER), "_o": list(range(len(SECTION_ORDER)))})
    return (
        diff.with_columns(pl.col("scope").str.to_integer(strict=False).alias("_r"))
        .sort(["_r", "scope"], nulls_last=False)
        .group_by(["section", "key", "status", "old", "new"], maintain_order=True)
        .agg(pl.col("scope").alias("scopes"))
        .with_columns(pl.col("scopes").list.len().alias("n_scopes"))
        .join(order, on="section", how="left")
        .sort(["_o", "key", "n_scopes"], descending=[False, False, True])
        .drop("_o")
    )
