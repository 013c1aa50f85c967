"""The ``vllm.general_plugins`` entry point (pyproject: ``tracekit = tracekit.collectors.vllm.plugin:register``).

vLLM calls ``register()`` in every one of its processes (the front end, the engine core, each
worker; vllm/plugins/__init__.py: ``load_general_plugins``), possibly more than once. It does
nothing unless ``TRACEKIT_VLLM=1`` is in the environment (``tracekit capture --engine vllm``
sets it for the processes it starts; set it yourself for ``vllm serve``): then it installs
the hooks of collectors/vllm/runtime.py. Importing this module imports nothing from vLLM; an
error never reaches vLLM (it is printed once to stderr).
"""

from __future__ import annotations

import os
import sys

ENV = "TRACEKIT_VLLM"


def register() -> None:
    if os.environ.get(ENV) != "1":
        return
    try:
        from tracekit.collectors.vllm import runtime

        runtime.install(by="plugin")
    except Exception as exc:  # never break vLLM's start
        print(f"tracekit: vLLM hooks not installed: {exc.__class__.__name__}: {exc}", file=sys.stderr)
