"""Configuration of the transformers engine (``tracekit capture --engine transformers``).

A plain dataclass: it travels to every spawned rank (pickled) in
``CaptureConfig.workload``, and ``build`` makes the rank's engine there (the
only place transformers is imported). One capture cycle is one
``model.generate()`` call of ``new_tokens`` tokens on a fresh random prompt.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracekit.collectors.transformers.presets import check_model, check_tp, parse_assistant
from tracekit.errors import ConfigError


@dataclass
class TransformersConfig:
    model: str = "deepseek-v3-tiny"  # preset name or checkpoint directory
    assistant: str | None = "early-exit:1"  # None: no assistant (plain decode, speculation off)
    draft_tokens: int = 3  # num_assistant_tokens (prompt lookup: the N of prompt-lookup:N)
    new_tokens: int = 16  # tokens generated per generate() call (min = max: EOS cannot end it early)
    prompt_len: int = 16
    batch_size: int = 1  # assisted generation in transformers takes batch size 1 only
    seed: int = 1234
    dtype: str = "auto"  # auto: bfloat16 on GPU, float32 on CPU
    engine: str = "transformers"

    def validate(self, world: int) -> None:
        """ConfigError with a clear message for a configuration that cannot run on ``world`` ranks."""
        check_model(self.model)
        check_tp(self.model, world)
        if self.assistant is not None:
            parse_assistant(self.assistant)
            if self.batch_size != 1:
                raise ConfigError("transformers' assisted generation takes batch size 1 only "
                                 "(use --no-assistant for larger batches)")
        for name in ("draft_tokens", "new_tokens", "prompt_len", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def build(self, rank: int, world: int, device: Any, cycles_total: int) -> Any:
        """This rank's engine (loads the models, installs the hooks)."""
        from tracekit.collectors.transformers.engine import TransformersEngine

        return TransformersEngine(self, rank, world, device, cycles_total)
