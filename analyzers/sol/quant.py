"""Bytes per parameter per module from a config's ``quantization_config``.

- none: the model's dtype (``torch_dtype``) for every weight, GEMMs in that precision;
- ``compressed-tensors`` (e.g. Kimi-K2 / K2.5 int4): each config group's ``weights`` block gives
  ``num_bits`` and, for the ``group`` strategy, ``group_size``: bytes per parameter =
  num_bits / 8 + (scale bytes + zero-point bytes when asymmetric) / group_size, scales in the
  model's dtype; the ``channel`` and ``tensor`` strategies add nothing measurable. Modules named in
  ``ignore`` (exact names, or ``re:`` regular expressions matched from the start) and modules
  that are not ``Linear`` layers (the MoE router ``gate``) keep the model's dtype. The GEMM runs
  in fp8 / int8 when the group quantizes ``input_activations`` to 8 bits, else in the model's
  dtype (weight-only quantization);
- ``fp8`` (DeepSeek-V3's own checkpoint: e4m3 with ``weight_block_size`` [128, 128]): one byte
  per parameter plus one fp32 scale per block, GEMMs in fp8, except ``modules_to_not_convert``,
  the router and ``lm_head``.
Anything else is one error line naming the method.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tracekit.errors import AnalysisError


@dataclass(frozen=True)
class QuantScheme:
    method: str  # none | compressed-tensors | fp8
    base_bytes: int  # the model's dtype
    quant_bytes: float  # bytes per parameter of a quantized weight, scales included
    compute: str  # precision of a quantized weight's GEMM
    ignore: tuple[str, ...]  # module names / "re:" patterns kept in the model's dtype
    description: str

    def for_module(self, name: str) -> tuple[float, str]:
        """(bytes per parameter, GEMM precision) of the weight of module ``name``."""
        base = "bf16" if self.base_bytes == 2 else "fp32"
        if self.method == "none" or name.endswith(".gate") or (name == "lm_head" and self.method == "fp8"):
            return float(self.base_bytes), base
        for pat in self.ignore:
            if pat.startswith("re:"):
                if re.match(pat[3:], name):
                    return float(self.base_bytes), base
            elif name == pat or name.startswith(pat + "."):
                return float(self.base_bytes), base
        return self.quant_bytes, self.compute


def _num(block: dict[str, Any], key: str, default: int) -> int:
    v = block.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise AnalysisError(f"model config: quantization_config {key} = {v!r} is not a positive integer")
    return v


def parse_quant(q: Any, base_bytes: int) -> QuantScheme:
    """The ``QuantScheme`` of a ``quantization_config`` block (None: unquantized)."""
    if not q:
        return QuantScheme("none", base_bytes, float(base_bytes), "bf16", (), "unquantized")
    if not isinstance(q, dict):
        raise AnalysisError("model config: quantization_config is not an object")
    method = str(q.get("quant_method", ""))
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        if not isinstance(groups, dict) or not groups:
            raise AnalysisError("model config: compressed-tensors quantization_config has no config_groups")
        g = next(iter(groups.values()))
        wb = g.get("weights") or {}
        bits = _num(wb, "num_bits", 8)
        strategy = str(wb.get("strategy", "group"))
        gs = _num(wb, "group_size", 128) if strategy == "group" else 0
        per_group = base_bytes + (0 if wb.get("symmetric", True) else base_bytes)
        qb = bits / 8 + (per_group / gs if gs else 0.0)
        act = g.get("input_activations") or {}
        compute = "bf16" if not act else ("fp8" if act.get("type") == "float" else "int8")
        desc = (f"compressed-tensors {wb.get('type', 'int')}{bits} weights, {strategy}"
                + (f" size {gs}" if gs else "") + f": {qb:g} B/param; GEMMs in {compute}")
        return QuantScheme(method, base_bytes, qb, compute, tuple(str(x) for x in q.get("ignore") or ()), desc)
    if method == "fp8":
        blk = q.get("weight_block_size") or [128, 128]
        n = int(blk[0]) * int(blk[1]) if isinstance(blk, list) and len(blk) == 2 else 128 * 128
        qb = 1 + 4 / n
        ignore = tuple(str(x) for x in q.get("modules_to_not_convert") or ())
        return QuantScheme(method, base_bytes, qb, "fp8", ignore,
                           f"fp8 e4m3 weights, {blk} block scales: {qb:g} B/param; GEMMs in fp8")
    raise AnalysisError(f"model config: quantization method {method!r} is not one the speed-of-light model knows "
                        "(compressed-tensors, fp8)")
