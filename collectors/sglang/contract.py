"""Static check of the hook table against an SGLang source tree (no import of sglang).

``check_source(root, version)`` parses the real ``.py`` files of an unpacked
sglang wheel with ``ast`` and reports, for every hook row and field contract of
that version, whether the class, the method, the parameters the hook reads and
the attributes the fact extractors read exist. The contract tests run it on the
real wheels of every supported version.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tracekit.collectors.sglang.hooktable import HookSpec, fields_for, specs_for


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


def check_spec(root: Path, spec: HookSpec) -> list[Problem]:
    cls_path, _, method = spec.target.rpartition(".")
    cls = find_class(root, cls_path)
    if cls is None:
        return [Problem(spec.target, f"class {cls_path} not found")]
    fn = find_method(cls, method)
    if fn is None:
        return [Problem(spec.target, f"method {method} not found in {cls.name}")]
    have = parameters(fn)
    return [Problem(spec.target, f"parameter {p!r} not in {have}") for p in spec.params if p not in have]


def check_source(root: str | Path, version: str) -> list[Problem]:
    """Every mismatch between the hook table for ``version`` and the source under ``root``.

    ``root`` is the directory that contains the ``sglang`` package.
    """
    base = Path(root)
    if not (base / "sglang").is_dir():
        return [Problem(str(base), "no sglang package here")]
    problems: list[Problem] = []
    for spec in specs_for(version):
        problems.extend(check_spec(base, spec))
    for cls_path, attrs in fields_for(version):
        cls = find_class(base, cls_path)
        if cls is None:
            problems.append(Problem(cls_path, "class not found"))
            continue
        have = class_attributes(cls)
        problems.extend(Problem(cls_path, f"attribute {a!r} not found") for a in attrs if a not in have)
    return problems
