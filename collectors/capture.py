"""``tracekit capture``: start every rank, profile a bounded window on each, merge the shards.

``run_capture(CaptureConfig(...), progress=print) -> CaptureResult``

The launcher spawns one process per rank (``torch.multiprocessing`` spawn
context, a free TCP port, NCCL on GPU with one rank per visible GPU, gloo with
8 CPU ranks otherwise). Each rank: init the process group -> build the
reference workload -> capture CUDA graphs -> ``warmup`` cycles (the later ones
timed unprofiled) -> environment manifest -> profiler window of ``cycles``
cycles (timed again) -> manifest at window end -> convert + finalize events ->
write its shard ``<out>.d/rank-00003.parquet`` atomically -> ``os._exit``.
Each rank's stdout and stderr file descriptors go to ``<out>.d/rank-00003.log``
from its first line on (torch's C++ lines such as the profiler's USDT
``profiler_start`` notes, NCCL warnings, tracebacks); tracekit's own progress
reaches the launcher through a queue. The logs are removed with the shards when
every rank succeeded, kept (and named) when a rank failed, was killed or ended
its window early; the launcher prints the last lines of a failed rank's log.
A rank that dies, fails, or shows no progress for ``timeout_s`` (killed) loses only its own shard; the
merged manifest's ``missing_ranks`` names it and why.  Survivors of a dead peer
get an error from their next collective and still write what they recorded
(``ranks[r]["aborted"]`` says why the window ended early).

Modules: this one (configuration, paths, ``run_capture``); rank_process (the body of
one rank process); launcher (spawn, signals, Ctrl-C, the window control, why a rank
failed); progress (following the ranks' messages, the progress lines); merge (the
failures, the merged run, which shards and logs stay).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.engines import EngineConfig
from tracekit.collectors.nodes import Topology
from tracekit.collectors.remote import Remote
from tracekit.collectors.workload.config import WorkloadConfig
from tracekit.errors import ConfigError
from tracekit.manifest import INJECTED_ENV
from tracekit.settings import Settings
from tracekit.settings import current as current_settings

SAFE_ENV = INJECTED_ENV  # what every rank gets (tracekit.manifest: info marks these as set by tracekit)


@dataclass
class CaptureConfig:
    out: str = "run.parquet"
    world: int | None = None  # None: every visible GPU, else 8 CPU ranks
    ranks: list[int] | None = None  # None: all ranks are captured (all ranks always run)
    cycles: int = 8
    warmup: int = 4
    after: int = 4  # unprofiled cycles timed after the window: the reference's second block (timing.REFERENCE_POOL)
    device: str = "auto"  # auto | cuda | cpu
    # the engine's configuration (collectors/engines.py: EngineConfig; WorkloadConfig is the built-in workload's)
    workload: EngineConfig = field(default_factory=WorkloadConfig)
    keep_json: str | None = None  # directory for raw per-rank Kineto JSON (.json.gz)
    timeout_s: float = 300.0  # a rank that reports no progress for this long is killed (> coll_timeout_s)
    startup_timeout_s: float = 900.0  # the same, before a rank's first cycle (imports, NCCL init, graph capture)
    coll_timeout_s: float = 60.0  # process-group timeout (a collective waiting on a dead peer)
    nvml_interval_s: float = 0.02  # 0: no NVML counter sampling
    rank_env: dict[int, dict[str, str | None]] = field(default_factory=dict)  # per-rank env edits (None: unset)
    keep_logs: bool = False  # keep <out>.d/rank-*.log even when every rank succeeded
    profile: str = "auto"  # full | lite | timing | auto (resolve_profile: lite on GPU, full on CPU)
    nodes: Topology = field(default_factory=Topology)  # this launcher's place in a multi-host job (nodes.py)
    # the TRACEKIT_* settings, built once where the capture is configured and handed to every rank
    settings: Settings = field(default_factory=current_settings)
    # -o is a URL: where the ranks upload their shards (collectors/remote.py; set by run_capture)
    remote: Remote | None = None

    def captured(self, world: int) -> list[int]:
        return list(range(world)) if self.ranks is None else sorted(set(self.ranks))

    def to_dict(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "ranks": self.ranks,
            "cycles": self.cycles,
            "warmup": self.warmup,
            "after": self.after,
            "device": self.device,
            "keep_json": self.keep_json,
            "timeout_s": self.timeout_s,
            "coll_timeout_s": self.coll_timeout_s,
            "startup_timeout_s": self.startup_timeout_s,
            "nvml_interval_s": self.nvml_interval_s,
            "profile_mode": self.profile,
            "workload": self.workload.engine,
            **({"nodes": {k: v for k, v in self.nodes.to_dict().items() if k not in ("node_rank", "first_rank")}}
               if self.nodes.multi else {}),
        }


@dataclass
class CaptureResult:
    out: Path | str  # a URL when -o was one (the merged object, or the prefix of a sharded run)
    world: int
    captured: list[int]
    missing: dict[str, str]
    events: int
    size_bytes: int
    manifest: dict[str, Any]
    interrupted: dict[str, Any] | None = None  # set when a Ctrl-C ended the window early (manifest "interrupted")
    merged_by: int | None = None  # another node merges (multi-host capture): its node rank; ``out`` not written here
    local_ranks: list[int] = field(default_factory=list)  # the ranks this launcher ran



def resolve_device(device: str) -> tuple[str, int]:
    """(device kind, GPU count) for ``auto``/``cuda``/``cpu``."""
    import torch

    n = torch.cuda.device_count() if device != "cpu" else 0
    if device == "cuda" and n == 0:
        raise ConfigError("--device cuda asked for, but torch sees no GPU")
    return ("cuda" if n > 0 else "cpu"), n


def resolve_profile(profile: str, kind: str) -> str:
    """The profile mode a capture runs in: ``auto`` is lite on GPU (measured: docs/capture.md, "Profile
    modes"), full on CPU (a CPU rank has no CUDA activity: its CPU ops are all a profiler can show)."""
    from tracekit.collectors.session import PROFILE_MODES

    if profile == "auto":
        return "lite" if kind == "cuda" else "full"
    if profile not in PROFILE_MODES:
        raise ConfigError(f"--profile must be one of auto, {', '.join(PROFILE_MODES)}, not {profile!r}")
    return profile


def window_label(mode: str) -> str:
    """The PhaseTimer window (and manifest key) of the captured window: ``timed`` when no profiler runs."""
    return "timed" if mode == "timing" else "profiled"


def shard_path(shard_dir: Path, rank: int) -> Path:
    return shard_dir / f"rank-{rank:05d}.parquet"


def log_path(shard_dir: Path, rank: int) -> Path:
    """Where a rank process's stdout and stderr go."""
    return shard_dir / f"rank-{rank:05d}.log"



def _fresh_shard_dir(shard_dir: Path, nodes: Topology) -> None:
    """Make an empty shard directory; refuse to delete shards an earlier capture never merged. In a
    multi-host capture the directory is shared: it is created if missing and only this node's ranks
    are checked (the other nodes' files are theirs)."""
    from tracekit.errors import OutputError

    if nodes.multi:
        shard_dir.mkdir(parents=True, exist_ok=True)
        old = [p.name for r in nodes.local_ranks() if (p := shard_path(shard_dir, r)).exists()]
        if old:
            raise OutputError(f"already holds {', '.join(old)} of an earlier capture: merge them (tracekit merge "
                              f"{shard_dir} -o other.parquet) or remove them", path=str(shard_dir))
        for r in nodes.local_ranks():
            log_path(shard_dir, r).unlink(missing_ok=True)
        return
    if shard_dir.exists():
        if any(shard_dir.glob("rank-*.parquet")):
            raise OutputError("holds the shards of an earlier capture that were never merged: merge them "
                              f"(tracekit merge {shard_dir} -o other.parquet) or remove the directory", path=str(shard_dir))
        shutil.rmtree(shard_dir)  # only the logs of an earlier capture
    shard_dir.mkdir(parents=True)



def run_capture(cc: CaptureConfig, progress: Callable[[str], None] | None = None, *, live: bool = False) -> CaptureResult:
    """Run the capture described by ``cc``; see the module docstring. Raises TracekitError if no rank
    produced data, OutputLockedError when another capture writes the same output, InterruptedCapture on
    a second Ctrl-C (or Ctrl-C before the window). ``live``: a terminal, print every rank's cycles every
    few seconds."""
    from tracekit.outputs import OutputLock, sidecar

    say = progress or (lambda _m: None)
    kind, ngpu = resolve_device(cc.device)
    nodes = cc.nodes
    world = cc.world or (nodes.nnodes * (nodes.nproc or ngpu) if kind == "cuda" else nodes.nnodes * (nodes.nproc or 8))
    if world % nodes.nnodes or (nodes.nproc and world != nodes.nnodes * nodes.nproc):
        raise ConfigError(f"--world {world} is not {nodes.nnodes} nodes x "
                         f"{nodes.nproc or 'the same number of'} ranks")
    nodes = nodes.with_nproc(world // nodes.nnodes)
    cc = dataclasses.replace(cc, nodes=nodes)
    if kind == "cuda" and nodes.nproc > ngpu:
        raise ConfigError(f"{nodes.nproc} ranks on this host need {nodes.nproc} GPUs, torch sees {ngpu}")
    captured = cc.captured(world)
    if any(r < 0 or r >= world for r in captured):
        raise ConfigError(f"--ranks {captured} outside 0..{world - 1}")
    cc.workload.validate(world)
    cc = dataclasses.replace(cc, profile=resolve_profile(cc.profile, kind))
    from tracekit.collectors.launcher import launch
    from tracekit.collectors.remote import check, remote_of

    remote = remote_of(cc.out)
    if remote is not None:  # an object store: no lock files; this host's shards go through a temp directory
        if getattr(cc.workload, "driver", None):  # its ranks write their shards inside the engine's own workers
            raise ConfigError(f"-o {remote.out}: a URL output is for engines whose every rank tracekit starts itself "
                              f"(not --engine {cc.workload.engine}); capture to a directory, then copy it or ingest")
        check(remote, nodes.node_rank, nodes.local_ranks())
        cc = dataclasses.replace(cc, remote=remote)
        shard_dir = Path(tempfile.mkdtemp(prefix="tracekit-capture-"))
        try:
            return launch(cc, say, live, kind, world, captured, shard_dir / "merged.parquet", shard_dir)
        finally:
            shutil.rmtree(shard_dir, ignore_errors=True)
    out = Path(cc.out)
    # only the merging node writes ``out``: the others take no lock on it (the directory may be shared)
    lock = OutputLock(out).acquire() if nodes.node_rank == 0 else None  # before anything is deleted
    try:
        if lock is not None and lock.stale is not None:
            say(f"capture: replaced a stale lock {lock.path} (pid {lock.stale} no longer runs)")
        shard_dir = sidecar(out, ".d")
        _fresh_shard_dir(shard_dir, nodes)
        return launch(cc, say, live, kind, world, captured, out, shard_dir)
    finally:
        if lock is not None:
            lock.release()
