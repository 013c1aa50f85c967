"""A run's shards made one: the ranks a run should hold, which are missing, the merge of a shard
directory (or URL prefix) into one run file, streamed rank by rank, and ``sink_run`` (a lazy table
written as a run file without being collected whole)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import __version__
from tracekit.manifest import typed
from tracekit.outputs import atomic_write
from tracekit.schema import (
    SCHEMA_VERSION,
)
from tracekit.store import (
    MANIFEST_KEY,
    ROW_GROUP_ROWS,
    Manifest,
    _collect,
    _manifest_of,
    _open_run,
    _RunFile,
    _scan,
    _strings_coded,
    load_run,
    write_run,
)


def expected_ranks(manifest: Mapping[str, Any]) -> list[int]:
    """The ranks a run should hold: ``captured_ranks``, the capture's ``ranks``, else the whole world."""
    man = typed(manifest)
    if man.captured_ranks is not None:
        return sorted(man.captured_ranks)
    if isinstance(man.capture.get("ranks"), list):
        return sorted(int(r) for r in man.capture["ranks"])
    return list(range(man.world_size)) if man.world_size is not None else man.rank_ids()


def shard_missing(shard_dir: str | os.PathLike[str], manifest: Mapping[str, Any]) -> dict[str, str]:
    """Ranks the shards of ``shard_dir`` should hold but do not, each with why (its log named when kept)."""
    from tracekit.urls import is_url, join, shard_urls

    d = os.fspath(shard_dir).rstrip("/") if is_url(shard_dir) else str(Path(shard_dir))
    man = typed(manifest)
    have = set(man.ranks)
    known = man.missing_ranks
    want = [r for r in expected_ranks(manifest) if str(r) not in have]
    # the logs kept beside the shards (under a URL prefix: listed once)
    logs = {u for u in shard_urls(d, "rank-*.log")} if want and is_url(d) else None
    out: dict[str, str] = {}
    for r in want:
        name = f"rank-{r:05d}.log"
        log = join(d, name) if logs is not None else str(Path(d) / name)
        why = known.get(str(r)) or f"no shard rank-{r:05d}.parquet in {d}"
        held = log in logs if logs is not None else Path(log).exists()
        out[str(r)] = why + (f" (its log: {log})" if held and log not in why else "")
    return out


def merge_shards(shard_dir: str | os.PathLike[str], out: str | os.PathLike[str], extra: Mapping[str, Any] | None = None) -> Path:
    """Merge a directory of per-rank shards into one run file (atomically; finalized: a shard directory
    that is not, as a shard whose rank's finalize failed, is finalized here). Ranks the shards'
    manifests expect but that have no shard land in ``missing_ranks`` with why. Shards of more than
    one host (a multi-host capture) are aligned by their collectives (``--align auto``).

    Finalized shards of one rank each are streamed (``_stream_merge``: a few passes over the shards'
    compressed bytes, the table never whole in memory); anything else is read whole and written."""
    files = _open_run(shard_dir)
    streamed = _stream_merge(files, shard_dir, out, extra)
    if streamed is not None:
        return streamed
    del files
    run = load_run(shard_dir)
    events, man = run.events, dict(run.manifest)
    if run.outdated is not None:  # a shard whose finalize failed or an older one: the merge is its writer
        from tracekit.finalize.pipeline import finalize_events
        from tracekit.finalize.version import stamp

        events, man = finalize_events(events), stamp(man)
    man = _merged_manifest(man, shard_dir, extra)
    from tracekit.manifest import hosts

    if len({h for h in hosts(man).values() if h}) > 1:
        from tracekit.analyzers.align import align_events
        from tracekit.errors import AnalysisError

        try:
            events, man = align_events(events, man, None)
        except AnalysisError as exc:  # written as recorded, and the manifest says why
            man["clock"] = {**dict(man.get("clock") or {}), "align": "none", "auto": f"ranks on several hosts, "
                            f"not aligned: {exc}"}
    return write_run(events, out, man)


