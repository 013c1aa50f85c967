"""Configuration of the vLLM engine (``tracekit capture --engine vllm``).

A plain dataclass: it travels to the driver process (pickled) in ``CaptureConfig.workload``. The
driver (collectors/vllm/driver.py) runs vLLM's offline engine with ``tensor_parallel_size`` =
the capture's world through vLLM's own executor and worker processes; one capture cycle is one
engine step (one scheduler iteration: a verify with its draft, a decode or a prefill).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tracekit.collectors.vllm.presets import check_model, check_spec, parse_spec
from tracekit.errors import ConfigError


@dataclass
class VllmConfig:
    model: str = "llama-tiny"  # preset name or checkpoint directory
    spec: str = "eagle3"  # eagle3 | mtp | ngram | draft:DIR | none
    num_spec_tokens: int = 3
    requests: int | None = None  # requests to send in all (None: as many as the steps need)
    input_len: int = 32  # prompt tokens per request (random ids, seeded)
    output_len: int = 64  # new tokens per request
    concurrency: int = 4  # requests in flight (vLLM's max_num_seqs)
    seed: int = 1234
    dtype: str = "bfloat16"
    max_model_len: int = 512
    kv_fraction: float = 0.05  # gpu_memory_utilization: on CPU the fraction of host memory for the KV cache
    engine: str = "vllm"
    driver: str = "tracekit.collectors.vllm.driver:driver_main"  # one process drives every rank (launcher)

    def validate(self, world: int) -> None:
        """ConfigError with a clear message for a configuration that cannot run on ``world`` ranks."""
        check_model(self.model)
        check_spec(self.model, parse_spec(self.spec))
        for name in ("num_spec_tokens", "input_len", "output_len", "concurrency"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1")
        if self.input_len + self.output_len + self.num_spec_tokens + 1 > self.max_model_len:
            raise ConfigError(f"--input-len + --output-len ({self.input_len + self.output_len}) does not fit "
                             f"max_model_len {self.max_model_len}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def build(self, rank: int, world: int, device: Any, cycles_total: int) -> Any:
        raise RuntimeError("the vLLM engine runs its ranks in vLLM's own worker processes: the launcher starts "
                           f"its driver ({self.driver}) instead of tracekit rank processes")
