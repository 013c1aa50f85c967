"""Find trace files (files, globs, directories) and read them (.json or gzip'd)."""

from __future__ import annotations

import glob
import gzip
import hashlib
import mmap
import os
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from tracekit.errors import BadTraceError, TracekitError
from tracekit.inputs import open_input

_GunzipErrors: tuple[type[BaseException], ...] = (EOFError, gzip.BadGzipFile, zlib.error)
try:  # ISA-L inflate is ~2x faster than zlib; optional
    from isal import igzip as _igzip_mod
    from isal import isal_zlib as _isal_zlib

    _igzip: Any = _igzip_mod
    _GunzipErrors = (*_GunzipErrors, cast("type[BaseException]", _isal_zlib.error))
    _HAVE_ISAL = True
except ImportError:  # pragma: no cover
    _HAVE_ISAL = False


_MAX_DEFLATE_RATIO = 1032  # deflate expands at most ~1032:1: a larger ISIZE is a corrupt trailer
GZIP_RATIO = 128  # the inflated size a gzip input may reach: this many times its compressed size ...
GZIP_FLOOR = 64 << 20  # ... or this many bytes, whichever is larger (samples/h200x2-builtin: 12.9-16.0x)
_CHUNK = 16 << 20


class GzipTooLarge(Exception):
    """A gzip input that inflates beyond :func:`inflate_limit` (a decompression bomb or a corrupt file)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


def inflate_limit(compressed: int) -> int:
    """The most bytes a gzip input of ``compressed`` bytes may inflate to (``TRACEKIT_MAX_GZIP_RATIO``
    overrides the ratio)."""
    from tracekit import settings

    return max((settings.current().max_gzip_ratio or GZIP_RATIO) * compressed, GZIP_FLOOR)


def _inflate_bounded(raw: bytes, limit: int) -> bytes:
    """Every gzip member of ``raw`` inflated, a chunk at a time, never more than ``limit`` bytes
    (GzipTooLarge past it). Trailing zero bytes after the last member are ignored, as gzip does."""
    zmod: Any = _isal_zlib if _HAVE_ISAL else zlib
    out = bytearray()
    data = raw
    while data:
        d = zmod.decompressobj(31)
        buf = data
        while True:
            chunk = d.decompress(buf, min(_CHUNK, limit + 1 - len(out)))
            out += chunk
            if len(out) > limit:
                raise GzipTooLarge(limit)
            if d.eof:
                data = d.unused_data
                break
            buf = d.unconsumed_tail
            if not buf and not chunk:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
        if data and data[:2] != b"\x1f\x8b":
            if data.strip(b"\x00"):
                raise gzip.BadGzipFile("trailing garbage after the last gzip member")
            break
    return bytes(out)


def _gunzip(raw: bytes) -> bytes | memoryview:
    """The uncompressed bytes of a gzip file (every member), at most ``inflate_limit(len(raw))``
    (GzipTooLarge beyond). With ISA-L and a trailer whose ISIZE (the size mod 2**32) is within
    the limit, inflated straight into one anonymous memory map of that size: about half the CPU of
    ``igzip.decompress``, whose output buffer grows (copies, page faults) as it inflates, and the
    map is returned to the system as soon as the last view of it goes (a heap block of that size
    could stay in a malloc arena). The result is then a memoryview of the map. Otherwise (no
    ISA-L, several members, a size ISIZE does not tell) inflated a chunk at a time under the limit."""
    limit = inflate_limit(len(raw))
    isize = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if not _HAVE_ISAL or not 0 < isize <= min(_MAX_DEFLATE_RATIO * len(raw), limit):
        return _inflate_bounded(raw, limit)
    # reads every member, like igzip.decompress (which passes bytes too; the stub says BinaryIO)
    reader = _isal_zlib._GzipReader(raw)  # type: ignore[arg-type]
    buf = mmap.mmap(-1, isize)
    got = reader.readinto(buf)
    if got < isize:  # a trailer that does not tell the size (several members): trust the data
        return memoryview(buf)[:got]
    if reader.read(1):  # more than ISIZE: several members, or 4 GiB or more
        buf.close()
        return _inflate_bounded(raw, limit)
    return memoryview(buf)


_TRACE_SUFFIXES = (".json", ".json.gz")
_MERGED = re.compile(r"^merged-(?P<id>.+)\.trace\.json(\.gz)?$")


@dataclass(frozen=True)
class Source:
    """One input file: its path, size on disk and content hash."""

    path: str
    size: int
    sha256: str


def _is_trace_name(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES)


def _walk(top: Path, skipped: list[dict[str, str]] | None) -> list[Path]:
    """Trace files under ``top``. A subdirectory that cannot be read is said: BadTraceError, or an
    entry of ``skipped`` when given (never a rank silently missing)."""
    found: list[Path] = []

    def unreadable(exc: OSError) -> None:
        where = str(exc.filename) if exc.filename is not None else str(top)
        why = f"cannot read the directory ({exc.strerror or exc}): traces under it are not ingested"
        if skipped is None:
            raise BadTraceError(why, path=where)
        skipped.append({"path": where, "reason": why})

    for d, dirs, files in os.walk(top, onerror=unreadable):
        dirs.sort()
        found.extend(Path(d, f) for f in files if _is_trace_name(f) and Path(d, f).is_file())
    return sorted(found)


def discover(paths: Iterable[str | os.PathLike[str]], skipped: list[dict[str, str]] | None = None) -> list[Path]:
    """Expand files, globs and directories into a sorted, de-duplicated list of trace files.

    Directories are walked recursively for ``*.json`` / ``*.json.gz`` (regular files; a
    subdirectory that cannot be read: see ``_walk``). Inside a directory, SGLang's
    ``merged-<id>.trace.json.gz`` is left out when the per-rank files it was merged
    from are there too (it would duplicate every rank); name it explicitly to ingest it.
    """
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            if any(p.glob("rank-*.parquet")) and not any(p.rglob("*.json*")):
                raise TracekitError("is a capture's shard directory (rank-*.parquet), not traces: merge it with "
                                    f"`tracekit merge {p} -o run.parquet`, or pass it to any command that reads a run",
                                    path=str(p))
            out.extend(_drop_redundant_merged(_walk(p, skipped)))
        elif p.exists():
            out.append(p)
        elif glob.has_magic(str(raw)):
            hits = sorted(Path(h) for h in glob.glob(str(raw), recursive=True))
            files = [h for h in hits if h.is_file()]
            if not files:
                raise TracekitError("glob matched no files", path=str(raw))
            out.extend(files)
        else:
            raise TracekitError("no such file or directory", path=str(raw))
    seen: set[Path] = set()
    uniq: list[Path] = []
    for f in out:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            uniq.append(f)
    if not uniq:
        raise TracekitError("no trace files (*.json, *.json.gz) found", path=", ".join(str(p) for p in paths))
    return uniq


def _drop_redundant_merged(files: list[Path]) -> list[Path]:
    merged = [f for f in files if _MERGED.match(f.name)]
    if not merged:
        return files
    drop: set[Path] = set()
    for m in merged:
        match = _MERGED.match(m.name)
        assert match is not None
        pid = match.group("id")
        if any(f is not m and f.parent == m.parent and f.name.startswith(pid) and "TP-" in f.name for f in files):
            drop.add(m)
    return [f for f in files if f not in drop]


def read_trace_bytes(path: Path) -> tuple[bytes | memoryview, Source]:
    """The uncompressed JSON bytes of ``path`` (bytes, or a memoryview of a gunzipped file) and its
    Source record (size, sha256 of the file). Regular files only (``tracekit.inputs.open_input``);
    gzip data inflated under ``inflate_limit``."""
    with open_input(path, BadTraceError) as fh:
        try:
            raw = fh.read()
        except OSError as exc:
            raise BadTraceError(f"cannot read ({exc.strerror or exc})", path=str(path)) from None
    src = Source(path=str(path), size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    if raw[:2] == b"\x1f\x8b":
        try:
            data = _gunzip(raw)
        except GzipTooLarge as exc:
            raise BadTraceError(f"gzip data inflates to more than {exc.limit} bytes ({len(raw)} compressed; the limit "
                                f"is {GZIP_RATIO}x the compressed size, at least {GZIP_FLOOR >> 20} MiB): refused as a "
                                "likely decompression bomb (TRACEKIT_MAX_GZIP_RATIO raises it)", path=str(path)) from None
        except _GunzipErrors as exc:
            raise BadTraceError(f"truncated or corrupt gzip ({exc})", path=str(path)) from None
    else:
        data = raw
    return data, src