def _merged_manifest(man: Manifest, shard_dir: str | os.PathLike[str], extra: Mapping[str, Any] | None) -> Manifest:
    man = dict(man)
    man["source"] = man.get("source", "merge")
    if extra:
        man.update(extra)
    missing = shard_missing(shard_dir, man)
    if missing:
        man["missing_ranks"] = missing
    return man


def _stream_merge(files: list[_RunFile], shard_dir: str | os.PathLike[str], out: str | os.PathLike[str],
                  extra: Mapping[str, Any] | None) -> Path | None:
    """``merge_shards`` of finalized shards of one rank each, in rank order, as a stream: the clock fit
    from their collective rows (``coll_match.alignment_rows``), the times checked, phase ids made unique
    (``unique_phase_ids``), then one ``sink_parquet`` pass. None when the shards are not such (the caller
    reads them whole)."""
    from tracekit.finalize.version import is_finalized, unique_phase_ids

    ranks = [list(f.manifest.get("ranks") or {}) for f in files]
    if len(files) < 2 or any(len(r) != 1 for r in ranks) or any(_strings_coded(f) for f in files):
        return None
    order = [int(r[0]) for r in ranks]
    if order != sorted(order) or len(set(order)) != len(order):
        return None
    man = _manifest_of(files)
    if not is_finalized(man):
        return None
    man = _merged_manifest(man, shard_dir, extra)
    lf = _scan(files)
    bad = lf.select((pl.col("start_ns").is_null() | pl.col("dur_ns").is_null() | (pl.col("dur_ns") < 0)).sum())
    if int(_collect(bad, shard_dir, check_times=False).item()):
        return None  # read whole: load_run names the first bad event
    from tracekit.manifest import hosts

    if len({h for h in hosts(man).values() if h}) > 1:
        from tracekit.analyzers.align import align_events
        from tracekit.analyzers.coll_match import ALIGN_COLUMNS, alignment_rows
        from tracekit.errors import AnalysisError

        rows = _collect(alignment_rows(lf), shard_dir, check_times=False)
        firsts = pl.concat([_collect(_scan([f]).head(1).select(ALIGN_COLUMNS), shard_dir, check_times=False)
                            for f in files])
        before = {int(k): int(v) for k, v in ((man.get("clock") or {}).get("offsets_ns") or {}).items()}
        try:
            _, man = align_events(pl.concat([firsts, rows]).unique(maintain_order=True), man, None)
        except AnalysisError as exc:  # written as recorded, and the manifest says why
            man["clock"] = {**dict(man.get("clock") or {}), "align": "none", "auto": f"ranks on several hosts, "
                            f"not aligned: {exc}"}
        add = {int(k): int(v) - before.get(int(k), 0) for k, v in (man["clock"].get("offsets_ns") or {}).items()}
        if any(add.values()):
            lf = lf.with_columns(pl.col("start_ns") + pl.col("rank").replace_strict(
                list(add), list(add.values()), default=0, return_dtype=pl.Int64))
    return sink_run(unique_phase_ids(lf), out, man)


def sink_run(events: pl.LazyFrame, path: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Path:
    """``write_run`` of a lazily built table, in one streaming pass (``sink_parquet``: the table is never
    whole in memory). ``events`` must already conform to the schema and be in canonical order (as
    ``write_run`` leaves them): ranks one after another, each sorted (the streamed merge, the bounded ingest)."""
    man = dict(manifest)
    man.setdefault("schema_version", SCHEMA_VERSION)
    man.setdefault("tracekit_version", __version__)
    meta = {MANIFEST_KEY.decode(): json.dumps(man, sort_keys=True, default=str)}
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(dest) as tmp:
        events.sink_parquet(tmp, compression="zstd", compression_level=1, row_group_size=ROW_GROUP_ROWS,
                            metadata=meta)
    return dest


__all__ = ["expected_ranks", "merge_shards", "shard_missing", "sink_run"]
