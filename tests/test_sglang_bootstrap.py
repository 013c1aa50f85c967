"""Getting into every rank: import hook (sitecustomize / .pth), launcher wrapper, plugin gate."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.sglang import autoload, launch, plugin, runtime

HERE = Path(__file__).parent


def test_import_hook_patches_module_when_it_is_imported(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    name = f"shapes_autoload_{uuid.uuid4().hex[:8]}"
    shutil.copy(HERE / "sglang_shapes.py", tmp_path / f"{name}.py")
    rows = [HookSpec(f"{name}.EAGLEWorker.verify", "verify", ("batch",)),
            HookSpec(f"{name}.EAGLEWorker.not_there", "draft", ("batch",))]
    sys.path.insert(0, str(tmp_path))
    autoload.disable()
    try:
        finder = autoload.enable("test", rows=rows)
        assert name not in sys.modules
        mod = __import__(name)  # the import itself applies the patch
        assert getattr(mod.EAGLEWorker.verify, runtime.WRAPPED_ATTR, False)
        assert finder.patched == {name}
        # a second enable is a no-op on the same finder
        assert autoload.enable("test", rows=rows) is finder
    finally:
        autoload.disable()
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def _python(env_extra: dict[str, str], code: str, pythonpath: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_SGLANG"}
    env.update(env_extra)
    env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True).stdout.strip()


CHECK = "import sys; print(any(type(f).__name__ == 'HookFinder' for f in sys.meta_path))"


def test_sitecustomize_bootstrap_is_opt_in(tmp_path: Path) -> None:
    autoload.write_sitecustomize(tmp_path)
    assert _python({"TRACEKIT_SGLANG": "1"}, CHECK, str(tmp_path)) == "True"
    assert _python({}, CHECK, str(tmp_path)) == "False"


def test_pth_line_is_opt_in(tmp_path: Path) -> None:
    """The .pth line itself, executed the way site.py executes an `import` line."""
    line = autoload.write_pth(tmp_path).read_text()
    assert line.startswith("import ") and line.count("\n") == 1
    code = f"exec({line.strip()!r}); " + CHECK
    assert _python({"TRACEKIT_SGLANG": "1"}, code, os.environ.get("PYTHONPATH", "")) == "True"
    assert _python({}, code, os.environ.get("PYTHONPATH", "")) == "False"


def test_launcher_wrapper_is_picklable_module_function() -> None:
    """SGLang spawns ranks with multiprocessing 'spawn': the target must pickle by reference."""
    fn = pickle.loads(pickle.dumps(launch.run_scheduler_process))
    assert fn is launch.run_scheduler_process


def test_plugin_registers_only_in_scheduler_processes() -> None:
    calls: list[str] = []

    class Registry:  # records what register_with hands to HookRegistry.register
        @staticmethod
        def register(target: str, hook: object, hook_type: object) -> None:
            calls.append(target)

    rec = runtime.Recorder()
    rows = [HookSpec("tracekit.collectors.sglang.runtime.Recorder.run_phase", "verify", ())]

    def run_scheduler_process() -> bool:  # same frame name as SGLang's
        return plugin.in_scheduler_process()

    assert run_scheduler_process() is True
    assert plugin.in_scheduler_process() is False
    assert plugin.register_with(Registry, "AROUND", rows, rec=rec) == [rows[0].target]
    assert calls == [rows[0].target]
    rec2 = runtime.Recorder(installed_by="launcher")  # already patched by another path: nothing twice
    assert plugin.register_with(Registry, "AROUND", rows, rec=rec2) == []
