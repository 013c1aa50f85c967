"""Load a Python file as a module by path (the benches' one way to do it): a module that is not
installed (tests/ helpers) or an older revision of one of tracekit's own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_path(name: str, path: Path) -> ModuleType:
    """``path`` executed as module ``name`` (registered in ``sys.modules`` first)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
