"""``tracekit capture --engine builtin``: the built-in workload's capture options and its configuration.

Importing this module imports click only (the capture command's option groups read it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from tracekit.collectors.workload.config import WorkloadConfig, make_config
from tracekit.errors import ConfigError

OPTIONS = [
    click.Option(["--preset"], type=click.Choice(["tiny", "kimi-k2-tiny"]), default=None,
                 help="Model shape [default: kimi-k2-tiny on GPU, tiny on CPU]."),
    click.Option(["--verify-graph"], type=click.Choice(["on", "off", "auto", "mixed"]), default="auto",
                 show_default=True, help="Verify from a CUDA graph, eagerly (SGLang's fallback), by batch size, or alternating."),
    click.Option(["--batch-size"], type=click.IntRange(1), default=None, help="Sequences per step (also --engine transformers)."),
    click.Option(["--draft-steps"], type=click.IntRange(1), default=None,
                 help="Draft tokens per cycle (also --engine transformers)."),
    click.Option(["--ctx", "ctx_start"], type=click.IntRange(1), default=None, help="Context length at the first cycle."),
    click.Option(["--layers"], type=click.IntRange(1), default=None),
    click.Option(["--hidden"], type=click.IntRange(8), default=None),
    click.Option(["--experts"], type=click.IntRange(1), default=None),
    click.Option(["--top-k"], type=click.IntRange(1), default=None),
    click.Option(["--accept-probs"], default=None,
                 help="Per-position accept probabilities, e.g. 0.8,0.6,0.45 (modelled)."),
]


def configure(kind: str, opts: Mapping[str, Any]) -> WorkloadConfig:
    """The built-in workload's configuration for device ``kind``. Raises ConfigError on a bad value."""
    text = opts.get("accept_probs")
    try:
        probs = tuple(float(p) for p in text.split(",")) if text else None
    except ValueError:
        raise ConfigError(f"--accept-probs: not a list of numbers: {text!r}") from None
    return make_config(opts.get("preset") or ("kimi-k2-tiny" if kind == "cuda" else "tiny"),
                       verify_graph=opts.get("verify_graph") or "auto", batch_size=opts.get("batch_size"),
                       draft_steps=opts.get("draft_steps"), ctx_start=opts.get("ctx_start"), layers=opts.get("layers"),
                       hidden=opts.get("hidden"), experts=opts.get("experts"), top_k=opts.get("top_k"),
                       accept_probs=probs)
