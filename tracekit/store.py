"""Read and write run.parquet: the event table plus a JSON manifest.

The manifest lives in the Parquet key-value metadata under the key ``tracekit``.
Wherever a run is read, a directory of per-rank shards (``rank-00003.parquet``,
each itself a run file) is accepted too and merged on the fly.

Manifest layout (all keys optional except ``schema_version``; the keys capture and ingest share
are typed in ``tracekit.manifest``, whose ``typed(manifest)`` reads any stored manifest):

    {
      "schema_version": 1,
      "tracekit_version": "0.1.0",
      "created_unix_ns": ...,
      "source": "capture" | "ingest" | "merge",
      "capture": {...},            # capture/workload config
      "launcher": {...},           # environment of the launching process
      "ranks": {"0": {...}, ...},  # per-rank metadata (env, devices, versions, clocks, pid, host, ...)
      "missing_ranks": {"3": "reason"},
      "world_size": 8,
      "sources": [{"path": ..., "size": ..., "sha256": ..., "rank": ...}],
      "clock": {"align": "none", "offsets_ns": {"0": 0, ...}},
      "finalize_version": 1,       # tracekit.finalize.FINALIZE_VERSION of the writer
      ...
    }
"""

from __future__ import annotations

import errno
import io
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgspec
import polars as pl

from tracekit import __version__
from tracekit.errors import RunError
from tracekit.inputs import decode_json, open_input
from tracekit.limits import MAX_NAME_BYTES, rank_problem, world_size_problem
from tracekit.manifest import RunManifest
from tracekit.outputs import atomic_write, publish
from tracekit.schema import (
    KINDS,
    SCHEMA,
    SCHEMA_VERSION,
    category_codes,
    conform,
    empty_events,
    sort_events,
)

MANIFEST_KEY = b"tracekit"
_CODED: Final = ("kind", "category")  # dictionary-encoded in the schema (schema.KIND_DTYPE)
SHARD_GLOB = "rank-*.parquet"

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Outdated:
    """A run whose manifest records an older (or no) ``finalize_version``: read as stored;
    ``tracekit upgrade`` (``tracekit.finalize.upgrade``) finalizes it again, once."""

    path: str
    from_version: int | None  # what its manifest recorded (None: nothing)
    to_version: int


@dataclass
class Run:
    """A loaded run: the event table and its manifest."""

    events: pl.DataFrame
    manifest: Manifest = field(default_factory=dict)
    path: str | None = None
    outdated: Outdated | None = None  # set by load_run for a run of an older pipeline

    @property
    def ranks(self) -> list[int]:
        return sorted(int(r) for r in self.events.get_column("rank").unique().drop_nulls())


def new_manifest(**fields: Any) -> Manifest:
    m: Manifest = {
        "schema_version": SCHEMA_VERSION,
        "tracekit_version": __version__,
        "created_unix_ns": time.time_ns(),
    }
    m.update(fields)
    return m


ROW_GROUP_ROWS: Final = 1 << 16


def write_run(
    events: pl.DataFrame,
    path: str | os.PathLike[str],
    manifest: Mapping[str, Any] | None = None,
    *,
    sort: bool = True,
    compression_level: int = 1,
) -> Path:
    """Write ``events`` (conformed to the schema) and ``manifest`` atomically to ``path``."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    df = conform(events)
    if sort and not is_canonical_order(df):
        df = sort_events(df)
    man = dict(manifest) if manifest is not None else new_manifest()
    man.setdefault("schema_version", SCHEMA_VERSION)
    man.setdefault("tracekit_version", __version__)
    meta = {MANIFEST_KEY.decode(): json.dumps(man, sort_keys=True, default=str)}
    with atomic_write(out) as tmp:
        # polars writes directly (no Arrow copy of the strings); dictionary-encodes strings,
        # the manifest goes into the file's key-value metadata. Row groups of 64 Ki rows: a
        # row group's strings are copied before they are encoded, so smaller groups keep an
        # ingest's peak RSS down. zstd level 1: the same size as level 3 on the samples (the
        # dictionary pages carry most of it) for less CPU.
        df.write_parquet(
            tmp,
            compression="zstd",
            compression_level=compression_level,
            row_group_size=ROW_GROUP_ROWS,
            metadata=meta,
        )
    return out


def is_canonical_order(df: pl.DataFrame) -> bool:
    """True if ``df`` is already in schema.sort_events order (rank, start, longer first, kind,
    name; no nulls in the keys): write_run then skips the sort and its full copy."""
    if df.height < 2:
        return True
    keys = ["rank", "start_ns", "dur_ns", "kind", "name"]
    if any(df.get_column(k).null_count() for k in keys):
        return False
    r, s, d, k, n = (pl.col(c) for c in keys)
    rp, sp, dp, kp, np_ = (pl.col(c).shift(1) for c in keys)
    ok = (r > rp) | ((r == rp) & ((s > sp) | ((s == sp) & ((d < dp) | ((d == dp) & ((k > kp) | ((k == kp) & (n >= np_))))))))
    return bool(df.select(ok.slice(1).all()).item())


def _shards(path: Path) -> list[Path]:
    try:
        shards = sorted(path.glob(SHARD_GLOB))
    except OSError as exc:
        raise RunError(f"cannot list the directory ({exc.strerror or exc})", path=str(path)) from None
    if not shards:
        raise RunError("directory holds no rank-*.parquet shards", path=str(path))
    return shards


@dataclass(frozen=True)
class _RunFile:
    """One file of a run, read once: its manifest and its events come from the same bytes, so a
    writer that renames a new version over the path meanwhile cannot pair one version's manifest
    with the other's events."""

    path: Path
    data: bytes
    manifest: Manifest


