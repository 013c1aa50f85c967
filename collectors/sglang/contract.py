"""Static check of the SGLang hook table against an SGLang source tree (no import of sglang).

``check_source(root, version)`` runs the one contract check (collectors/contract.py) on the
hook rows and field contracts of ``version`` against the real ``.py`` files of an unpacked
sglang wheel. The contract tests run it on the real wheels of every supported version.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.collectors.contract import Problem, check_rows
from tracekit.collectors.sglang.hooktable import fields_for, specs_for


def check_source(root: str | Path, version: str) -> list[Problem]:
    """Every mismatch between the hook table for ``version`` and the source under ``root``.

    ``root`` is the directory that contains the ``sglang`` package.
    """
    return check_rows(root, "sglang", specs_for(version), fields_for(version))


__all__ = ["Problem", "check_source"]
