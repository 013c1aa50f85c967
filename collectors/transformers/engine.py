"""One rank of the transformers engine: load the target (tensor parallel through transformers'
own ``tp_plan="auto"`` when the world has more than one rank), build the assistant,
install the hooks, and run one ``generate()`` call per capture cycle.

It has the built-in workload's interface (``run_cycle``, ``sync``, ``timer``,
``capture_graphs``, ``graphs``, ``moe_impl``, ``describe``), so the capture
machinery (spawned ranks, shards, manifest, dilation, progress, faults) runs it
unchanged.

Tensor parallel: transformers shards a model only when it loads a checkpoint
(``from_pretrained(dir, tp_plan="auto")`` under the initialised process group), so
with more than one rank, rank 0 saves the preset's random weights to a temporary
checkpoint first (removed once every rank has loaded it). The assistant of
``noisy:S`` or a separate assistant model is not sharded: every rank holds the
same full copy, so the drafts agree across ranks; ``same`` and ``early-exit:L``
draft with the sharded target itself (its allreduces run in the draft too).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from tracekit.collectors.timing import PhaseTimer
from tracekit.collectors.transformers.config import TransformersConfig
from tracekit.collectors.transformers.hooktable import (
    EXPERTS_SWITCH,
    SUPPORTED_VERSIONS,
    installed_version,
    supported,
)
from tracekit.collectors.transformers.presets import (
    PRESETS,
    Assistant,
    add_noise,
    load_model,
    parse_assistant,
    preset_family,
)
from tracekit.collectors.transformers.runtime import GenerationHooks


def _shared_tmpdir(rank: int, world: int) -> str:
    """A temporary directory made by rank 0, its path broadcast to every rank."""
    box = [tempfile.mkdtemp(prefix="tracekit-tp-ckpt-") if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])


class TransformersEngine:
    def __init__(self, cfg: TransformersConfig, rank: int, world: int, device: torch.device,
                 cycles_total: int) -> None:
        import transformers

        self.cfg, self.rank, self.world, self.device = cfg, rank, world, device
        self.cuda = device.type == "cuda"
        self.dtype = (torch.bfloat16 if self.cuda else torch.float32) if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
        self.version = transformers.__version__
        self.timer = PhaseTimer(self.cuda)
        self.graphs: dict[str, Any] = {}
        self.graph_error: str | None = None
        t0 = time.perf_counter_ns()
        self.target, self.tp = self._load_target()
        self.load_ns = time.perf_counter_ns() - t0
        self.assistant_spec: Assistant | None = parse_assistant(cfg.assistant) if cfg.assistant else None
        self.assistant = self._build_assistant()
        self.moe_impl = str(getattr(self.target.config, "_experts_implementation", None) or "n/a")
        self.hooks = GenerationHooks(self.target, self.timer)
        self.hooked = self.hooks.install(self.version)
        self.vocab = int(self.target.config.get_text_config().vocab_size)
        self.digest = hashlib.sha1()
        self.generated = 0

    # ---- models --------------------------------------------------------------------------------
    def _load_target(self) -> tuple[Any, dict[str, Any]]:
        name = self.cfg.model
        if self.world == 1:
            return load_model(name, self.cfg.seed, self.dtype).to(self.device), {"world": 1, "plan": None}
        path, tmp = name, None
        if name in PRESETS:
            tmp = _shared_tmpdir(self.rank, self.world)
            if self.rank == 0:
                load_model(name, self.cfg.seed, self.dtype).save_pretrained(tmp)
            dist.barrier()
            path = tmp
        model = load_model(path, self.cfg.seed, self.dtype, tp_plan="auto")
        dist.barrier()  # every rank has read the checkpoint
        if tmp is not None and self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        plan = dict(getattr(model, "_tp_plan", None) or {})
        return model, {"world": self.world, "plan": "tp_plan=auto", "rules": plan,
                       "checkpoint": "temporary (random weights saved by rank 0)" if tmp else path}

    def _build_assistant(self) -> Any:
        spec = self.assistant_spec
        if spec is None or spec.kind == "prompt-lookup":
            return None
        if spec.kind in ("same", "early-exit"):  # the target drafts: its own generation config sets the draft
            model = self.target
        elif spec.kind == "noisy":  # the target's weights (same seed / same checkpoint), unsharded, plus noise
            model = load_model(self.cfg.model, self.cfg.seed, self.dtype)
            add_noise(model, float(spec.value or 0.0), self.cfg.seed + 99)
        else:
            model = load_model(str(spec.value), self.cfg.seed + 1, self.dtype)
        if model is not self.target:
            model = model.to(self.device)
            avocab = int(model.config.get_text_config().vocab_size)
            tvocab = int(self.target.config.get_text_config().vocab_size)
            if avocab != tvocab:
                raise ValueError(f"assistant vocabulary {avocab} != target vocabulary {tvocab}")
        g = model.generation_config
        g.num_assistant_tokens = self.cfg.draft_tokens
        g.num_assistant_tokens_schedule = "constant"
        g.assistant_confidence_threshold = 0.0  # always draft k tokens (no confidence stop)
        return None if spec.kind == "early-exit" else model  # early exit: transformers passes the target itself

    def _generation_config(self) -> Any:
        import transformers

        spec, n = self.assistant_spec, self.cfg.new_tokens
        kw: dict[str, Any] = {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False,
                              "num_assistant_tokens": self.cfg.draft_tokens,
                              "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
        gc_target = self.target.generation_config
        kw["pad_token_id"] = gc_target.pad_token_id if gc_target.pad_token_id is not None else 0
        kw["eos_token_id"] = gc_target.eos_token_id
        if spec is not None and spec.kind == "early-exit":
            kw["assistant_early_exit"] = int(spec.value or 1)
        if spec is not None and spec.kind == "prompt-lookup":
            kw["prompt_lookup_num_tokens"] = int(spec.value or 1)
        gc_cls: Any = transformers.GenerationConfig
        return gc_cls(**kw)

    # ---- the capture machinery's interface ----------------------------------------------------------
    def capture_graphs(self) -> None:
        """Nothing to capture: transformers runs these models eagerly (dynamic cache, no torch.compile)."""

    def run_cycle(self, cycle: int) -> None:
        cfg = self.cfg
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + cycle)
        ids = torch.randint(0, self.vocab, (cfg.batch_size, cfg.prompt_len), generator=gen).to(self.device)
        mask = torch.ones_like(ids)
        with torch.inference_mode():
            out = self.target.generate(ids, attention_mask=mask, generation_config=self._generation_config(),
                                       assistant_model=self.assistant)
        new = out[:, cfg.prompt_len:].cpu()  # after the call: generate has finished on the device
        self.generated += int(new.numel())
        self.digest.update(new.numpy().tobytes())

    def close(self) -> None:
        """Remove the hooks (the capture's rank processes simply exit)."""
        self.hooks.uninstall()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def describe(self) -> dict[str, Any]:
        h = self.hooks
        model_desc: dict[str, Any] = {"name": self.cfg.model, "class": type(self.target).__name__,
                                      "params": sum(p.numel() for p in self.target.parameters()),
                                      "random_weights": self.cfg.model in PRESETS}
        if self.cfg.model in PRESETS:
            model_desc["family"] = preset_family(self.cfg.model)
            model_desc["config"] = dict(PRESETS[self.cfg.model][1])
        # the model's whole Hugging Face config, as the speed-of-light model reads it (tracekit sol RUN)
        model_desc["hf_config"] = json.loads(json.dumps(self.target.config.to_dict(), default=str))
        spec = self.assistant_spec
        return {
            "name": "transformers",
            "config": self.cfg.to_dict(),
            "transformers": self.version,
            "hook_table": {"version_checked": supported(self.version), "checked_versions": list(SUPPORTED_VERSIONS),
                           "hooked": self.hooked, "calls": dict(h.calls),
                           "installed_distribution": installed_version()},
            "dtype": str(self.dtype).removeprefix("torch."),
            "moe_impl": self.moe_impl,
            "experts_switch_in": list(EXPERTS_SWITCH.get(self.version, ())),  # loops using batched_mm on GPU
            "model": model_desc,
            "tensor_parallel": self.tp,
            "assistant": None if spec is None else {"spec": self.cfg.assistant, "kind": spec.kind,
                                                    "candidate_generator": h.generator,
                                                    "draft_tokens": self.cfg.draft_tokens},
            "graphs": [],
            "graph_error": None,
            "attention": str(getattr(self.target.config, "_attn_implementation", None)),
            "load_ns": self.load_ns,
            "generated_tokens": self.generated,
            "tokens_sha1": self.digest.hexdigest(),
            "accept": {
                "modelled": False,
                "source": "transformers' own greedy comparison: input_ids length at update_candidate_strategy "
                          "minus the length at the draft call, minus the bonus token (host tensor metadata)",
                "definition": "accepted draft tokens per verify, bonus token excluded",
                "count": len(h.accepts),
                "mean": statistics.fmean(h.accepts) if h.accepts else None,
                "histogram": {str(k): v for k, v in sorted(Counter(h.accepts).items())},
                "draft_tokens_mean": statistics.fmean(h.drafts) if h.drafts else None,
            },
        }
