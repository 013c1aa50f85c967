"""The run manifest: one typed schema for what capture and ingest record, and one table of
what each key is.

The manifest is stored as JSON in run.parquet (``tracekit.store``); :func:`typed` reads any
manifest, old or new, into :class:`RunManifest` (unknown keys are kept in the stored JSON and
ignored here, missing ones are None / empty). Capture (``collectors/manifest.rank_section``) and
ingest (``tracekit.ingest``) write their rank sections through :func:`rank_section_dict`, so both
record the same identity keys, ``host`` among them (capture: the rank process's host name;
ingest: the host the trace's file name gives, torch's ``tensorboard_trace_handler`` naming
``<host>_<pid>.<ns>.pt.trace.json``; None when no input names it).

Key kinds (the one table the readers share; ``summary``, ``analyzers.manifest_diff`` and
``analyzers.stragglers`` classify keys with it):

- ``RANK_IDENTITY``: leaves that identify a rank or sample a moving quantity: they differ
  between the ranks of one run by nature, never a "difference" in ``info``.
- ``RANK_MEASUREMENTS``: per-rank sections holding measurements of the run, not configuration.
- ``RUN_VOLATILE``: leaves and sections that differ between any two runs by nature (time stamps,
  pids, hashes, timings, profiler counters): ``diff`` leaves them out.
- ``GPU_STATE_WORDS`` / ``NOT_GPU_STATE``: which keys are GPU state (clocks, throttle, PCIe,
  power, temperature) for ``ranks``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, TypeVar

import msgspec

_S = TypeVar("_S", bound=msgspec.Struct)

# --- the schema ---------------------------------------------------------------------------------


class RankManifest(msgspec.Struct, kw_only=True):
    """One rank's section (``manifest["ranks"]["<r>"]``): the keys capture and ingest share, then
    those only one of them writes. Readers take these; only the generic walkers (``info``'s
    differences, ``diff``'s manifest diff, ``ranks``' GPU state) read the stored JSON, keys and all."""

    rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    host_source: str | None = None  # "process" (capture) | "file name" (ingest) | None: unknown
    pid: int | None = None
    env: dict[str, str] | None = None  # None: not known (ingest: a trace does not say)
    versions: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None
    devices: list[int] | None = None
    sources: list[str] | None = None
    cpu_only: bool | None = None
    time_resolution_ns: int | None = None  # ingest: the trace's time stamps are this coarse
    # capture only (collectors/rank_process.py): the window, the profile mode, the phase timers
    device: str | None = None
    window: dict[str, Any] | None = None  # first_cycle, cycles (done), requested
    profile_mode: str | None = None
    profile_note: str | None = None
    aborted: str | None = None  # why the window ended early
    unprofiled: dict[str, Any] | None = None  # phase -> timer stats of the unprofiled warm-up cycles
    profiled: dict[str, Any] | None = None  # the same over the profiled window
    timed: dict[str, Any] | None = None  # ... over the window of a --profile timing capture
    cycle_time: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None  # phase -> the reference's two blocks (before_ns, after_ns, counts)
    session: dict[str, Any] | None = None  # the profiler session: activities, cupti_client (dropped_records), ...


class RunManifest(msgspec.Struct, kw_only=True):
    """The top level of the manifest."""

    schema_version: int | None = None
    tracekit_version: str | None = None
    created_unix_ns: int | None = None
    source: str | None = None  # "capture" | "ingest" | "merge"
    world_size: int | None = None
    finalize_version: int | None = None
    ranks: dict[str, RankManifest] = msgspec.field(default_factory=dict)
    missing_ranks: dict[str, str] = msgspec.field(default_factory=dict)
    clock: dict[str, Any] = msgspec.field(default_factory=dict)
    capture: dict[str, Any] = msgspec.field(default_factory=dict)
    launcher: dict[str, Any] = msgspec.field(default_factory=dict)
    captured_ranks: list[int] | None = None  # capture: the ranks asked for (None: see capture / world_size)
    interrupted: dict[str, Any] | None = None  # capture: Ctrl-C ended the window (cycles_done, cycles_requested, signal)
    sources: list[dict[str, Any]] = msgspec.field(default_factory=list)  # ingest: the files read (path, size, ranks)
    ingest: dict[str, Any] = msgspec.field(default_factory=dict)  # ingest: skipped files, notes

    def rank_ids(self) -> list[int]:
        """The ranks with a section, in order."""
        return sorted(int(r) for r in self.ranks)


def _convert(fields: Mapping[str, Any], kind: type[_S]) -> _S:
    """``fields`` as ``kind``; a field of the wrong type is left out (None / empty), not the section."""
    try:
        return msgspec.convert(dict(fields), kind, strict=False)
    except msgspec.ValidationError:
        good = {}
        for k, v in fields.items():
            try:
                msgspec.convert({k: v}, kind, strict=False)
            except msgspec.ValidationError:
                continue
            good[k] = v
        return msgspec.convert(good, kind, strict=False)


def typed(manifest: Mapping[str, Any]) -> RunManifest:
    """Any stored manifest as a RunManifest (unknown keys ignored; a section that is not a
    mapping, as in hand-made test manifests, is left out)."""
    ranks = {str(r): sec for r, sec in (manifest.get("ranks") or {}).items() if isinstance(sec, Mapping)}
    out = _convert({k: manifest[k] for k in RunManifest.__struct_fields__ if k in manifest and k != "ranks"},
                   RunManifest)
    for r, sec in ranks.items():
        fields = {k: sec[k] for k in RankManifest.__struct_fields__ if k in sec}
        if "host" not in fields and isinstance(sec.get("hostname"), str):  # early captures
            fields["host"] = sec["hostname"]
        out.ranks[r] = _convert(fields, RankManifest)
    return out


def rank_section_dict(rank: RankManifest, **more: Any) -> dict[str, Any]:
    """A rank section as stored: the typed keys that were set (not None) plus ``more``."""
    out: dict[str, Any] = {}
    for name in RankManifest.__struct_fields__:
        v = getattr(rank, name)
        if v is not None:
            out[name] = v
    out.update(more)
    return out


def hosts(manifest: Mapping[str, Any]) -> dict[str, str | None]:
    """rank -> host name (None where the manifest does not know it)."""
    return {r: sec.host or None for r, sec in typed(manifest).ranks.items()}


_TB_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")


def host_from_trace_name(name: str, pids: set[int]) -> str | None:
    """The host in a torch ``tensorboard_trace_handler`` file name (``<host>_<pid>.<ns>.pt.trace.json``)
    when its pid is one of the trace's own process ids, else None."""
    m = _TB_NAME.match(name)
    if m is None or int(m.group("pid")) not in pids:
        return None
    return m.group("host")


