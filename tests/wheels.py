"""Real wheels of a package for the contract tests: downloaded once, cached, unpacked (sources only).

Cache: ``$<ENV>`` (default ``~/.cache/tracekit/<dist>-wheels``), e.g.
``$TRACEKIT_SGLANG_WHEELS``. A wheel that is neither cached nor downloadable
(offline) skips the test that needs it, with the reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest


def cache_dir(dist: str) -> Path:
    env = f"TRACEKIT_{dist.upper()}_WHEELS"
    return Path(os.environ.get(env) or Path.home() / ".cache" / "tracekit" / f"{dist}-wheels")


@contextlib.contextmanager
def _locked(d: Path) -> Iterator[None]:
    """One downloader / unpacker at a time (pytest-xdist workers share the cache)."""
    d.mkdir(parents=True, exist_ok=True)
    with open(d / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def wheel(dist: str, version: str) -> Path:
    d = cache_dir(dist)
    with _locked(d):
        return _wheel(d, dist, version)


def _wheel(d: Path, dist: str, version: str) -> Path:
    found = sorted(d.glob(f"{dist}-{version}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{dist}=={version}", "-d", str(d)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{dist} {version} wheel not cached in {d} and pip download failed: {exc}")
    found = sorted(d.glob(f"{dist}-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"{dist} {version} wheel not cached in {d} and not downloadable (offline?): {last}")
    return found[0]


def source(dist: str, version: str, prefixes: tuple[str, ...] | None = None) -> Path:
    """Directory holding the wheel's ``<dist>`` package: its ``.py`` files (under ``prefixes`` only, if given)."""
    out = cache_dir(dist) / "src" / version
    if (out / ".complete").exists():
        return out
    d = cache_dir(dist)
    keep = prefixes or (f"{dist}/",)
    with _locked(d):
        whl = _wheel(d, dist, version)
        if not (out / ".complete").exists():
            tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=d))
            with zipfile.ZipFile(whl) as zf:
                for name in zf.namelist():
                    if name.startswith(keep) and name.endswith(".py"):
                        zf.extract(name, tmp)
            (tmp / ".complete").write_text(whl.name)
            shutil.rmtree(out, ignore_errors=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, out)
    return out
