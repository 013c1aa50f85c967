"""``tracekit capture --engine transformers``: from the command line's options to a TransformersConfig.

Kept out of tracekit/cli/ so the CLI stays engine-agnostic (collectors/engines.py names
this module); nothing here imports transformers (the ranks do, in engine.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

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


OPTIONS = [
    click.Option(["--model"], default=None, metavar="DIR|PRESET",
                 help="Checkpoint directory or preset. transformers: deepseek-v3-tiny, deepseek-v3-small, llama-tiny "
                      "[default: deepseek-v3-small on GPU, deepseek-v3-tiny on CPU]; vllm: llama-tiny, "
                      "deepseek-v3-tiny [default: llama-tiny]."),
    click.Option(["--assistant"], default=None, metavar="SPEC",
                 help="DIR, PRESET, same, early-exit:L, noisy:S or prompt-lookup:N [default: early-exit:1 for presets]."),
    click.Option(["--no-assistant"], is_flag=True,
                 help="Plain decode, speculation off (the baseline for gap --b-run / spec --baseline)."),
    click.Option(["--new-tokens"], type=click.IntRange(1), default=16, show_default=True,
                 help="Tokens per generate() call (one call per cycle)."),
    click.Option(["--prompt-len"], type=click.IntRange(1), default=16, show_default=True,
                 help="Random prompt tokens per call."),
]


def configure(kind: str, opts: Mapping[str, Any]) -> TransformersConfig:
    """The engine's configuration from the capture options (collectors/engines.py)."""
    return transformers_config(kind, model=opts.get("model"), assistant=opts.get("assistant"),
                               no_assistant=bool(opts.get("no_assistant")), draft_tokens=opts.get("draft_steps"),
                               new_tokens=opts.get("new_tokens") or 16, prompt_len=opts.get("prompt_len") or 16,
                               batch_size=opts.get("batch_size"))
