"""Read log files (and metrics snapshots) into a log run: streaming, bounded memory, atomic output.

Each file is read in binary, line by line with a length limit (:data:`MAX_LINE`): a longer line
is skipped in pieces, counted and reported, never held whole. Bytes that are not UTF-8 are
replaced (the line is still read; the count is reported). Rows go to Parquet part files every
:data:`CHUNK_ROWS` rows; the output is assembled from the parts one part at a time, each with its
derived columns (:func:`tracekit.logs.accept.unify`), appended as row groups (a streaming sink of
all parts with the derived columns held them all: 4.6 GB peak RSS for a 1 GB log, 0.37 GB this
way: bench/results/logs.txt), and renamed over the output when complete.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit import __version__
from tracekit.errors import BadTraceError
from tracekit.logs import prometheus
from tracekit.logs.accept import (
    DraftTokens,
    infer_sglang_draft_tokens,
    meaning_given,
    sglang_draft_tokens,
    unify,
)
from tracekit.logs.grammars import FRAME_LINES, GRAMMARS
from tracekit.logs.lines import HalfMatch, Match, match_line, startup_fact
from tracekit.logs.patterns import UserPattern
from tracekit.logs.prefix import parse_prefix
from tracekit.logs.run import LOG_SCHEMA_VERSION, MANIFEST_KEY, head_bytes, parsed_schema

MAX_LINE: Final = 1 << 20  # bytes; a longer line is skipped (counted, its start shown)
CHUNK_ROWS: Final = 1 << 16
READ_BUFFER: Final = 1 << 20
EXAMPLES: Final = 5  # unmatched lines shown per file
HALF_EXAMPLES: Final = 10
MAX_UNKNOWN_LABELS: Final = 50
_PAIRS_MAX: Final = 10_000  # distinct (accept len, accept rate) pairs kept per file

Progress = Callable[[int, int, str], None]


@dataclass
class FileStats:
    path: str
    size: int = 0
    sha256: str = ""
    kind: str = "log"  # log | metrics
    lines: int = 0
    matched: Counter[str] = field(default_factory=Counter)
    unmatched: int = 0
    frame_lines: int = 0  # blank lines and the frame of multi-line records (grammars.FRAME_LINES)
    last_time_ns: int | None = None  # the last line time seen: the time of a multi-line record's unprefixed rows
    unmatched_examples: list[dict[str, Any]] = field(default_factory=list)
    half: int = 0
    half_examples: list[dict[str, Any]] = field(default_factory=list)
    unknown_fields: dict[str, Counter[str]] = field(default_factory=dict)
    invalid_utf8_lines: int = 0
    overlong_lines: int = 0
    startup: dict[str, Any] = field(default_factory=dict)
    year_assumed: int | None = None
    engine_version: str | None = None
    draft_tokens: DraftTokens | None = None
    accept_pairs: set[tuple[float, float]] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path, "size": self.size, "sha256": self.sha256, "kind": self.kind, "lines": self.lines,
            "matched": dict(self.matched), "unmatched": self.unmatched, "frame_lines": self.frame_lines,
            "unmatched_examples": self.unmatched_examples, "half_matched": self.half,
            "half_match_examples": self.half_examples,
            "unknown_fields": {g: dict(c) for g, c in self.unknown_fields.items()},
            "invalid_utf8_lines": self.invalid_utf8_lines, "overlong_lines": self.overlong_lines,
            "engine_version": self.engine_version, "startup": self.startup, "year_assumed": self.year_assumed,
            "draft_tokens_per_verify": None if self.draft_tokens is None else {
                "k": self.draft_tokens.k, "source": self.draft_tokens.source,
                "sglang_accept_rate_meaning": self.draft_tokens.meaning},
        }


@dataclass(frozen=True)
class LogParse:
    """What :func:`parse_logs` wrote."""

    path: Path
    rows: int
    manifest: dict[str, Any]


class _Sink:
    """Rows -> Parquet part files in a temp directory beside the output."""

    def __init__(self, schema: pl.Schema, directory: Path) -> None:
        self.schema = schema
        self.dir = directory
        self.buf: list[dict[str, Any]] = []
        self.parts: list[Path] = []
        self.rows = 0

    def add(self, row: dict[str, Any]) -> None:
        self.buf.append(row)
        if len(self.buf) >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        df = pl.from_dicts(self.buf, schema=self.schema, strict=False)
        part = self.dir / f"part-{len(self.parts):06d}.parquet"
        df.write_parquet(part, compression="lz4")
        self.parts.append(part)
        self.rows += df.height
        self.buf = []


class _Intervals:
    """``interval_ns``: time since the previous row of the same file, record and tags."""

    def __init__(self) -> None:
        self.last: dict[tuple[Any, ...], int] = {}

    def __call__(self, row: dict[str, Any]) -> None:
        t = row.get("time_ns")
        if t is None:
            return
        key = (row["file"], row["grammar"], row.get("dp"), row.get("tp"), row.get("engine_index"), row.get("pid"))
        prev = self.last.get(key)
        self.last[key] = t
        if prev is not None and t >= prev:
            row["interval_ns"] = t - prev


def _lines(fh: Any, st: FileStats) -> Iterator[bytes]:
    while True:
        raw = fh.readline(MAX_LINE)
        if not raw:
            return
        if len(raw) >= MAX_LINE and not raw.endswith(b"\n"):
            st.lines += 1
            st.overlong_lines += 1
            rest = 0
            while True:  # skip the rest of the line without holding it
                more = fh.readline(MAX_LINE)
                rest += len(more)
                if not more or more.endswith(b"\n"):
                    break
            if len(st.unmatched_examples) < EXAMPLES:
                st.unmatched_examples.append({"line": st.lines, "text": raw[:120].decode("utf-8", "replace"),
                                              "why": f"longer than {MAX_LINE} bytes ({len(raw) + rest} bytes): skipped"})
            continue
        yield raw


def _decode(raw: bytes, st: FileStats) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        st.invalid_utf8_lines += 1
        return raw.decode("utf-8", errors="replace")


def _year(path: Path) -> int:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC).year


def _file_rows(path: Path, index: int, st: FileStats, patterns: list[UserPattern], sink: _Sink,
               intervals: _Intervals, progress: Progress | None, done: int, total: int) -> None:
    year = _year(path)
    digest = hashlib.sha256()
    used_year = False
    last_tick = time.monotonic()
    with open(path, "rb", buffering=READ_BUFFER) as fh:
        for raw in _lines(_Hashing(fh, digest), st):
            st.lines += 1
            line = _decode(raw, st).rstrip("\r\n")
            results = match_line(line, patterns, year)
            if not results:
                fact = startup_fact(line, st.startup)
                if fact is not None:
                    engine, kind, facts = fact
                    st.startup.setdefault(kind, facts)
                    if kind == "engine_config" and st.engine_version is None:
                        st.engine_version = f"{engine} {facts['version']}"
                    continue
                if not line.strip() or any(rx.search(line) for rx in FRAME_LINES):
                    st.frame_lines += 1
                    t = parse_prefix(line, year).time_ns  # a record's first line: its rows' time
                    if t is not None:
                        st.last_time_ns = t
                    continue
                st.unmatched += 1
                if len(st.unmatched_examples) < EXAMPLES:
                    st.unmatched_examples.append({"line": st.lines, "text": line[:200]})
                continue
            for r in results:
                if isinstance(r, HalfMatch):
                    st.half += 1
                    if len(st.half_examples) < HALF_EXAMPLES:
                        st.half_examples.append({"line": st.lines, "grammar": r.grammar, "field": r.field,
                                                 "problem": r.problem, "text": line[:200]})
                    continue
                _add(r, index, st, sink, intervals)
                used_year = used_year or (r.row.get("time_ns") is not None and "vllm" in r.grammar)
            if progress is not None and time.monotonic() - last_tick > 0.2:
                last_tick = time.monotonic()
                progress(done + fh.tell(), total, str(path))
    st.sha256 = digest.hexdigest()
    if used_year:
        st.year_assumed = year


class _Hashing:
    """A binary file whose bytes read are also hashed (sha256 of the whole file, read once)."""

    def __init__(self, fh: Any, digest: Any) -> None:
        self.fh, self.digest = fh, digest

    def readline(self, limit: int) -> bytes:
        b: bytes = self.fh.readline(limit)
        self.digest.update(b)
        return b


def _add(m: Match, index: int, st: FileStats, sink: _Sink, intervals: _Intervals) -> None:
    g = next((g for g in GRAMMARS if g.name == m.grammar), None)
    row = m.row
    if row.get("time_ns") is None and g is not None and g.record == "graph_stats":
        row["time_ns"] = st.last_time_ns  # a table row: the time of its record's first line
    elif row.get("time_ns") is not None:
        st.last_time_ns = row["time_ns"]
    row["file"] = index
    row["line"] = st.lines
    row["grammar"] = m.grammar
    if g is not None:
        row["engine"] = g.engine
        row["record"] = g.record
    else:
        row["engine"] = "user"
        row["record"] = "user"
    st.matched[m.grammar] += 1
    for label in m.unknown:
        c = st.unknown_fields.setdefault(m.grammar, Counter())
        if label in c or len(c) < MAX_UNKNOWN_LABELS:
            c[label] += 1
    tok, run = row.get("token"), row.get("running_req")
    if tok is not None and run:
        row["tokens_per_req"] = tok / run
    a, r = row.get("sglang_accept_len"), row.get("sglang_accept_rate")
    if a is not None and r is not None and len(st.accept_pairs) < _PAIRS_MAX:
        st.accept_pairs.add((a, r))
    if row["record"] != "graph_stats":  # a table's rows share one time: no interval between them
        intervals(row)
    sink.add(row)


def _metrics_files(paths: Sequence[Path], indices: Sequence[int], stats: Sequence[FileStats], sink: _Sink) -> None:
    snaps = []
    for p, i, st in zip(paths, indices, stats, strict=True):
        data = p.read_bytes()
        st.sha256 = hashlib.sha256(data).hexdigest()
        text = data.decode("utf-8", errors="replace").splitlines()
        st.lines = len(text)
        snaps.append(prometheus.read_snapshot(text, i, prometheus.snapshot_time_ns(text) or p.stat().st_mtime_ns, str(p)))
    for engine, a, b in prometheus.pairs(snaps):
        st = stats[indices.index(b.file)]
        try:
            row = prometheus.interval_row(engine, a, b)
        except prometheus.CounterReset as exc:
            st.half += 1
            st.half_examples.append({"line": 0, "grammar": f"prometheus.{engine}", "field": "", "problem": str(exc),
                                     "text": ""})
            continue
        st.matched[row["grammar"]] += 1
        if row.get("token") is not None and row.get("running_req"):
            row["tokens_per_req"] = row["token"] / row["running_req"]
        sink.add(row)
    for snap, st in zip(snaps, stats, strict=True):
        st.startup["metrics_engines"] = sorted(snap.engines())


def parse_logs(paths: Sequence[str], out: str | os.PathLike[str], patterns: list[UserPattern], *,
               engine_version: str | None = None, progress: Progress | None = None) -> LogParse:
    """Parse ``paths`` into the log run ``out`` (written atomically: a temp file renamed)."""
    from tracekit.outputs import atomic_write, named_os_error

    files = [Path(p) for p in paths]
    for p in files:
        if not p.is_file():
            raise BadTraceError("no such file" if not p.exists() else "not a file", path=str(p))
    user = {name: kind for pat in patterns for name, kind in pat.fields}
    schema = parsed_schema(user)
    dest = Path(out)
    total = sum(p.stat().st_size for p in files)
    tmpdir = Path(tempfile.mkdtemp(prefix=f".{dest.name[:40]}.", suffix=".parts", dir=dest.parent))
    try:
        sink = _Sink(schema, tmpdir)
        intervals = _Intervals()
        stats: list[FileStats] = []
        metric_paths: list[Path] = []
        metric_idx: list[int] = []
        done = 0
        for i, p in enumerate(files):
            st = FileStats(path=str(p), size=p.stat().st_size)
            stats.append(st)
            if prometheus.looks_like_metrics(head_bytes(p, 4096) or b""):
                st.kind = "metrics"
                metric_paths.append(p)
                metric_idx.append(i)
            else:
                _file_rows(p, i, st, patterns, sink, intervals, progress, done, total)
            done += st.size
            if progress is not None:
                progress(done, total, str(p))
        if metric_paths:
            _metrics_files(metric_paths, metric_idx, [stats[i] for i in metric_idx], sink)
        sink.flush()
        k_by_file: dict[int, int] = {}
        for i, st in enumerate(stats):
            given = sglang_draft_tokens(st.startup.get("server_args", {}))
            if given is not None:
                meaning = meaning_given(st.accept_pairs, given.k + 1)
                given = dataclasses.replace(given, meaning=meaning)
            st.draft_tokens = given or infer_sglang_draft_tokens(st.accept_pairs)
            if st.draft_tokens is not None:
                k_by_file[i] = st.draft_tokens.k
            if engine_version and st.engine_version is None:
                st.engine_version = engine_version
        manifest = _manifest(stats, patterns)
        with atomic_write(dest) as tmp:
            _assemble(sink.parts, schema, k_by_file, manifest, tmp)
        return LogParse(path=dest, rows=sink.rows, manifest=manifest)
    except BaseException as exc:
        named = named_os_error(exc, dest)
        if named is not exc:
            raise named from None
        raise
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _assemble(parts: list[Path], schema: pl.Schema, k_by_file: dict[int, int], manifest: dict[str, Any],
              dest: str) -> None:
    """The log run from the parts, one part in memory at a time: each gets the derived columns
    (:func:`unify`) and is appended as a row group; the manifest goes into the key-value metadata."""
    import json

    import pyarrow.parquet as pq

    frames = (pl.read_parquet(p) for p in parts) if parts else iter([schema.to_frame()])
    writer: Any = None
    try:
        for df in frames:
            table = unify(df.lazy(), k_by_file).collect().to_arrow()
            if writer is None:
                meta = {**(table.schema.metadata or {}), MANIFEST_KEY.encode(): json.dumps(
                    manifest, sort_keys=True, default=str).encode()}
                writer = pq.ParquetWriter(dest, table.schema.with_metadata(meta), compression="zstd",
                                          compression_level=1)
            writer.write_table(table.replace_schema_metadata(writer.schema.metadata), row_group_size=CHUNK_ROWS)
    finally:
        if writer is not None:
            writer.close()


def _manifest(stats: list[FileStats], patterns: list[UserPattern]) -> dict[str, Any]:
    from tracekit.logs.grammars import GRAMMARS as ALL

    used = {g for st in stats for g in st.matched}
    return {
        "schema_version": LOG_SCHEMA_VERSION,
        "run_kind": "logs",
        "tracekit_version": __version__,
        "created_unix_ns": time.time_ns(),
        "clock": "engine log: the server's wall clock as printed (read as UTC), second resolution unless the "
                 "log prints milliseconds; metrics snapshots: their '# time:' comment, else the file's modification time",
        "sources": [st.to_json() for st in stats],
        "grammars": {g.name: {"engine": g.engine, "source": g.source} for g in ALL if g.name in used},
        "patterns": [p.text for p in patterns],
    }


__all__ = ["CHUNK_ROWS", "MAX_LINE", "FileStats", "LogParse", "parse_logs"]
