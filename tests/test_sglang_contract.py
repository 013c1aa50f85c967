"""Contract tests against the real source of every supported sglang version (downloaded wheels).

On CPU, ``import sglang`` stops at its first heavy dependency (tqdm / pybase64 /
torch extensions) in all four versions, so the classes cannot be imported here:
the contract is checked statically with ``ast`` on the wheel's own files, and
the one stdlib-only module, ``sglang/srt/plugins/hook_registry.py``, is executed
for real in tests/test_sglang_hooks.py.
"""

from __future__ import annotations

import ast
import inspect
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import sglang_wheels

from tracekit.collectors.contract import find_class, find_method, parameters
from tracekit.collectors.sglang import plugin
from tracekit.collectors.sglang.contract import check_source
from tracekit.collectors.sglang.hooktable import SUPPORTED_VERSIONS, specs_for


@pytest.fixture(scope="module", params=SUPPORTED_VERSIONS)
def src(request: pytest.FixtureRequest) -> tuple[str, Path]:
    return request.param, sglang_wheels.source(request.param)


def _function(path: Path, name: str) -> ast.FunctionDef:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not in {path}")


def test_hook_table_matches_real_source(src: tuple[str, Path]) -> None:
    version, root = src
    assert check_source(root, version) == []
    roles = {s.role for s in specs_for(version)}
    assert {"cycle", "draft", "verify", "draft_extend", "forward"} <= roles


def test_contract_check_catches_a_rename(src: tuple[str, Path], tmp_path: Path) -> None:
    """The checker is not vacuous: the same tree with verify renamed fails."""
    version, root = src
    spec = next(s for s in specs_for(version) if s.role == "verify")
    rel = Path(*spec.module.split(".")).with_suffix(".py")
    copy = tmp_path / "src"
    (copy / rel).parent.mkdir(parents=True, exist_ok=True)
    (copy / rel).write_text((root / rel).read_text().replace("def verify(", "def verify_renamed("))
    problems = [str(p) for p in check_source(copy, version)]
    assert any(spec.target in p and "method verify not found" in p for p in problems)


def test_v1_and_v2_per_version(src: tuple[str, Path]) -> None:
    """Which workers exist where (the HOOKS since/until in collectors/sglang/hooktable.py), read from the source."""
    version, root = src
    v1 = find_class(root, "sglang.srt.speculative.eagle_worker.EAGLEWorker")
    v2 = find_class(root, "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2")
    if version == "0.5.2":
        assert v1 is not None and v2 is None
        assert find_method(v1, "forward_batch_speculative_generation") is not None
    elif version == "0.5.23":
        assert v1 is None and v2 is not None
    else:
        assert v1 is not None and v2 is not None


