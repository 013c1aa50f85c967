"""Static check of the transformers hook table against a source tree (no import of transformers).

``check_source(root, version)`` parses the real ``.py`` files of an unpacked
transformers wheel with ``ast`` and reports, for every hook row of that version:
the class and method exist, the parameters the hook reads are there, and the
call sites through which the generation loop reaches the hooked callables appear
in the method in the table's order (inside its ``while`` loop where the row says
``loop:``, with the named first argument where it says ``callee(arg)``). It also
checks the candidate generators' ``get_candidates``, the keyword generate()
passes the KV cache under, the preset model classes' ``forward`` keywords and
their tensor-parallel plans. The contract tests run it on
the real wheels of every supported version.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tracekit.collectors.contract import (
    Function,
    Problem,
    check_rows,
    class_attributes,
    find_class,
    find_method,
    method_in_mro,
    parameters,
)
from tracekit.collectors.transformers.hooktable import (
    FORWARD_CLASSES,
    FORWARD_KWARGS,
    GENERATORS,
    PREPARE_INPUTS,
    TP_PLANS,
    cache_kwarg,
    specs_for,
)


def check_generators(root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for kind, path in GENERATORS.items():
        for method, first in (("get_candidates", "input_ids"), ("update_candidate_strategy", "input_ids")):
            fn = method_in_mro(root, path, method)
            if fn is None:
                problems.append(Problem(path, f"{method} not found ({kind} generator)"))
                continue
            params = parameters(fn)
            if len(params) < 2 or params[1] != first:
                problems.append(Problem(path, f"{method} takes {params[1:]} (expected {first!r} first)"))
    return problems


def subscript_keys(fn: Function, name: str) -> set[str]:
    """Constant keys ``k`` of every ``name["k"] = ...`` assignment in ``fn``."""
    keys: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name
                        and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str)):
                    keys.add(t.slice.value)
    return keys


def check_models(root: Path, version: str) -> list[Problem]:
    problems: list[Problem] = []
    cache = cache_kwarg(version)
    prep_cls = find_class(root, PREPARE_INPUTS.rsplit(".", 1)[0])
    prep = find_method(prep_cls, PREPARE_INPUTS.rsplit(".", 1)[1]) if prep_cls is not None else None
    if prep is None:
        problems.append(Problem(PREPARE_INPUTS, "not found"))
    elif cache not in subscript_keys(prep, "model_inputs"):
        problems.append(Problem(PREPARE_INPUTS, f"does not set model_inputs[{cache!r}] (the KV cache keyword)"))
    for family, path in FORWARD_CLASSES.items():
        cls = find_class(root, path)
        fn = find_method(cls, "forward") if cls is not None else None
        if fn is None:
            problems.append(Problem(path, f"{family}: class or forward not found"))
            continue
        have = parameters(fn)
        problems.extend(Problem(f"{path}.forward", f"keyword {k!r} not in {have}") for k in (*FORWARD_KWARGS, cache)
                        if k not in have)
    for family, (path, attr) in TP_PLANS.items():
        cls = find_class(root, path)
        if cls is None or attr not in class_attributes(cls):
            problems.append(Problem(path, f"{family}: no {attr} (tensor parallel needs transformers' own plan)"))
    return problems


def check_source(root: str | Path, version: str) -> list[Problem]:
    """Every mismatch between the hook table for ``version`` and the source under ``root``
    (the directory that contains the ``transformers`` package)."""
    base = Path(root)
    problems = check_rows(base, "transformers", specs_for(version))
    if (base / "transformers").is_dir():
        problems += check_generators(base) + check_models(base, version)
    return problems


__all__ = ["Problem", "check_source"]
