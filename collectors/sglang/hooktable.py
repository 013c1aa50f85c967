"""Which SGLang functions tracekit wraps, per version range: data, not code.

Every row names a target by its qualified name (resolved at install time, never
imported here), the tracekit phase it marks, the parameters the hook reads and
the half-open version range ``[since, until)`` in which it exists. The contract
tests check every row against the real source of each supported wheel
(tests/test_sglang_contract.py), so a rename in SGLang fails CI rather than a
user's capture.

Roles:
- ``cycle``: the whole speculative cycle (advances the cycle counter; no range)
- ``draft`` / ``verify`` / ``draft_extend``: phase ranges
- ``forward``: ``ModelRunner.forward``; a ``decode`` (or ``prefill``) range only on
  the target runner (``is_draft_worker`` false) and only outside a speculative phase
- ``accept``: v2 ``on_verify_complete_cpu``: per-request accepted drafts, handed over
  by SGLang after its own asynchronous device-to-host copy
"""

from __future__ import annotations

from typing import Final

from tracekit.collectors.hookspec import HookSpec, Version, select, select_fields
from tracekit.collectors.hookspec import installed_version as _installed

_V1: Final = "sglang.srt.speculative.eagle_worker.EAGLEWorker"
_V2: Final = "sglang.srt.speculative.eagle_worker_v2.EAGLEWorkerV2"
_V2D: Final = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker"
_MR: Final = "sglang.srt.model_executor.model_runner.ModelRunner"

# Ranges are checked against the real source at these versions only; the
# boundaries between them are the since/until of each HOOKS entry below (docs/sglang.md).
# Versions whose real source the contract tests read.
SUPPORTED_VERSIONS: Final = ("0.5.2", "0.5.9", "0.5.12", "0.5.23")


HOOKS: Final[tuple[HookSpec, ...]] = (
    # v1 EAGLEWorker (0.4.9 - 0.5.12; removed in 0.5.15)
    HookSpec(f"{_V1}.forward_batch_speculative_generation", "cycle", ("batch",), until=(0, 5, 4), worker="v1"),
    HookSpec(f"{_V1}.forward_batch_generation", "cycle", ("batch",), since=(0, 5, 4), until=(0, 5, 15), worker="v1"),
    HookSpec(f"{_V1}.draft", "draft", ("batch",), until=(0, 5, 15), worker="v1"),
    HookSpec(f"{_V1}.verify", "verify", ("batch",), until=(0, 5, 15), worker="v1"),
    HookSpec(f"{_V1}.forward_draft_extend_after_decode", "draft_extend", ("batch",), until=(0, 5, 15), worker="v1"),
    HookSpec(f"{_V1}.forward_draft_extend", "draft_extend", ("batch",), until=(0, 5, 15), worker="v1"),
    # v2 EAGLEWorkerV2 + EagleDraftWorker (opt-in 0.5.4 - 0.5.10, default from 0.5.12)
    HookSpec(f"{_V2}.forward_batch_generation", "cycle", (), since=(0, 5, 4), worker="v2"),
    HookSpec(f"{_V2}.verify", "verify", ("batch",), since=(0, 5, 4), worker="v2"),
    HookSpec(f"{_V2D}.draft", "draft", (), since=(0, 5, 4), worker="v2"),
    HookSpec(f"{_V2D}._draft_extend_for_decode", "draft_extend", ("batch",), since=(0, 5, 4), worker="v2"),
    HookSpec(f"{_V2D}._draft_extend_for_prefill", "draft_extend", ("batch",), since=(0, 5, 4), worker="v2"),
    HookSpec(f"{_V2}.on_verify_complete_cpu", "accept", ("num_correct_drafts_per_req",), since=(0, 5, 12), worker="v2"),
    # plain decode / prefill on the target runner, every version
    HookSpec(f"{_MR}.forward", "forward", ("forward_batch",)),
)

# Attributes the fact extractors read, per class (checked by the contract tests
# in the class body or as ``self.<attr> =`` assignments). None of them is a GPU
# tensor read: sizes come from Python ints, lists and CPU tensors only.
FIELDS: Final[tuple[tuple[str, tuple[str, ...], Version, Version | None], ...]] = (
    ("sglang.srt.managers.schedule_batch.ScheduleBatch", ("reqs", "forward_mode", "seq_lens_sum"), (0, 0, 0), None),
    # ModelWorkerBatch is gone by 0.5.23 (v2 passes ScheduleBatch there)
    ("sglang.srt.managers.schedule_batch.ModelWorkerBatch", ("forward_mode", "seq_lens_cpu", "seq_lens_sum"), (0, 0, 0), (0, 5, 23)),
    ("sglang.srt.model_executor.forward_batch_info.ForwardBatch", ("forward_mode", "batch_size", "seq_lens_sum"), (0, 0, 0), None),
    # rank: ModelRunner.tp_rank up to 0.5.12, get_parallel().tp_rank later (torch.distributed fallback)
    (_MR, ("is_draft_worker",), (0, 0, 0), None),
    (_MR, ("tp_rank",), (0, 0, 0), (0, 5, 23)),
    (_V1, ("topk", "speculative_num_steps", "speculative_num_draft_tokens"), (0, 0, 0), (0, 5, 15)),
    (_V2, ("topk", "speculative_num_steps", "speculative_num_draft_tokens"), (0, 5, 4), None),
    ("sglang.srt.managers.utils.GenerationBatchResult", ("can_run_cuda_graph",), (0, 5, 4), None),
    ("sglang.srt.speculative.eagle_utils.EagleVerifyOutput", ("accept_length_per_req_cpu",), (0, 0, 0), (0, 5, 4)),
    ("sglang.srt.speculative.eagle_info.EagleVerifyOutput", ("accept_length_per_req_cpu",), (0, 5, 4), (0, 5, 12)),
    # renamed in 0.5.12 (still accepted drafts per request, bonus excluded)
    ("sglang.srt.speculative.eagle_info.EagleVerifyOutput", ("num_correct_drafts_per_req_cpu",), (0, 5, 12), (0, 5, 15)),
)


def specs_for(version: Version | str) -> list[HookSpec]:
    """The hook rows that exist in ``version``."""
    return select(HOOKS, version)


def fields_for(version: Version | str) -> list[tuple[str, tuple[str, ...]]]:
    """The field rows that hold in ``version``."""
    return select_fields(FIELDS, version)


def installed_version() -> str | None:
    """The installed sglang distribution's version, or None (no import of sglang)."""
    return _installed("sglang")
