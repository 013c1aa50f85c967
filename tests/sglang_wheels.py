"""Real sglang wheels for the contract tests: downloaded once, cached, unpacked (sources only).

Cache: ``$TRACEKIT_SGLANG_WHEELS`` (default ``~/.cache/tracekit/sglang-wheels``).
A wheel that is neither cached nor downloadable (offline) skips the test that
needs it, with the reason.
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


def cache_dir() -> Path:
    return Path(os.environ.get("TRACEKIT_SGLANG_WHEELS") or Path.home() / ".cache" / "tracekit" / "sglang-wheels")


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


def wheel(version: str) -> Path:
    d = cache_dir()
    with _locked(d):
        return _wheel(d, version)


def _wheel(d: Path, version: str) -> Path:
    found = sorted(d.glob(f"sglang-{version}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}", "-d", str(d)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"sglang {version} wheel not cached in {d} and pip download failed: {exc}")
    found = sorted(d.glob(f"sglang-{version}-*.whl"))
    if proc.returncode != 0 or not found:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"sglang {version} wheel not cached in {d} and not downloadable (offline?): {last}")
    return found[0]


def source(version: str) -> Path:
    """Directory holding the wheel's ``sglang`` package (only ``.py`` files unpacked)."""
    out = cache_dir() / "src" / version
    if (out / ".complete").exists():
        return out
    d = cache_dir()
    with _locked(d):
        whl = _wheel(d, version)
        if not (out / ".complete").exists():
            tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=d))
            with zipfile.ZipFile(whl) as zf:
                for name in zf.namelist():
                    if name.startswith("sglang/") and name.endswith(".py"):
                        zf.extract(name, tmp)
            (tmp / ".complete").write_text(whl.name)
            shutil.rmtree(out, ignore_errors=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, out)
    return out
