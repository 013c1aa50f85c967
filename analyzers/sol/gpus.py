"""The GPU table (``tracekit/data/gpus.toml``) and user spec files: peaks, the achievable fraction, the link.

``gpu_spec(name_or_path)`` returns a ``GpuSpec`` from a table entry (its ``name``, or a device
name its ``match`` regex finds, as a run's manifest records it) or from a ``SPEC.toml`` file with
one ``[[gpu]]`` table of the same keys (``tracekit sol --calibrate -o SPEC.toml`` writes one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Final

import tomllib

from tracekit.errors import AnalysisError

REQUIRED: Final = ("name", "hbm_gbps", "bf16_tflops", "link", "link_gbps", "source")
NUMBERS: Final = ("hbm_gbps", "bf16_tflops", "fp8_tflops", "int8_tops", "link_gbps", "achievable",
                  "allreduce_alpha_us")


@dataclass(frozen=True)
class GpuSpec:
    name: str
    hbm_Bps: float  # peak bytes/s
    flops: dict[str, float]  # precision (bf16, fp8, int8, fp32) -> peak dense FLOP/s (0: not supported)
    link: str
    link_Bps: float  # per direction per GPU
    alpha_ns: float  # ring allreduce per-step latency (estimate from the link table, or a spec file's)
    achievable: float  # fraction of the peaks the floor assumes
    source: str
    origin: str  # "table" | the spec file's path

    def rate(self, precision: str) -> float:
        """Peak dense FLOP/s for GEMMs in ``precision``; bf16's where the GPU has no such units."""
        r = self.flops.get(precision, 0.0)
        return r if r > 0 else self.flops["bf16"]


def _table_text() -> str:
    return resources.files("tracekit").joinpath("data/gpus.toml").read_text()


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AnalysisError(f"GPU spec is not valid TOML: {exc}", path=where) from None


def _spec(entry: dict[str, Any], links: dict[str, dict[str, Any]], origin: str) -> GpuSpec:
    where = origin if origin != "table" else "tracekit/data/gpus.toml"
    for k in REQUIRED:
        if k not in entry:
            raise AnalysisError(f"GPU spec {entry.get('name', '?')!r}: missing {k}", path=where)
    for k in NUMBERS:
        v = entry.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            raise AnalysisError(f"GPU spec {entry['name']!r}: {k} = {v!r} is not a non-negative number", path=where)
    alpha = entry.get("allreduce_alpha_us")
    if alpha is None:
        alpha = links.get(str(entry["link"]), {}).get("allreduce_alpha_us", 1.0)
    ach = float(entry.get("achievable", 0.9))
    if not 0 < ach <= 1:
        raise AnalysisError(f"GPU spec {entry['name']!r}: achievable = {ach} is not in (0, 1]", path=where)
    t = 1e12
    return GpuSpec(
        name=str(entry["name"]), hbm_Bps=float(entry["hbm_gbps"]) * 1e9,
        flops={"bf16": float(entry["bf16_tflops"]) * t, "fp8": float(entry.get("fp8_tflops", 0)) * t,
               "int8": float(entry.get("int8_tops", 0)) * t, "fp32": float(entry.get("fp32_tflops", 0)) * t},
        link=str(entry["link"]), link_Bps=float(entry["link_gbps"]) * 1e9, alpha_ns=float(alpha) * 1000,
        achievable=ach, source=str(entry["source"]), origin=origin)


def gpu_table() -> list[GpuSpec]:
    """Every GPU of the shipped table, in its order."""
    data = _parse(_table_text(), "tracekit/data/gpus.toml")
    links = {str(x["kind"]): x for x in data.get("link", [])}
    return [_spec(e, links, "table") for e in data.get("gpu", [])]


def gpu_spec(name: str) -> GpuSpec:
    """A spec file (a path ending in .toml), a table name, or a device name a table entry matches."""
    data = _parse(_table_text(), "tracekit/data/gpus.toml")
    links = {str(x["kind"]): x for x in data.get("link", [])}
    if name.endswith(".toml"):
        p = Path(name)
        try:
            text = p.read_text()
        except OSError as exc:
            raise AnalysisError(f"GPU spec cannot be read: {exc.strerror or exc}", path=name) from None
        user = _parse(text, name)
        entries = user.get("gpu") or []
        if not isinstance(entries, list) or len(entries) != 1:
            raise AnalysisError("GPU spec file must hold exactly one [[gpu]] table", path=name)
        return _spec(entries[0], links, name)
    entries = data.get("gpu", [])
    for e in entries:
        if str(e["name"]).lower() == name.lower():
            return _spec(e, links, "table")
    for e in entries:
        if re.search(str(e.get("match", e["name"])), name, re.IGNORECASE):
            return _spec(e, links, "table")
    known = ", ".join(str(e["name"]) for e in entries)
    raise AnalysisError(f"GPU {name!r} is not in the GPU table ({known}); pass --gpu NAME or --gpu SPEC.toml")
