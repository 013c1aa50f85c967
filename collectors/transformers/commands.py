"""``tracekit capture --engine transformers``: from the command line's options to a TransformersConfig.

Kept out of tracekit/cli/capture.py so the CLI stays engine-agnostic; nothing here
imports transformers (the ranks do, in engine.py).
"""

from __future__ import annotations

from tracekit.collectors.transformers.config import TransformersConfig
from tracekit.collectors.transformers.presets import default_assistant, default_model
from tracekit.errors import ConfigError

# CPU ranks when --world is not given: every rank imports transformers and holds the model,
# and 2 already shows the engine's own allreduces (the built-in workload's 8 would take minutes).
CPU_WORLD = 2


def transformers_config(kind: str, *, model: str | None, assistant: str | None, no_assistant: bool,
                        draft_tokens: int | None, new_tokens: int, prompt_len: int,
                        batch_size: int | None) -> TransformersConfig:
    """The engine configuration for device ``kind`` ("cuda" | "cpu"). Raises ConfigError on a bad combination."""
    if no_assistant and assistant is not None:
        raise ConfigError("--assistant and --no-assistant exclude each other")
    name = model or default_model(kind)
    spec = None if no_assistant else (assistant or default_assistant(name))
    return TransformersConfig(model=name, assistant=spec, draft_tokens=draft_tokens or 3, new_tokens=new_tokens,
                              prompt_len=prompt_len, batch_size=batch_size or 1)


def default_world(kind: str, world: int | None) -> int | None:
    return world if world is not None or kind == "cuda" else CPU_WORLD
