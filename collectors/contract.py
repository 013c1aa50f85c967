"""The one static check of an engine's hook table against its real source (no import of the engine).

An engine's contract (collectors/<engine>/contract.py) parses the ``.py`` files of an
unpacked wheel with ``ast`` and reports every :class:`Problem`: for each
:class:`~tracekit.collectors.hookspec.HookSpec` row of a version, the class and method exist,
the parameters the hook reads are there, and the call sites the row lists appear in the
method's body in order (``loop:`` inside its ``while`` loop, ``a|b`` either callee,
``callee(arg)`` with the named first argument); for field contracts, the attributes a fact
extractor reads are declared on the class. Engine-specific checks (a cache keyword, a
tensor-parallel plan) are built from the same helpers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tracekit.collectors.hookspec import HookSpec


@dataclass(frozen=True)
class Problem:
    target: str
    message: str

    def __str__(self) -> str:
        return f"{self.target}: {self.message}"


@lru_cache(maxsize=256)
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def find_class(root: Path, dotted_class: str) -> ast.ClassDef | None:
    module, _, cls = dotted_class.rpartition(".")
    path = _module_file(root, module)
    if path is None:
        return None
    for node in _parse(path).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return node
    return None


def find_method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def class_attributes(cls: ast.ClassDef) -> set[str]:
    """Names declared in the class body or assigned as ``self.<name>`` in its methods."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                names.add(node.name)
            for sub in ast.walk(node):
                targets: list[ast.expr] = []
                if isinstance(sub, ast.Assign):
                    targets = list(sub.targets)
                elif isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                    targets = [sub.target]
                for t in targets:
                    elts = t.elts if isinstance(t, ast.Tuple) else [t]
                    for e in elts:
                        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                            names.add(e.attr)
    return names


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


def method_in_mro(root: Path, dotted_class: str, name: str) -> Function | None:
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
    """The row's class, method, parameters and call sites in the source under ``root``."""
    cls = find_class(root, spec.cls)
    if cls is None:
        return [Problem(spec.target, f"class {spec.cls} not found")]
    fn = find_method(cls, spec.method)
    if fn is None:
        return [Problem(spec.target, f"method {spec.method} not found in {cls.name}")]
    have = parameters(fn)
    problems = [Problem(spec.target, f"parameter {p!r} not in {have}") for p in spec.params if p not in have]
    return problems + check_calls(fn, spec.calls, spec.target)


def check_fields(root: Path, fields: Iterable[tuple[str, tuple[str, ...]]]) -> list[Problem]:
    """Every (class, attributes) pair: the class exists and declares each attribute (class_attributes)."""
    problems: list[Problem] = []
    for cls_path, attrs in fields:
        cls = find_class(root, cls_path)
        if cls is None:
            problems.append(Problem(cls_path, "class not found"))
            continue
        have = class_attributes(cls)
        problems.extend(Problem(cls_path, f"attribute {a!r} not found") for a in attrs if a not in have)
    return problems


def check_rows(root: str | Path, package: str, rows: Iterable[HookSpec],
               fields: Iterable[tuple[str, tuple[str, ...]]] = ()) -> list[Problem]:
    """Every mismatch between hook rows (and field contracts) and the source under ``root``, the
    directory that contains ``package``."""
    base = Path(root)
    if not (base / package).is_dir():
        return [Problem(str(base), f"no {package} package here")]
    problems: list[Problem] = []
    for spec in rows:
        problems.extend(check_spec(base, spec))
    return problems + check_fields(base, fields)


__all__ = ["Function", "Problem", "call_sites", "check_calls", "check_fields", "check_rows", "check_spec",
           "class_attributes", "dotted", "find_class", "find_method", "method_in_mro", "parameters"]
