"""``tracekit capture --engine vllm``: its option group and the configuration from the options.

Kept out of tracekit/cli/ (collectors/engines.py names this module); nothing here imports vllm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from tracekit.collectors.vllm.config import VllmConfig
from tracekit.collectors.vllm.presets import DEFAULT_SPEC, PRESETS, SPEC_METHODS

# CPU ranks when --world is not given: each vLLM CPU worker needs a core of its own
CPU_WORLD = 2

OPTIONS = [
    click.Option(["--spec"], default=None, metavar="METHOD",
                 help=f"Speculation: {', '.join(SPEC_METHODS)} [default: eagle3 for llama-tiny, mtp for "
                      "deepseek-v3-tiny]; none is the baseline for gap --b-run / spec --baseline."),
    click.Option(["--num-spec-tokens"], type=click.IntRange(1), default=3, show_default=True,
                 help="Draft tokens per step (vLLM's num_speculative_tokens)."),
    click.Option(["--vllm", "vllm_url"], default=None, metavar="URL",
                 help="Capture a live vLLM server (http://HOST:PORT) started with the torch profiler configured "
                      "and TRACEKIT_VLLM=1 (docs/vllm.md) instead of starting one."),
    click.Option(["--trace-dir"], type=click.Path(file_okay=False), default=None,
                 help="With --vllm: the server's profiler_config torch_profiler_dir (this host)."),
]


def configure(kind: str, opts: Mapping[str, Any]) -> VllmConfig:
    """The engine's configuration from the capture options (collectors/engines.py)."""
    model = opts.get("model") or "llama-tiny"
    spec = opts.get("spec") or DEFAULT_SPEC.get(model, "ngram" if model not in PRESETS else "none")
    return VllmConfig(model=model, spec=spec, num_spec_tokens=opts.get("num_spec_tokens") or 3,
                      requests=opts.get("requests"), input_len=opts.get("input_len") or 32,
                      output_len=opts.get("output_len") or 64, concurrency=opts.get("concurrency") or 4)


def default_world(kind: str, world: int | None) -> int | None:
    return world if world is not None or kind == "cuda" else CPU_WORLD
