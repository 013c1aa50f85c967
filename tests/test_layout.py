"""The source tree mirrors the installed layout, so the type checker sees one package.

``pyproject.toml`` ships ``analyzers/`` and ``collectors/`` as ``tracekit.analyzers`` and
``tracekit.collectors`` (package-dir). ``tracekit/analyzers`` and ``tracekit/collectors`` are
committed symlinks to those folders, so mypy (``files = ["tracekit"]``) resolves every
``tracekit.analyzers.*`` / ``tracekit.collectors.*`` import without an ignore.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]


def test_symlinks_mirror_package_dir() -> None:
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = cfg["tool"]["setuptools"]["package-dir"]
    for pkg, folder in mapping.items():
        if pkg == "tracekit":
            continue
        link = REPO / Path(*pkg.split("."))
        assert link.is_symlink(), f"{link} should be a symlink to {folder}/"
        assert link.resolve() == (REPO / folder).resolve()
    assert cfg["tool"]["mypy"]["files"] == ["tracekit"]


def test_no_ignored_project_imports() -> None:
    pat = re.compile(r"^\s*(from|import)\s+tracekit\b.*ignore\[import", re.M)
    offenders = []
    for top in ("tracekit", "analyzers", "collectors"):
        for p in (REPO / top).glob("**/*.py"):
            if pat.search(p.read_text()):
                offenders.append(str(p.relative_to(REPO)))
    assert offenders == []
