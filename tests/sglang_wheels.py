"""Real sglang wheels for the contract tests: downloaded once, cached, unpacked (sources only).

Cache: ``$TRACEKIT_SGLANG_WHEELS`` (default ``~/.cache/tracekit/sglang-wheels``).
A wheel that is neither cached nor downloadable (offline) skips the test that
needs it, with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


def cache_dir() -> Path:
    return Path(os.environ.get("TRACEKIT_SGLANG_WHEELS") or Path.home() / ".cache" / "tracekit" / "sglang-wheels")


def wheel(version: str) -> Path:
    d = cache_dir()
    d.mkdir(parents=True, exist_ok=True)
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
    whl = wheel(version)
    out = cache_dir() / "src" / version
    marker = out / ".complete"
    if not marker.exists():
        with zipfile.ZipFile(whl) as zf:
            for name in zf.namelist():
                if name.startswith("sglang/") and name.endswith(".py"):
                    zf.extract(name, out)
        marker.write_text(whl.name)
    return out
