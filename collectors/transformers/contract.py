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

from tracekit.collectors.sglang.contract import (
    Problem,
    class_attributes,
    find_class,
    find_method,
    parameters,
)
from tracekit.collectors.transformers.hooktable import (
    FORWARD_CLASSES,
    FORWARD_KWARGS,
    GENERATORS,
    PREPARE_INPUTS,
    TP_PLANS,
    HookSpec,
    cache_kwarg,
    specs_for,
)

Function = ast.FunctionDef | ast.AsyncFunctionDef


def dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def call_sites(fn: Function) -> list[tuple[str, bool, str | None]]:
    """(callee, inside a while loop, first positional argument name) of every call in ``fn``, in source order."""
    found: list[tuple[int, int, str, bool, str | None]] = []

    def visit(node: ast.AST, in_loop: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue  # nested scopes are not the loop's own calls
            loop = in_loop or isinstance(child, ast.While)
            if isinstance(child, ast.Call):
                name = dotted(child.func)
                if name is not None:
                    arg0 = child.args[0] if child.args else None
                    first = arg0.id if isinstance(arg0, ast.Name) else None
                    found.append((child.lineno, child.col_offset, name, in_loop, first))
            visit(child, loop)

    visit(fn, False)
    return [(n, lp, a) for _, _, n, lp, a in sorted(found)]


def _parse_call(entry: str) -> tuple[tuple[str, ...], bool, str | None]:
    loop = entry.startswith("loop:")
    body = entry.removeprefix("loop:")
    arg: str | None = None
    if body.endswith(")") and "(" in body:
        body, _, rest = body.partition("(")
        arg = rest[:-1]
    return tuple(body.split("|")), loop, arg


def check_calls(fn: Function, calls: tuple[str, ...], target: str) -> list[Problem]:
    """The expected call sites appear in ``fn`` in order (a subsequence of its calls)."""
    sites = call_sites(fn)
    pos = 0
    for entry in calls:
        names, loop, arg = _parse_call(entry)
        for i in range(pos, len(sites)):
            name, in_loop, first = sites[i]
            if name in names and (in_loop or not loop) and (arg is None or first == arg):
                pos = i + 1
                break
        else:
            where = " inside its while loop" if loop else ""
            after = f" after {calls[calls.index(entry) - 1]!r}" if calls.index(entry) else ""
            return [Problem(target, f"no call {entry.removeprefix('loop:')!r}{where}{after}")]
    return []


def _method_in_mro(root: Path, dotted_class: str, name: str) -> Function | None:
    """``name`` on the class or a base class defined in the same module (single-module MRO walk)."""
    module = dotted_class.rpartition(".")[0]
    seen: set[str] = set()
    todo = [dotted_class]
    while todo:
        cur = todo.pop(0)
        if cur in seen:
            continue
        seen.add(cur)
        cls = find_class(root, cur)
        if cls is None:
            continue
        fn = find_method(cls, name)
        if fn is not None:
            return fn
        todo.extend(f"{module}.{b.id}" for b in cls.bases if isinstance(b, ast.Name))
    return None


def check_spec(root: Path, spec: HookSpec) -> list[Problem]:
    cls = find_class(root, spec.cls)
    if cls is None:
        return [Problem(spec.target, f"class {spec.cls} not found")]
    fn = find_method(cls, spec.method)
    if fn is None:
        return [Problem(spec.target, f"method {spec.method} not found in {cls.name}")]
    have = parameters(fn)
    problems = [Problem(spec.target, f"parameter {p!r} not in {have}") for p in spec.params if p not in have]
    return problems + check_calls(fn, spec.calls, spec.target)


def check_generators(root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for kind, path in GENERATORS.items():
        for method, first in (("get_candidates", "input_ids"), ("update_candidate_strategy", "input_ids")):
            fn = _method_in_mro(root, path, method)
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
    if not (base / "transformers").is_dir():
        return [Problem(str(base), "no transformers package here")]
    problems: list[Problem] = []
    for spec in specs_for(version):
        problems.extend(check_spec(base, spec))
    problems.extend(check_generators(base))
    problems.extend(check_models(base, version))
    return problems


__all__ = ["Problem", "call_sites", "check_calls", "check_source", "check_spec"]
