"""Contract tests: the transformers hook table against the real source of every supported version.

The wheels of SUPPORTED_VERSIONS (5.17.0: the GPU machine's; 5.24.0: PyPI's on
the CPU box) are downloaded once and cached (tests/transformers_wheels.py); the
installed distribution's own files are checked too when its version is one of
them. The checker parses the files with ``ast`` (no import of transformers).
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import transformers_wheels

from tracekit.collectors.contract import call_sites
from tracekit.collectors.transformers import runtime
from tracekit.collectors.transformers.contract import check_source
from tracekit.collectors.transformers.hooktable import (
    EXPERTS_SWITCH,
    SUPPORTED_VERSIONS,
    cache_kwarg,
    installed_version,
    specs_for,
)

GEN_UTILS = Path("transformers/generation/utils.py")


@pytest.fixture(scope="module", params=SUPPORTED_VERSIONS)
def src(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, transformers_wheels.source(request.param)


def _copy(root: Path, tmp: Path, rel: Path, edit: tuple[str, str] | Callable[[str], str]) -> Path:
    """A source tree with ``rel`` edited (a replacement, or a function of the text; the rest copied as is)."""
    out = tmp / "src"
    for path in root.rglob("*.py"):
        dest = out / path.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text()
        if path.relative_to(root) == rel:
            new = edit(text) if callable(edit) else text.replace(*edit)
            assert new != text, f"{edit!r} does not change {rel}: the mutation would be vacuous"
            text = new
        dest.write_text(text)
    return out


def test_hook_table_matches_real_source(src: tuple[str, Path]) -> None:
    version, root = src
    assert [str(p) for p in check_source(root, version)] == []
    roles = {s.role for s in specs_for(version)}
    assert {"assisted_loop", "plain_loop", "candidate_factory", "draft", "accept", "prefill_call"} <= roles


def test_installed_transformers_matches_too() -> None:
    version = installed_version()
    if version is None:
        pytest.skip("transformers is not installed (the `transformers` extra)")
    if version not in SUPPORTED_VERSIONS:
        pytest.skip(f"installed transformers {version} is not one of {SUPPORTED_VERSIONS}")
    spec = importlib.util.find_spec("transformers")  # locates the package without running it
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent
    assert [str(p) for p in check_source(root, version)] == []


def test_a_renamed_loop_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    version, root = src
    copy = _copy(root, tmp_path, GEN_UTILS, ("def _assisted_decoding(", "def _assisted_decoding_v2("))
    problems = [str(p) for p in check_source(copy, version)]
    assert any("_assisted_decoding" in p and "method _assisted_decoding not found" in p for p in problems)


def test_a_moved_accept_call_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    """update_candidate_strategy no longer called with input_ids first: the accept read would be wrong."""
    version, root = src
    copy = _copy(root, tmp_path, GEN_UTILS, ("candidate_generator.update_candidate_strategy(input_ids,",
                                             "candidate_generator.update_candidate_strategy(new_logits,"))
    problems = [str(p) for p in check_source(copy, version)]
    assert any("update_candidate_strategy(input_ids)" in p for p in problems), problems


def test_a_verify_forward_outside_the_loop_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    """The target forward of the assisted loop replaced (e.g. by a new helper): the verify hook point moved."""
    version, root = src

    def move(text: str) -> str:
        start = text.index("def _assisted_decoding(")
        fn = text[start:text.index("\n    def ", start + 10)]
        return text.replace(fn, re.sub(r"outputs = (self|model_forward)\(\*\*model_inputs\)",
                                       "outputs = self._verify(model_inputs)", fn))

    copy = _copy(root, tmp_path, GEN_UTILS, move)
    problems = [str(p) for p in check_source(copy, version)]
    assert any("_assisted_decoding" in p and "self|model_forward" in p for p in problems), problems


def test_a_renamed_cache_keyword_fails(src: tuple[str, Path], tmp_path: Path) -> None:
    """generate() handing the KV cache over under another keyword: the seq fact would be lost."""
    version, root = src
    kw = cache_kwarg(version)
    copy = _copy(root, tmp_path, GEN_UTILS, (f'model_inputs["{kw}"] =', 'model_inputs["kv"] ='))
    problems = [str(p) for p in check_source(copy, version)]
    assert any(f"model_inputs[{kw!r}]" in p for p in problems), problems


def test_deepseek_v3_has_a_tensor_parallel_plan(src: tuple[str, Path]) -> None:
    """DeepSeek-V3 ships transformers' own TP plan in both versions (MLP and experts sharded; MLA replicated)."""
    _, root = src
    tree = ast.parse((root / "transformers/models/deepseek_v3/configuration_deepseek_v3.py").read_text())
    plan = next(n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign))
                and any(isinstance(t, ast.Name) and t.id == "base_model_tp_plan"
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])))
    keys = {k.value for k in plan.value.keys if isinstance(k, ast.Constant)}  # type: ignore[union-attr]
    assert "layers.*.mlp.experts.down_proj" in keys and not any("self_attn" in k for k in keys)


def test_which_loops_switch_the_experts_implementation(src: tuple[str, Path]) -> None:
    """5.17: only the plain loop runs its forwards under _optimize_model_for_decode (verify keeps grouped_mm)."""
    version, root = src
    tree = ast.parse((root / GEN_UTILS).read_text())
    mixin = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GenerationMixin")
    loops = {f.name: f for f in mixin.body if isinstance(f, ast.FunctionDef) and f.name in ("_sample", "_assisted_decoding")}
    switching = {name for name, f in loops.items()
                 if any(name_ == "self._optimize_model_for_decode" for name_, _, _ in call_sites(f))}
    assert switching == set(EXPERTS_SWITCH[version])


def test_call_sites_are_read_in_source_order() -> None:
    fn = ast.parse("def f(self):\n    a()\n    while x:\n        b.c(y, 1)\n        self(z)\n    d()\n").body[0]
    assert isinstance(fn, ast.FunctionDef)
    assert call_sites(fn) == [("a", False, None), ("b.c", True, "y"), ("self", True, "z"), ("d", False, None)]


def test_hooks_read_no_device_value() -> None:
    """The runtime hooks never call .item() / .tolist() / .cpu() / int(tensor) on a tensor: no device sync."""
    tree = ast.parse(Path(runtime.__file__).read_text())
    bad = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
           and n.func.attr in ("item", "tolist", "cpu", "numpy", "to", "synchronize")]
    assert bad == []
    ints = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            and n.func.id in ("int", "float", "bool")]
    allowed = (".shape", "get_seq_length()", "float(accepted")
    assert ints and all(any(a in s for a in allowed) for s in ints), ints
