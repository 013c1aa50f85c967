"""What `tracekit info` reports about a run: pure functions over the event table and manifest.

    doc = run_summary(events, manifest)     # the `tracekit info --json` document

Per rank: ``kernels`` (count), ``kernel_ns`` (sum of kernel durations), ``busy_ns``
(interval union of kernel + memcpy + memset: overlapping kernels are counted once),
``span_ns`` (first GPU event start to last GPU event end), ``comm_ns`` (union of
``allreduce`` + ``comm`` kernels), ``by_category_ns`` (sum of durations per category).
``nccl``: per rank, the NCCL kernels by collective, dtype and the setting their names say
(``analyzers.nccl_mix``); ``environment``: every recorded variable per rank and those tracekit set
(``tracekit.env_view``). Manifest differences: between ranks (environment, versions, devices) and between
the launcher's environment and each rank's (a variable the launcher set that a
rank did not see is ``launcher_only``: the classic "NCCL_* never reached the
spawned ranks").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np
import polars as pl

from tracekit import schema
from tracekit.analyzers.nccl_mix import mix_of, nccl_counts
from tracekit.documents import INFO
from tracekit.env_view import environment_doc
from tracekit.finalize.categories import COMM_CATEGORIES, Rule, unmatched_kernels
from tracekit.intervals import union_ns
from tracekit.manifest import RANK_IDENTITY, RANK_MEASUREMENTS, typed

# Manifest leaves that identify a rank or sample a moving quantity, and per-rank sections that
# hold measurements: never "differences" (tracekit.manifest, the one table of key kinds).
_IDENTITY: Final = RANK_IDENTITY
_ENV_PREFIXES_LOUD: Final = ("NCCL_",)
_MEASUREMENTS: Final = RANK_MEASUREMENTS


@dataclass(frozen=True)
class Difference:
    """One manifest key whose value is not the same everywhere."""

    key: str  # dotted path, e.g. "env.NCCL_ALGO", "versions.torch"
    kind: str  # "ranks_differ" | "launcher_only" | "launcher_differs"
    values: dict[str, Any]  # "launcher" and rank ids -> value (None = absent)
    loud: bool  # an NCCL_* variable the launcher set that a rank did not see (shown in red)


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if str(k) in _IDENTITY:
                continue
            out.update(_flatten(v, key))
    elif isinstance(obj, list) and obj and all(isinstance(x, Mapping) for x in obj):
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}[{i}]"))
    else:
        out[prefix] = obj
    return out


def manifest_differences(manifest: Mapping[str, Any]) -> list[Difference]:
    """Keys whose values differ between ranks, and launcher env vars the ranks did not get."""
    ranks: Mapping[str, Any] = manifest.get("ranks") or {}
    flat = {
        r: _flatten({k: v for k, v in sec.items() if k not in _MEASUREMENTS})
        for r, sec in ranks.items()
        if isinstance(sec, Mapping)
    }
    diffs: list[Difference] = []
    if len(flat) > 1:
        keys = sorted(set().union(*[set(f) for f in flat.values()]))
        for key in keys:
            vals = {r: f.get(key) for r, f in flat.items()}
            if len({repr(v) for v in vals.values()}) > 1:
                diffs.append(Difference(key=key, kind="ranks_differ", values=_ordered(vals), loud=False))
    launcher = manifest.get("launcher") or {}
    lenv = launcher.get("env") if isinstance(launcher, Mapping) else None
    rank_envs: dict[str, Mapping[str, Any]] = {}
    for r, sec in ranks.items():
        env = sec.get("env") if isinstance(sec, Mapping) else None
        if isinstance(env, Mapping):
            rank_envs[str(r)] = env
    if isinstance(lenv, Mapping) and rank_envs:
        for var in sorted(lenv):
            if var in _IDENTITY:
                continue
            want = lenv[var]
            got = {r: env.get(var) for r, env in rank_envs.items()}
            if all(v == want for v in got.values()):
                continue
            absent = any(var not in env for env in rank_envs.values())
            kind = "launcher_only" if absent else "launcher_differs"
            loud = absent and var.startswith(_ENV_PREFIXES_LOUD)
            diffs.append(Difference(key=f"env.{var}", kind=kind, values={"launcher": want, **_ordered(got)}, loud=loud))
    diffs.sort(key=lambda d: (not d.loud, d.kind != "launcher_only", d.key))
    return diffs


def _ordered(vals: Mapping[str, Any]) -> dict[str, Any]:
    return dict(sorted(vals.items(), key=lambda kv: int(kv[0]) if str(kv[0]).lstrip("-").isdigit() else 1 << 30))


def _bounds(df: pl.DataFrame) -> tuple[int | None, int | None]:
    """(first start, last end) of the events in ``df``, or (None, None)."""
    if df.height == 0:
        return None, None
    s = df.get_column("start_ns").to_numpy().astype(np.int64)
    e = s + df.get_column("dur_ns").fill_null(0).to_numpy().astype(np.int64)
    return int(s.min()), int(e.max())


def _union(df: pl.DataFrame) -> int:
    if df.height == 0:
        return 0
    s = df.get_column("start_ns").to_numpy().astype(np.int64)
    e = s + df.get_column("dur_ns").to_numpy().astype(np.int64)
    return union_ns(s, e)


def rank_table(events: pl.DataFrame) -> pl.DataFrame:
    """One row per rank: events, kernels, kernel_ns, busy_ns, span_ns, comm_ns, gpu_start_ns, gpu_end_ns."""
    rows: list[dict[str, Any]] = []
    cols = ["rank", "kind", "category", "start_ns", "dur_ns"]
    ev = events.select(cols)
    for (rank,), part in ev.group_by(["rank"], maintain_order=False):
        gpu = part.filter(pl.col("kind").is_in(list(schema.GPU_KINDS)))
        k = gpu.filter(pl.col("kind") == schema.KERNEL)
        comm = k.filter(pl.col("category").is_in(list(COMM_CATEGORIES)))
        start, end = _bounds(gpu)
        rows.append({
            "rank": rank,
            "events": part.height,
            "kernels": k.height,
            "kernel_ns": int(k.get_column("dur_ns").sum()),
            "busy_ns": _union(gpu),
            "span_ns": end - start if start is not None and end is not None else 0,
            "comm_ns": _union(comm),
            "gpu_start_ns": start,
            "gpu_end_ns": end,
        })
    schema_ = {"rank": pl.Int32, "events": pl.Int64, "kernels": pl.Int64, "kernel_ns": pl.Int64, "busy_ns": pl.Int64,
               "span_ns": pl.Int64, "comm_ns": pl.Int64, "gpu_start_ns": pl.Int64, "gpu_end_ns": pl.Int64}
    return pl.DataFrame(rows, schema=schema_).sort("rank")


def category_table(events: pl.DataFrame) -> pl.DataFrame:
    """rank, category, count, total_ns (sum of durations) for GPU events."""
    gpu = events.filter(pl.col("kind").is_in(list(schema.GPU_KINDS)) & pl.col("category").is_not_null())
    return (
        gpu.group_by(["rank", "category"])
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("dur_ns").sum().alias("total_ns"))
        .sort(["rank", "total_ns"], descending=[False, True])
    )


@dataclass(frozen=True)
class InfoParts:
    """What ``run_summary`` reads from the events, in tables that add up over ranks (``info_parts`` of each
    rank's events, ``merge_info_parts``, then ``info_document``: a run read rank by rank)."""

    ranks: pl.DataFrame  # rank_table
    categories: pl.DataFrame  # category_table
    kinds: pl.DataFrame  # kind, len
    bounds: tuple[int | None, int | None]  # first start, last end of every event
    unmatched: pl.DataFrame  # unmatched_kernels, every row
    nccl: pl.DataFrame  # nccl_counts
    events: int


def info_parts(events: pl.DataFrame, rules: list[Rule] | None = None) -> InfoParts:
    """``run_summary``'s tables of ``events`` (a run, or one rank's events)."""
    return InfoParts(rank_table(events), category_table(events), events.group_by("kind").len(), _bounds(events),
                     unmatched_kernels(events, rules), nccl_counts(events), events.height)


def merge_info_parts(parts: list[InfoParts]) -> InfoParts:
    """The ``InfoParts`` of several ranks' events (each rank in one part) as of their events together."""
    starts = [p.bounds[0] for p in parts if p.bounds[0] is not None]
    ends = [p.bounds[1] for p in parts if p.bounds[1] is not None]
    un = pl.concat([p.unmatched for p in parts])
    un = un.group_by("name").agg(pl.col("normalized").first(), pl.col("count").sum(), pl.col("total_ns").sum())
    kinds = pl.concat([p.kinds for p in parts])
    return InfoParts(
        pl.concat([p.ranks for p in parts]).sort("rank"),
        pl.concat([p.categories for p in parts]).sort(["rank", "total_ns"], descending=[False, True]),
        kinds.group_by("kind").agg(pl.col("len").sum()),
        (min(starts) if starts else None, max(ends) if ends else None),
        un.select("name", "normalized", "count", "total_ns").sort(["total_ns", "name"], descending=[True, False]),
        pl.concat([p.nccl for p in parts]), sum(p.events for p in parts))


def run_summary(
    events: pl.DataFrame,
    manifest: Mapping[str, Any],
    *,
    rules: list[Rule] | None = None,
    top: int = 10,
) -> dict[str, Any]:
    """The `tracekit info --json` document (stable keys; times in int ns)."""
    return info_document(info_parts(events, rules), manifest, top=top)


def info_document(parts: InfoParts, manifest: Mapping[str, Any], *, top: int = 10) -> dict[str, Any]:
    """``run_summary`` from the run's ``InfoParts``."""
    ranks, cats = parts.ranks, parts.categories
    by_cat: dict[int, dict[str, int]] = {}
    for r, c, t in cats.select("rank", "category", "total_ns").iter_rows():
        by_cat.setdefault(int(r), {})[str(c)] = int(t)
    man_ranks: Mapping[str, Any] = manifest.get("ranks") or {}
    rank_docs = []
    for row in ranks.iter_rows(named=True):
        r = int(row["rank"])
        sec = man_ranks.get(str(r)) or {}
        rank_docs.append({
            **{k: row[k] for k in ("rank", "events", "kernels", "kernel_ns", "busy_ns", "span_ns", "comm_ns", "gpu_start_ns", "gpu_end_ns")},
            "by_category_ns": by_cat.get(r, {}),
            "devices": device_names(sec),
            "cpu_only": row["kernels"] == 0 and row["busy_ns"] == 0,
        })
    kinds = parts.kinds.sort("kind")
    start, end = parts.bounds
    unmatched = parts.unmatched.head(top)
    present = [int(r) for r in ranks.get_column("rank").to_list()]
    man = typed(manifest)
    return INFO.make({
        "run_schema_version": man.schema_version,
        "tracekit_version": man.tracekit_version,
        "source": man.source,
        "world_size": man.world_size if man.world_size is not None else len(present),
        "ranks_present": present,
        "missing_ranks": dict(man.missing_ranks),
        "start_ns": start,
        "end_ns": end,
        "span_ns": end - start if start is not None and end is not None else 0,
        "events": parts.events,
        "events_by_kind": {str(k): int(n) for k, n in kinds.iter_rows()},
        "ranks": rank_docs,
        "rank_summary": info_rank_summary(rank_docs, manifest),
        "versions": versions_by_rank(manifest),
        "unmatched_kernels": unmatched.to_dicts(),
        "differences": [asdict(d) for d in manifest_differences(manifest)],
        "nccl": [asdict(r) for r in mix_of(parts.nccl).rows],
        "environment": environment_doc(manifest),
        "notes": list(man.ingest.get("notes", [])),
        "skipped": list(man.ingest.get("skipped", [])),
    })


INFO_COLUMNS: Final = ("rank", "kind", "name", "category", "start_ns", "dur_ns", "correlation")  # what info reads
INFO_SUMMARISED: Final = ("kernel_ns", "busy_ns", "span_ns", "comm_ns")


def info_rank_summary(rank_docs: list[dict[str, Any]], manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``rank_summary`` of the info document: each of ``INFO_SUMMARISED`` over the ranks
    (``analyzers.rank_summary``; the ranks with the most of it named, with their host)."""
    from tracekit.analyzers.rank_summary import int_hosts, summarize

    hosts = int_hosts(manifest)
    out: dict[str, Any] = {}
    for key in INFO_SUMMARISED:
        s = summarize(((d["rank"], d[key]) for d in rank_docs), key, "ns", hosts=hosts)
        out[key] = None if s is None else s.to_dict()
    return out


def device_names(sec: Mapping[str, Any]) -> list[str]:
    """GPU names a rank's manifest section mentions (capture: gpu.name; ingest: deviceProperties)."""
    names: list[str] = []
    gpu = sec.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name"):
        names.append(str(gpu["name"]))
    if sec.get("gpu_name"):
        names.append(str(sec["gpu_name"]))
    props = sec.get("deviceProperties")
    devs = sec.get("devices")
    if isinstance(props, list):
        named = [p for p in props if isinstance(p, Mapping) and p.get("name")]
        used = [p for p in named if not isinstance(devs, list) or p.get("id") in devs]
        if not used and len(named) == 1:  # one visible device, numbered otherwise by the kernels (ROCm: id 0, device 2)
            used = named
        names += [str(p["name"]) for p in used]
    return sorted(set(names))


_VERSION_KEYS: Final = (
    ("torch", ("versions.torch",)),
    ("cuda", ("versions.cuda", "cuda_runtime_version")),
    ("cuda_driver", ("cuda_driver_version", "gpu.cuda_driver", "versions.cuda_driver")),
    ("driver", ("gpu.driver",)),
    ("nccl", ("versions.nccl", "nccl_version")),
    ("cupti", ("cupti_version",)),
    ("hip", ("hip_runtime_version",)),  # ROCm's Kineto: HIP_VERSION (major * 10^7 + minor * 10^5 + patch)
    ("roctracer", ("roctracer_version",)),
    ("sglang", ("versions.sglang",)),
)


def versions_by_rank(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {rank: value} for the versions the manifest records (absent ones left out)."""
    out: dict[str, dict[str, Any]] = {}
    for r, sec in (manifest.get("ranks") or {}).items():
        if not isinstance(sec, Mapping):
            continue
        flat = _flatten(sec)
        for name, keys in _VERSION_KEYS:
            for key in keys:
                if flat.get(key) is not None:
                    out.setdefault(name, {})[str(r)] = flat[key]
                    break
    return {k: _ordered(v) for k, v in out.items()}


__all__ = ["INFO_COLUMNS", "Difference", "InfoParts", "category_table", "device_names", "info_document", "info_parts", "manifest_differences",
           "merge_info_parts", "rank_table", "run_summary", "versions_by_rank"]
