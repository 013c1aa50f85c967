"""Runs on object storage: a sharded run under a URL prefix (``s3://bucket/run/``, any fsspec URL).

``is_url(path)`` tells a URL from a local path; ``shard_urls(prefix)`` lists a prefix's
``rank-*.parquet``; ``read_bytes(url)`` and ``put_file(local, url)`` move one object (a PUT is atomic
on object stores: the object appears whole or not at all, so a shard is never half written there).
fsspec (and the protocol's package: s3fs for ``s3://``, the extra ``tracekit[s3]``) is imported only
when a URL is used. Credentials and endpoints come from the protocol's usual environment
(``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``~/.aws``...).
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Any

from tracekit.errors import RunError

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path: str | os.PathLike[str]) -> bool:
    """True for ``s3://...``, ``gs://...``, ``memory://...`` (not ``file://``: a local path)."""
    text = os.fspath(path)
    return bool(_URL.match(text)) and not text.startswith("file://")


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path inside it) of ``url``; RunError naming the missing package."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise RunError("a URL needs fsspec: pip install 'tracekit[s3]'", path=url) from None
    try:
        fs, inner = url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise RunError(f"cannot open this URL's storage ({exc}; for s3:// pip install 'tracekit[s3]')",
                       path=url) from None
    return fs, inner


def join(prefix: str, name: str) -> str:
    return prefix.rstrip("/") + "/" + name


def shard_urls(prefix: str, pattern: str) -> list[str]:
    """The objects under ``prefix`` matching ``pattern`` (a glob of names), sorted, as full URLs."""
    fs, inner = filesystem(prefix)
    proto = prefix.split("://", 1)[0]
    try:
        found = fs.glob(join(inner, pattern))
    except (OSError, ValueError) as exc:
        raise RunError(f"cannot list the prefix ({exc.__class__.__name__}: {exc})", path=prefix) from None
    return sorted(f"{proto}://{p.split('://', 1)[-1]}" for p in found)


def read_bytes(url: str) -> bytes:
    fs, inner = filesystem(url)
    try:
        data: bytes = fs.cat_file(inner)
    except (OSError, ValueError) as exc:
        raise RunError(f"cannot read ({exc.__class__.__name__}: {exc})", path=url) from None
    return data


def put_file(local: str, url: str) -> None:
    """Upload ``local`` to ``url`` (one PUT per object: atomic on object stores)."""
    fs, inner = filesystem(url)
    fs.put_file(local, inner)


def put_bytes(url: str, data: bytes) -> None:
    """Write ``data`` as the object ``url`` (one PUT: whole or absent)."""
    fs, inner = filesystem(url)
    fs.pipe_file(inner, data)


def remove(urls: list[str]) -> None:
    """Delete these objects (a missing one is no error)."""
    if not urls:
        return
    fs, _ = filesystem(urls[0])
    for url in urls:
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(url.split("://", 1)[-1])


def problem(exc: BaseException) -> str:
    """One line for a storage error of any protocol's package (botocore's, aiohttp's, OSError...)."""
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text[:300]}"


__all__ = ["filesystem", "is_url", "join", "problem", "put_bytes", "put_file", "read_bytes", "remove", "shard_urls"]
