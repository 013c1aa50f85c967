"""A capture whose ``-o`` is a URL (``s3://bucket/run/``, ``s3://bucket/run.parquet``; any fsspec protocol).

``remote_of(out)`` says where the capture's files go: ``-o s3://bucket/run/`` (a trailing ``/``, a name
without ``.parquet``, or a prefix that already holds objects) leaves a sharded run under that prefix;
``-o s3://bucket/run.parquet`` puts the shards under ``s3://bucket/run.parquet.d/`` (the remote twin of
``RUN.d/``) and node 0 merges them into that one object. Every rank writes its shard in a local temporary
directory, then uploads it in one PUT (``upload``: whole or absent); logs and node files likewise.
``check`` runs before anything starts: one PUT and one DELETE of a probe object (the endpoint, bucket and
credentials are right), and no shards of an earlier capture under the prefix.
Credentials and endpoint come from the protocol's own environment (``tracekit.urls``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracekit.errors import OutputError
from tracekit.urls import is_url, join


@dataclass(frozen=True)
class Remote:
    out: str  # -o as given
    prefix: str  # where the shards, logs and node files go (no trailing /)
    merged: str | None  # the one object node 0 merges into; None: the run stays sharded under ``prefix``

    def url(self, name: str) -> str:
        return join(self.prefix, name)

    @property
    def run(self) -> str:
        """What the capture leaves: the merged object, or the prefix (a sharded run) with its trailing /."""
        return self.merged or self.prefix + "/"


def remote_of(out: str | os.PathLike[str]) -> Remote | None:
    """Where a capture to ``out`` writes (None: a local path). See the module docstring."""
    text = os.fspath(out)
    if not is_url(text):
        return None
    if text.endswith("/") or not text.endswith(".parquet") or _holds_objects(text):
        return Remote(out=text, prefix=text.rstrip("/"), merged=None)
    return Remote(out=text, prefix=text + ".d", merged=text)


def _holds_objects(url: str) -> bool:
    from tracekit.urls import filesystem

    fs, inner = filesystem(url)
    try:
        return bool(fs.isdir(inner))
    except Exception:  # an unreachable store: ``check`` says why, in one line
        return False


def check(remote: Remote, node: int, ranks: list[int]) -> None:
    """Before the capture starts: a probe object written and deleted under the prefix (endpoint, bucket,
    credentials), and none of ``ranks``' shards of an earlier capture there. OutputError (one line) else."""
    from tracekit.urls import problem, put_bytes, remove, shard_urls

    probe = remote.url(f".tracekit-probe-node{node:05d}-{os.getpid()}")
    try:
        put_bytes(probe, b"tracekit capture: write check\n")
        remove([probe])
        held = shard_urls(remote.prefix, "rank-*.parquet")
    except OutputError:
        raise
    except Exception as exc:
        raise OutputError(f"cannot write under this prefix ({problem(exc)}); credentials and endpoint come "
                          "from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ~/.aws)",
                          path=remote.out) from None
    mine = {f"rank-{r:05d}.parquet" for r in ranks}
    old = sorted(u.rsplit("/", 1)[-1] for u in held if u.rsplit("/", 1)[-1] in mine)
    if old:
        raise OutputError(f"the prefix already holds {', '.join(old[:4])}{' ...' if len(old) > 4 else ''} of an "
                          f"earlier capture or ingest: merge them (tracekit merge {remote.prefix} -o other.parquet) or "
                          "remove them", path=remote.out)


class UploadFailed(OutputError):
    """An upload that failed: its message is the one line the capture prints (a rank's failure, or the
    launcher's own error when a node file cannot be written)."""


def upload(local: Path, remote: Remote, what: str) -> str:
    """PUT ``local`` as ``prefix/<its name>``; returns the URL. UploadFailed names ``what`` and the URL."""
    return upload_to(local, remote.url(local.name), what)


def upload_to(local: Path, url: str, what: str) -> str:
    """PUT ``local`` as the object ``url`` (whole or absent); UploadFailed names ``what`` and the URL."""
    from tracekit.urls import problem, put_file

    try:
        put_file(str(local), url)
    except Exception as exc:
        raise UploadFailed(f"upload of {what} to {url} failed ({problem(exc)})", path=url) from None
    return url


__all__ = ["Remote", "UploadFailed", "check", "remote_of", "upload", "upload_to"]