def test_scheduler_wrapper_and_launcher_contract(src: tuple[str, Path]) -> None:
    version, root = src
    http = root / "sglang/srt/entrypoints/http_server.py"
    params = parameters(_function(http, "launch_server"))
    if version == "0.5.2":
        assert "run_scheduler_process_func" not in params  # launcher path needs >= 0.5.8
    else:
        assert "run_scheduler_process_func" in params
    assert "argv" in parameters(_function(root / "sglang/srt/server_args.py", "prepare_server_args"))
    sched = _function(root / "sglang/srt/managers/scheduler.py", "run_scheduler_process")
    assert parameters(sched)[:2] == ["server_args", "port_args"]
    calls = {n.func.id for n in ast.walk(sched) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    if version in ("0.5.12", "0.5.23"):
        # plugins load first thing in every scheduler process, so plugin.in_scheduler_process() sees this frame
        assert "load_plugins" in calls
        assert sched.name == plugin.SCHEDULER_ENTRY


@pytest.mark.parametrize("version", ["0.5.12", "0.5.23"])
def test_plugin_loader_calling_convention(version: str) -> None:
    root = sglang_wheels.source(version)
    init = root / "sglang/srt/plugins/__init__.py"
    tree = ast.parse(init.read_text())
    groups = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    assert groups["GENERAL_PLUGINS_GROUP"] == "sglang.srt.plugins"
    load = _function(init, "load_plugins")
    # each general plugin's loaded object is called with no arguments, then hooks are applied
    calls = [n for n in ast.walk(load) if isinstance(n, ast.Call)]
    assert any(isinstance(c.func, ast.Name) and c.func.id == "func" and not c.args and not c.keywords for c in calls)
    assert any(isinstance(c.func, ast.Attribute) and c.func.attr == "apply_hooks" for c in calls)
    reg = find_class(root, "sglang.srt.plugins.hook_registry.HookRegistry")
    assert reg is not None
    register = find_method(reg, "register")
    assert register is not None and parameters(register)[:4] == ["cls", "target", "hook", "hook_type"]
    hook_type = find_class(root, "sglang.srt.plugins.hook_registry.HookType")
    assert hook_type is not None
    assert "AROUND" in {t.id for n in hook_type.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def test_entry_point_resolves_to_register() -> None:
    eps = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "tracekit"]
    assert len(eps) == 1 and eps[0].value == "tracekit.collectors.sglang.plugin:register"
    fn = eps[0].load()
    assert fn is plugin.register
    assert all(p.default is not inspect.Parameter.empty for p in inspect.signature(fn).parameters.values())
    # outside a scheduler process it registers nothing and imports no sglang
    before = {m for m in sys.modules if m.startswith("sglang")}
    assert fn() is None
    assert {m for m in sys.modules if m.startswith("sglang")} == before


def test_profile_request_fields(src: tuple[str, Path]) -> None:
    """live.py posts output_dir / num_steps / activities to /start_profile: fields of the real request type."""
    version, root = src
    name = "ProfileReq" if version == "0.5.23" else "ProfileReqInput"
    cls = find_class(root, f"sglang.srt.managers.io_struct.{name}")
    assert cls is not None
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert {"output_dir", "num_steps", "activities"} <= fields
    # every profile mode's body (modes.START_PROFILE: lite asks for no stacks) names real fields only
    from tracekit.collectors.sglang.modes import START_PROFILE

    for mode, body in START_PROFILE.items():
        assert set(body) <= fields, (mode, set(body) - fields)
    http = (root / "sglang/srt/entrypoints/http_server.py").read_text()
    for route in ('"/start_profile"', '"/stop_profile"', '"/generate"', '"/get_server_info"'):
        assert route in http


def test_trace_file_name_format(src: tuple[str, Path]) -> None:
    """Per-rank file names are built as ...{profile_id}-TP-{rank}...trace.json.gz in every version."""
    version, root = src
    path = root / ("sglang/srt/utils/profile_utils.py" if version == "0.5.23" else "sglang/srt/managers/scheduler_profiler_mixin.py")
    text = path.read_text()
    assert '".trace.json.gz"' in text
    # live.py asks for activities ["CPU", "GPU"] (full) or ["GPU"] (lite): each name maps to a torch profiler
    # activity, and the profiler starts with the mapped ones only (lite: CUDA alone)
    from tracekit.collectors.sglang.modes import START_PROFILE

    assert {a for body in START_PROFILE.values() for a in body["activities"]} == {"CPU", "GPU"}
    assert '"CPU": torch.profiler.ProfilerActivity.CPU' in text
    assert '"GPU": torch.profiler.ProfilerActivity.CUDA' in text
    mixin = root / ("sglang/srt/managers/scheduler_components/profiler_manager.py" if version == "0.5.23"
                    else "sglang/srt/managers/scheduler_profiler_mixin.py")
    assert "activity_map[a] for a in activities if a in activity_map" in mixin.read_text()
    assert ('f"-TP-{self.tp_rank}"' in text) or ('f"TP-{self.tp_rank}"' in text) or ('f"TP-{get_parallel().tp_rank}"' in text)
