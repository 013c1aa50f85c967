"""Entry point ``sglang.srt.plugins`` -> ``tracekit.collectors.sglang.plugin:register`` (SGLang >= 0.5.12).

SGLang's ``load_plugins()`` (sglang/srt/plugins/__init__.py) runs first thing in
every scheduler process (``run_scheduler_process``), and also in the launcher,
tokenizer/detokenizer and DP-controller processes. It calls each entry point's
object with no arguments (``func()``), then ``HookRegistry.apply_hooks()``,
which resolves each registered target with ``pkgutil.resolve_name`` and wraps it;
an AROUND hook is called as ``hook(original_fn, *args, **kwargs)``.
``SGLANG_PLUGINS=tracekit`` (comma list) restricts loading to named plugins.

tracekit registers only inside scheduler processes (the others never run a
forward, and resolving the targets would import the model stack there), only
targets that exist in the running version (a missing one is logged once and
skipped), and nothing when ``TRACEKIT_SGLANG=0``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any

from tracekit.collectors.hookspec import HookSpec
from tracekit.collectors.sglang import rankinfo, runtime
from tracekit.collectors.sglang.hooktable import installed_version, specs_for

SCHEDULER_ENTRY = "run_scheduler_process"


def in_scheduler_process(max_depth: int = 64) -> bool:
    """True when called (directly or not) from SGLang's ``run_scheduler_process``."""
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < max_depth:
        if frame.f_code.co_name == SCHEDULER_ENTRY:
            return True
        frame = frame.f_back  # type: ignore[assignment]
        depth += 1
    return False


def register_with(
    registry: Any,
    around: Any,
    specs: Iterable[HookSpec],
    *,
    rec: runtime.Recorder | None = None,
    resolve: Callable[[str], Any] | None = None,
) -> list[str]:
    """Register an AROUND hook per resolvable row on ``registry`` (SGLang's HookRegistry class).

    Returns the registered targets. Rows whose target is missing are reported once and skipped.
    """
    r = rec if rec is not None else runtime.RECORDER
    if r.installed_by not in (None, "plugin"):
        return []  # the launcher or the import hook already patched this process
    r.installed_by = "plugin"
    done: list[str] = []
    for spec in specs:
        owner = runtime.resolve_owner(spec, resolve) if resolve is not None else runtime.resolve_owner(spec)
        if owner is None:
            continue
        registry.register(spec.target, runtime.make_hook(spec, rec), around)
        done.append(spec.target)
    return done


def register() -> None:
    """SGLang general-plugin entry point (called with no arguments by ``load_plugins``)."""
    if not runtime.enabled() or not in_scheduler_process():
        return
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    runtime.RECORDER.on_first_call = rankinfo.on_first_call("plugin")
    register_with(HookRegistry, HookType.AROUND, specs_for(installed_version() or "0.0.0"))