def _read_file(path: Path, data: bytes | None = None) -> _RunFile:
    """One run file, read once (``data``: its bytes, already fetched from a URL)."""
    if data is None:
        with open_input(path, RunError) as fh:
            try:
                data = fh.read()
            except OSError as exc:
                raise RunError(f"cannot read ({exc.strerror or exc})", path=str(path)) from None
    try:
        # the file's key-value metadata (polars reads the footer only; no pyarrow import at start-up)
        meta = pl.read_parquet_metadata(io.BytesIO(data))
    except (OSError, ValueError, pl.exceptions.PolarsError) as exc:  # garbage: ComputeError
        raise RunError(f"not a readable Parquet file ({exc.__class__.__name__}: {exc})", path=str(path)) from None
    raw = meta.get(MANIFEST_KEY.decode())
    if raw is None:
        raise RunError("Parquet file has no tracekit manifest (not a run.parquet)", path=str(path))
    return _RunFile(path, data, checked_manifest(decode_json(raw, what="manifest", path=str(path), error=RunError),
                                                 str(path)))


class _ShapeOnly(RunManifest, kw_only=True):
    """RunManifest with rank sections checked as objects only (``checked_manifest``)."""

    ranks: dict[str, dict[str, Any]] = msgspec.field(default_factory=dict)  # type: ignore[assignment]


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def checked_manifest(man: object, path: str) -> Manifest:
    """A decoded manifest checked against the typed manifest (``tracekit.manifest.RunManifest``) and
    the integer ranges (``tracekit.limits``): the first thing wrong is one RunError naming the key."""
    if not isinstance(man, dict):
        raise RunError(f"manifest is {_json_type(man)}, not a JSON object", path=path)
    version = man.get("schema_version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        shown = f"{_json_type(version)} {json.dumps(version)}" if not isinstance(version, int) else str(version)
        raise RunError(f"manifest schema_version is {shown}; this tracekit reads the integer {SCHEMA_VERSION}",
                       path=path)
    # the top level's keys typed strictly; a rank section must be an object (its leaves are read
    # leniently by typed(): a leaf of another type is left out, as in hand-made manifests)
    fields = {k: man[k] for k in RunManifest.__struct_fields__ if k in man and k != "ranks"}
    fields["ranks"] = man.get("ranks") or {}
    try:
        msgspec.convert(fields, _ShapeOnly, strict=True)
    except msgspec.ValidationError as exc:
        where = str(exc).rsplit(" - at `$", 1)
        key = f"manifest key {where[1].rstrip('`').lstrip('.')}: " if len(where) == 2 else "manifest: "
        raise RunError(f"{key}{where[0]}", path=path) from None
    if man.get("world_size") is not None and (why := world_size_problem(man["world_size"])) is not None:
        raise RunError(f"manifest {why}", path=path)
    for section in ("ranks", "missing_ranks"):
        for key in man.get(section) or {}:
            r = int(key) if key.lstrip("-").isdigit() and len(key) < 20 else key
            if (why := rank_problem(r)) is not None:
                raise RunError(f"manifest {section}: {why}", path=path)
    return man


# The clock's maps keyed by rank: a shard carries its own ranks' entries (ingest.sharded), merge_manifests
# unites them (each shard repeating the run's maps made n shards' footers grow as n squared).
CLOCK_BY_RANK: Final = ("offsets_ns", "residual_max_ns_by_rank")


def merge_manifests(manifests: Iterable[Manifest]) -> Manifest:
    """Merge shard manifests: per-rank sections (and ``CLOCK_BY_RANK``) are united, other keys taken from
    the first."""
    out: Manifest = {}
    ranks: dict[str, Any] = {}
    missing: dict[str, Any] = {}
    sources: list[Any] = []
    maps: dict[str, dict[str, Any]] = {}
    versions: list[Any] = []
    for m in manifests:
        versions.append(m.get("finalize_version"))
        for k, v in m.items():
            if k in ("ranks", "missing_ranks", "sources", "clock", "finalize_version"):
                continue
            out.setdefault(k, v)
        ranks.update(m.get("ranks", {}))
        missing.update(m.get("missing_ranks", {}))
        sources.extend(m.get("sources", []))
        clock = m.get("clock", {})
        for key in CLOCK_BY_RANK:
            if key in clock:
                maps.setdefault(key, {}).update(clock[key])
        if "clock" in m:
            out.setdefault("clock", {k: v for k, v in clock.items() if k != "offsets_ns"})
    # finalized only as far as the least finalized shard (a shard without the key: not at all)
    if versions and all(isinstance(v, int) for v in versions):
        out["finalize_version"] = min(versions)
    for r in ranks:
        missing.pop(r, None)
    out["ranks"] = ranks
    if missing:
        out["missing_ranks"] = missing
    if sources:
        out["sources"] = sources
    offsets = maps.pop("offsets_ns", {})
    if offsets or "clock" in out:
        out.setdefault("clock", {})
        out["clock"].update(maps)  # in the first shard's place (appended where it had none)
        out["clock"]["offsets_ns"] = offsets
    return out


def _open_run(path: str | os.PathLike[str]) -> list[_RunFile]:
    """Every file of a run (the file, or a shard directory's shards, or the shards under a URL prefix:
    ``tracekit.urls``), each read once."""
    from tracekit.urls import is_url

    if is_url(path):
        from tracekit.urls import read_bytes, shard_urls

        url = os.fspath(path)
        urls = shard_urls(url, SHARD_GLOB) if not url.endswith(".parquet") else [url]
        if not urls:
            raise RunError("no rank-*.parquet shards under this prefix", path=url)
        return [_read_file(Path(u), read_bytes(u)) for u in urls]
    p = Path(path)
    try:
        is_dir = p.is_dir()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:  # the CLI's os_error_line says how long, and the limit
            raise
        raise RunError(f"cannot read ({exc.strerror or exc})", path=str(p)) from None
    if is_dir:
        return [_read_file(s) for s in _shards(p)]
    return [_read_file(p)]


def _manifest_of(files: list[_RunFile]) -> Manifest:
    return files[0].manifest if len(files) == 1 else merge_manifests(f.manifest for f in files)


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The manifest of a run file, or the merged manifest of a shard directory (checked: ``checked_manifest``)."""
    return _manifest_of(_open_run(path))


def _scan(files: list[_RunFile]) -> pl.LazyFrame:
    old = [f for f in files if _strings_coded(f)]
    if not old:
        return pl.concat([pl.scan_parquet(f.data, schema=SCHEMA) for f in files], how="vertical")
    # a run written before kind / category were dictionary-encoded: the strings become codes here,
    # the one place a run is converted on read (a category outside the vocabulary is `other`, as
    # conform makes it; a kind outside it: RunError on collect)
    return pl.concat([_scan_file(f, f in old) for f in files], how="vertical")


def scan_run(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """A LazyFrame over the events of a run file or shard directory (manifest checked; each file read once)."""
    return _scan(_open_run(path))


def _strings_coded(f: _RunFile) -> bool:
    """True when the file stores kind / category as strings (written before schema.KIND_DTYPE)."""
    try:
        schema = pl.read_parquet_schema(io.BytesIO(f.data))
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise RunError(f"cannot read the Parquet schema ({exc.__class__.__name__}: {exc})", path=str(f.path)) from None
    return any(schema.get(c) == pl.String for c in _CODED)


def _scan_file(f: _RunFile, strings: bool) -> pl.LazyFrame:
    if not strings:
        return pl.scan_parquet(f.data, schema=SCHEMA)
    as_read = pl.Schema({c: pl.String() if c in _CODED else t for c, t in SCHEMA.items()})
    kinds = pl.read_parquet(f.data, columns=["rank", "kind", "name"]).filter(
        pl.col("kind").is_not_null() & ~pl.col("kind").is_in(list(KINDS)))
    if kinds.height:
        first = kinds.row(0, named=True)
        raise RunError(f"column kind: {kinds.height} event(s) of a kind tracekit does not know ({first['kind']!r}, "
                       f"rank {first['rank']}, {first['name']!r}; known: {', '.join(KINDS)})", path=str(f.path))
    return pl.scan_parquet(f.data, schema=as_read).with_columns(pl.col("kind").cast(SCHEMA["kind"]),
                                                                category_codes(pl.col("category")))


def _collect(lf: pl.LazyFrame, path: str | os.PathLike[str], *, check_times: bool = True) -> pl.DataFrame:
    try:
        df = lf.collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""  # polars adds hints on later lines
        raise RunError(f"cannot read events ({exc.__class__.__name__}: {first})", path=str(path)) from None
    if check_times:
        _check_times(df, str(path))
    return df


def _check_times(df: pl.DataFrame, path: str) -> None:
    """Every event of a run has a start and a duration (not negative) and a name within
    ``limits.MAX_NAME_BYTES``: a run that breaks this is one RunError (count, first example), never a
    span of 10^13 ms, a negative busy time or gigabytes spent listing one name."""
    if "name" in df.columns:
        long = df.filter(pl.col("name").str.len_bytes() > MAX_NAME_BYTES)
        if long.height:
            first = long.row(0, named=True)
            raise RunError(f"{long.height} event(s) with a name longer than {MAX_NAME_BYTES >> 20} MiB (first: rank "
                           f"{first.get('rank')}, {first.get('kind')}, {len(first['name'].encode()):,} bytes)", path=path)
    for col, bad in (("start_ns", pl.col("start_ns").is_null()),
                     ("dur_ns", pl.col("dur_ns").is_null() | (pl.col("dur_ns") < 0))):
        if col not in df.columns:
            continue
        n = int(df.select(bad.sum()).item())
        if n:
            first = df.filter(bad).row(0, named=True)
            what = "no start_ns" if col == "start_ns" else "no or a negative dur_ns"
            where = ", ".join(f"{k} {first[k]!r}" for k in ("rank", "kind", "name", "start_ns", "dur_ns") if k in first)
            raise RunError(f"{n} event(s) with {what} (first: {where})", path=path)


def load_run(path: str | os.PathLike[str], columns: list[str] | None = None) -> Run:
    """Events and manifest of a run file or shard directory, as finalized when written.

    Each file is read once, manifest and events from the same bytes (a concurrent writer's
    rename cannot tear the read). A shard directory is merged on the fly (phase ids made unique
    in the run). Readers never finalize: a run whose manifest records an older ``finalize_version``
    (or none) is read as stored and ``Run.outdated`` says so (the CLI prints one line naming
    ``tracekit upgrade``, which finalizes it again and writes it once).
    """
    from tracekit.finalize.version import unique_phase_ids

    files = _open_run(path)
    man = _manifest_of(files)
    lf = _scan(files)
    del files
    df = unique_phase_ids(_collect(lf if columns is None else lf.select(columns), path))
    return Run(events=df, manifest=man, path=str(path), outdated=outdated_of(path, man))


def outdated_of(path: str | os.PathLike[str], man: Manifest) -> Outdated | None:
    """``Run.outdated`` of a run with manifest ``man``: None when finalized by this tracekit's pipeline."""
    from tracekit.finalize.version import FINALIZE_VERSION, finalize_version, is_finalized

    return None if is_finalized(man) else Outdated(str(path), finalize_version(man), FINALIZE_VERSION)


@dataclass(frozen=True)
class RankFile:
    """One rank's events in a run file (a shard, or one rank's rows of a one-file run): what a task of a
    rank-by-rank analysis reads (``read_rank``). ``ident`` is the file's (inode, size, mtime ns) when the
    run was opened: a file replaced meanwhile is refused, as a one-file read never pairs two versions."""

    path: str
    rank: int
    ident: tuple[int, int, int]
    events: int = 0  # its rows in the file


@dataclass(frozen=True)
class RankedRun:
    """A run opened rank by rank (``open_ranked``): its manifest and where each rank's events are, no event."""

    path: str
    manifest: Manifest
    ranks: tuple[RankFile, ...]
    rows: int  # events in the run (the files' footers)
    sharded: bool
    outdated: Outdated | None = None


def _ident(path: str) -> tuple[int, int, int]:
    with open_input(path, RunError) as fh:
        st = os.fstat(fh.fileno())
    return st.st_ino, st.st_size, st.st_mtime_ns


def _footer(path: str) -> tuple[Manifest, int, tuple[int, int, int]]:
    """A run file's manifest and row count from its footer, and its identity."""
    ident = _ident(path)
    try:
        meta = pl.read_parquet_metadata(path)
        rows = int(pl.scan_parquet(path).select(pl.len()).collect().item())
    except (OSError, ValueError, pl.exceptions.PolarsError) as exc:
        raise RunError(f"not a readable Parquet file ({exc.__class__.__name__}: {exc})", path=path) from None
    raw = meta.get(MANIFEST_KEY.decode())
    if raw is None:
        raise RunError("Parquet file has no tracekit manifest (not a run.parquet)", path=path)
    return checked_manifest(decode_json(raw, what="manifest", path=path, error=RunError), path), rows, ident


def open_ranked(path: str | os.PathLike[str]) -> RankedRun | None:
    """The run at ``path`` (a file or a shard directory) opened rank by rank: footers and the rank column
    read, no event. None where only the whole-run read applies: a URL prefix, a file that stores kind /
    category as strings (an older writer: ``load_run`` converts it), events without a rank."""
    from tracekit.urls import is_url

    if is_url(path):
        return None
    p = Path(path)
    try:
        sharded = p.is_dir()
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise
        raise RunError(f"cannot read ({exc.strerror or exc})", path=str(p)) from None
    files = [str(s) for s in _shards(p)] if sharded else [str(p)]
    # the shards' manifests folded one at a time (each shard repeats the run's clock map: held together,
    # 1,024 of them took ~290 MB of the driver)
    merged: Manifest | None = None
    ranks: list[RankFile] = []
    rows = 0
    for f in files:
        man, n, ident = _footer(f)
        try:
            if any(pl.read_parquet_schema(f).get(c) == pl.String for c in _CODED):
                return None
            held = pl.scan_parquet(f).group_by("rank").len().sort("rank").collect()
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise RunError(f"cannot read events ({exc.__class__.__name__}: {exc})", path=f) from None
        if held.get_column("rank").null_count():
            return None
        merged = man if merged is None else merge_manifests((merged, man))
        rows += n
        ranks.extend(RankFile(f, int(r), ident, int(c)) for r, c in held.iter_rows())
    assert merged is not None  # _shards raised on a directory of none
    return RankedRun(str(path), merged, tuple(sorted(ranks, key=lambda f: f.rank)), rows, sharded,
                     outdated_of(path, merged))


def read_rank(f: RankFile) -> pl.DataFrame:
    """One rank's events (``RankFile``), checked as ``load_run`` checks a run, phase ids as stored."""
    return read_ranks([f])


def read_ranks(files: Sequence[RankFile], columns: Sequence[str] | None = None) -> pl.DataFrame:
    """The events of several ranks (``RankFile``s, in that order; ``columns``: those only), one filtered
    scan per file (row groups of other ranks skipped by their statistics), checked as ``read_rank``."""
    got: list[pl.DataFrame] = []
    for path in dict.fromkeys(f.path for f in files):
        mine = [f for f in files if f.path == path]
        changed = RunError("the file changed while the run was read rank by rank (written again meanwhile?)",
                           path=path, rank=mine[0].rank)
        if _ident(path) != mine[0].ident:
            raise changed
        lf = pl.scan_parquet(path, schema=SCHEMA)
        ranks = [f.rank for f in mine]
        lf = lf.filter(pl.col("rank") == ranks[0]) if len(ranks) == 1 else lf.filter(pl.col("rank").is_in(ranks))
        got.append(_collect(lf if columns is None else lf.select(list(columns)), path))
        if _ident(path) != mine[0].ident:
            raise changed
    return got[0] if len(got) == 1 else pl.concat(got, how="vertical")


def read_run(path: str | os.PathLike[str], columns: list[str] | None = None) -> pl.DataFrame:
    """The events of ``load_run`` (a finalized run; see there)."""
    return load_run(path, columns).events


__all__ = [
    "Manifest",
    "Outdated",
    "Run",
    "empty_events",
    "is_canonical_order",
    "load_run",
    "merge_manifests",
    "new_manifest",
    "outdated_of",
    "publish",
    "read_manifest",
    "read_run",
    "scan_run",
    "write_run",
]