# --- what each key is ---------------------------------------------------------------------------

# Environment variables tracekit's capture sets in every rank process (collectors/capture.py,
# rank_process): a multicast / NVLS object the profiler cannot tear down would otherwise outlive a
# killed rank. ``info`` marks them: the rank saw them because tracekit set them.
INJECTED_ENV: Final[dict[str, str]] = {
    "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

RANK_IDENTITY: Final = frozenset({
    "rank", "pid", "ppid", "taken_unix_ns", "when", "device_index", "device", "id", "uuid", "pci_bus_id",
    "trace_id", "traceName", "sources", "devices", "cuda_visible_devices", "rank_source", "dropped_events",
    "stages", "merged_from", "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "util_pct",
    "throttle_mask", "throttle_reasons", "nvml_errors", "created_unix_ns", "LOCAL_RANK", "RANK",
    "CUDA_VISIBLE_DEVICES", "argv", "host_pid", "gpu_name_index", "host_source",
})
RANK_MEASUREMENTS: Final = frozenset({
    "counters", "dilation", "profiled", "unprofiled", "reference", "session", "window", "end", "clock", "timing",
    "phases", "cycle_time",
})
RUN_VOLATILE: Final = re.compile(
    r"(^|\.)(taken_unix_ns|created_unix_ns|pid|ppid|when|uuid|pci_bus_id|nvml_errors|finalize_ns|MASTER_PORT|host_source)(\.|$)"
    r"|^(sources|clock|session|unprofiled|reference|profiled|dilation|counters|cycle_time|tracekit_version_build)(\.|$)"
    r"|^end\.env(\.|$)|^end\.taken_unix_ns$"
    r"|^workload\.distinct_experts\.counts(\.|$)"
)
GPU_STATE_WORDS: Final = ("clock", "throttle", "pcie", "power", "temp")
NOT_GPU_STATE_ROOTS: Final = ("profiled", "unprofiled", "reference", "dilation", "session", "workload", "window", "counters", "capture", "versions")
NOT_GPU_STATE: Final = ("uuid", "pci_bus_id", "nvml_errors", "device_index", "nvml", "persistence_mode", "cuda_driver", "driver")


def is_gpu_state(path: str) -> bool:
    """Clock / throttle / PCIe / power / temperature keys, and the GPU's own facts (anything under
    a ``gpu`` section but ids and versions); never environment variables."""
    parts = path.lower().split(".")
    if "env" in parts or parts[0] in NOT_GPU_STATE_ROOTS:
        return False
    last = parts[-1]
    if any(p.startswith("nvml_errors") for p in parts) or last in NOT_GPU_STATE:
        return False
    return "gpu" in parts or any(k in last for k in GPU_STATE_WORDS)


SECTION_ORDER: Final = ("rank", "env", "version", "gpu_state", "pcie", "hardware", "world", "config", "gpu_sensor", "other")


def section_of(scope: str, key: str) -> str:
    """The section of a manifest key for ranking a difference (``diff``): env, version, pcie,
    gpu_sensor, gpu_state, hardware, world, config (``scope`` "run": the top level), other."""
    k = key.lower()
    if k.startswith("env.") or ".env." in k:
        return "env"
    if k.startswith("versions.") or k.endswith(".driver") or k.endswith("cuda_driver") or k in ("tracekit_version", "schema_version"):
        return "version"
    if "pcie" in k:
        return "pcie"
    if any(s in k for s in ("power_w", "temperature")):
        return "gpu_sensor"
    if any(s in k for s in ("clock", "throttle", "power")):
        return "gpu_state"
    if k.endswith("gpu.name") or k.startswith("gpu.") or k in ("device", "backend", "host"):
        return "hardware"
    if "world_size" in k or k in ("world", "missing_ranks") or k.startswith("missing_ranks."):
        return "world"
    if scope == "run" or k.startswith(("capture.", "workload.", "window.")) or k in ("cuda_visible_devices", "device_index", "argv"):
        return "config"
    return "other"


__all__ = [
    "GPU_STATE_WORDS",
    "INJECTED_ENV",
    "RANK_IDENTITY",
    "RANK_MEASUREMENTS",
    "RUN_VOLATILE",
    "SECTION_ORDER",
    "RankManifest",
    "RunManifest",
    "host_from_trace_name",
    "hosts",
    "is_gpu_state",
    "rank_section_dict",
    "section_of",
    "typed",
]
