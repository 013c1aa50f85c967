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


def _gunzip(raw: bytes) -> bytes | memoryview:
    """The uncompressed bytes of a gzip file (every member). With ISA-L, inflated straight into
    one anonymous memory map of the size the trailer gives (ISIZE, the size mod 2**32): about half
    the CPU of ``igzip.decompress``, whose output buffer grows (copies, page faults) as it inflates,
    and the map is returned to the system as soon as the last view of it goes (a heap block of
    that size could stay in a malloc arena). The result is then a memoryview of the map."""
    if not _HAVE_ISAL:
        return gzip.decompress(raw)
    isize = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    if not 0 < isize <= _MAX_DEFLATE_RATIO * len(raw):
        out: bytes = _igzip.decompress(raw)
        return out
    # reads every member, like igzip.decompress (which passes bytes too; the stub says BinaryIO)
    reader = _isal_zlib._GzipReader(raw)  # type: ignore[arg-type]
    buf = mmap.mmap(-1, isize)
    got = reader.readinto(buf)
    if got < isize:  # a trailer that does not tell the size (several members): trust the data
        return memoryview(buf)[:got]
    rest = reader.readall()  # more than ISIZE: several members, or 4 GiB or more
    if rest:
        return bytes(buf) + rest
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


def discover(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files, globs and directories into a sorted, de-duplicated list of trace files.

    Directories are walked recursively for ``*.json`` / ``*.json.gz``. Inside a directory,
    SGLang's ``merged-<id>.trace.json.gz`` is left out when the per-rank files it was merged
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
            found = sorted(f for f in p.rglob("*") if f.is_file() and _is_trace_name(f.name))
            out.extend(_drop_redundant_merged(found))
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
    Source record (size, sha256 of the file)."""
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise BadTraceError("is a directory", path=str(path)) from None
    except OSError as exc:
        raise BadTraceError(f"cannot read ({exc.strerror})", path=str(path)) from None
    src = Source(path=str(path), size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    if raw[:2] == b"\x1f\x8b":
        try:
            data = _gunzip(raw)
        except _GunzipErrors as exc:
            raise BadTraceError(f"truncated or corrupt gzip ({exc})", path=str(path)) from None
    else:
        data = raw
    return data, src
