"""Per-cycle facts from SGLang's own objects, without adding a device sync.

Every reader here touches Python ints, lists, enums and CPU tensors only; a
GPU tensor is used for its ``shape`` at most (metadata, no sync). Attribute
names are the ones the contract tests check in the real source
(hooktable.FIELDS). Anything missing gives None: a fact is left out, never
guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _is_cpu_tensor(x: Any) -> bool:
    dev = getattr(x, "device", None)
    return dev is not None and getattr(dev, "type", None) == "cpu" and hasattr(x, "shape")


def mode_name(batch: Any) -> str | None:
    """``ForwardMode`` name of a ScheduleBatch / ModelWorkerBatch / ForwardBatch (``"DECODE"``)."""
    mode = getattr(batch, "forward_mode", None)
    name = getattr(mode, "name", None)
    return name if isinstance(name, str) else None


def batch_size(batch: Any) -> int | None:
    """Requests in the batch: ``len(reqs)``, else an int ``batch_size``, else a tensor's leading dim."""
    reqs = getattr(batch, "reqs", None)
    if isinstance(reqs, Sequence) and not isinstance(reqs, (str, bytes)):
        return len(reqs)
    bs = getattr(batch, "batch_size", None)
    if isinstance(bs, int) and not isinstance(bs, bool):
        return bs
    for name in ("seq_lens_cpu", "seq_lens"):
        t = getattr(batch, name, None)
        shape = getattr(t, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
    return None


def mean_seq_len(batch: Any) -> int | None:
    """Mean context length: ``seq_lens_sum`` (a Python int SGLang maintains) over the batch size.

    Falls back to summing ``seq_lens_cpu`` when it is a CPU tensor; never reads GPU ``seq_lens``.
    """
    bs = batch_size(batch)
    if not bs:
        return None
    total = getattr(batch, "seq_lens_sum", None)
    if isinstance(total, int) and not isinstance(total, bool):
        return total // bs
    cpu: Any = getattr(batch, "seq_lens_cpu", None)
    if cpu is not None and _is_cpu_tensor(cpu):
        return int(cpu.sum()) // bs
    return None


def spec_config(worker: Any) -> dict[str, int]:
    """Draft steps / topk / draft tokens of a speculative worker (ints set at init)."""
    out: dict[str, int] = {}
    for key, attr in (
        ("steps", "speculative_num_steps"),
        ("topk", "topk"),
        ("draft_tokens", "speculative_num_draft_tokens"),
    ):
        val = getattr(worker, attr, None)
        if isinstance(val, int) and not isinstance(val, bool):
            out[key] = val
    return out


def graphed_of(result: Any) -> bool | None:
    """Whether a forward ran from a CUDA graph, from what SGLang returned.

    - v1 ``EAGLEWorker.verify``: a tuple whose last element is ``can_run_cuda_graph``
    - v2 ``verify`` / ``TpModelWorker``: ``GenerationBatchResult.can_run_cuda_graph``
    - ``ModelRunner.forward``: ``(output, can_run_cuda_graph)`` (<= 0.5.x) or
      ``ModelRunnerOutput.can_run_graph``
    """
    if isinstance(result, tuple) and result and isinstance(result[-1], bool):
        return result[-1]
    for attr in ("can_run_cuda_graph", "can_run_graph"):
        val = getattr(result, attr, None)
        if isinstance(val, bool):
            return val
    return None


_ACCEPT_ATTRS = ("accept_length_per_req_cpu", "num_correct_drafts_per_req_cpu")


def accepted_per_req(result: Any) -> list[int] | None:
    """Accepted draft tokens per request (bonus excluded) from a v1 verify return, if on CPU.

    v1 ``verify`` returns ``(logits_output, EagleVerifyOutput, ...)``; the verify
    output carries ``accept_length_per_req_cpu`` (<= 0.5.10) or
    ``num_correct_drafts_per_req_cpu`` (0.5.12): Python lists SGLang already
    copied with its own ``.tolist()``.
    """
    items = result if isinstance(result, tuple) else (result,)
    for item in items:
        for attr in _ACCEPT_ATTRS:
            val = getattr(item, attr, None)
            if isinstance(val, list):
                return [int(x) for x in val]
    return None


def mean_accept(per_req: Sequence[int] | None) -> float | None:
    if not per_req:
        return None
    return sum(per_req) / len(per_req)


def first_batch(args: Sequence[Any], kwargs: dict[str, Any], *names: str) -> Any:
    """The batch argument of a hooked call (after ``self``): by name, else first positional."""
    for n in names:
        if n in kwargs:
            return kwargs[n]
    return args[1] if len(args) > 1 else None
