"""The environment each SGLang scheduler process really saw, written once per rank.

Taken inside the rank process at the first hooked call (so ``NCCL_*`` variables
set on the launcher but lost on the way to a spawned rank show up as missing),
written as JSON into ``TRACEKIT_SGLANG_DIR`` (default ``<tmp>/tracekit-sglang``)
as ``rank-manifest-TP-<r>-<pid>.json``; live capture (live.py) picks the newest
file per rank into run.parquet's manifest ``ranks`` section.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

MANIFEST_RE = re.compile(r"^rank-manifest-TP-(\d+)-(\d+)\.json$")


def manifest_dir() -> Path:
    return Path(os.environ.get("TRACEKIT_SGLANG_DIR") or Path(tempfile.gettempdir()) / "tracekit-sglang")


def _world_and_device() -> tuple[int | None, int | None]:
    torch = sys.modules.get("torch")
    if torch is None:
        return None, None
    world = device = None
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = int(torch.distributed.get_world_size())
        if torch.cuda.is_available():
            device = int(torch.cuda.current_device())
    except Exception:
        pass
    return world, device


def rank_manifest(rank: int | None, spec: dict[str, int] | None = None, entry: str | None = None) -> dict[str, Any]:
    """The ``ranks[<r>]`` section of a run manifest for this process.

    The collectors' ``manifest.rank_section`` (env as this process sees it, host, pid,
    NVML snapshot: clocks, PCIe link, driver) plus versions, the speculative config the
    hooks learned and how tracekit got into the process.
    """
    from tracekit.collectors import manifest as M

    world, device = _world_and_device()
    m = M.rank_section(rank if rank is not None else -1, world if world is not None else -1, device)
    m["versions"] = M.versions()
    m["collector"] = "tracekit.collectors.sglang"
    if spec:
        m["speculative"] = dict(spec)
    if entry:
        m["entry"] = entry
    return m


def write_rank_manifest(man: dict[str, Any], directory: Path | None = None) -> Path:
    """Atomically write one rank's manifest; returns its path."""
    d = directory if directory is not None else manifest_dir()
    d.mkdir(parents=True, exist_ok=True)
    rank = man.get("rank")
    tag = rank if isinstance(rank, int) and rank >= 0 else "x"
    name = f"rank-manifest-TP-{tag}-{man.get('pid', os.getpid())}.json"
    fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as fh:
        json.dump(man, fh, sort_keys=True, default=str)
    out = d / name
    os.replace(tmp, out)
    return out


def read_rank_manifests(directory: Path, since_unix_ns: int = 0) -> dict[int, dict[str, Any]]:
    """Newest manifest per rank in ``directory`` (taken at or after ``since_unix_ns`` if given).

    A manifest that is not valid JSON is skipped: it is metadata, never a reason to lose a capture.
    """
    best: dict[int, dict[str, Any]] = {}
    if not directory.is_dir():
        return best
    for p in directory.iterdir():
        m = MANIFEST_RE.match(p.name)
        if not m:
            continue
        try:
            man = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(man, dict):
            continue
        rank = int(m.group(1))
        taken = int(man.get("taken_unix_ns", 0))
        if taken < since_unix_ns:
            continue
        if rank not in best or taken > int(best[rank].get("taken_unix_ns", 0)):
            best[rank] = man
    return best


def on_first_call(entry: str) -> Any:
    """A Recorder.on_first_call callback that writes this rank's manifest."""

    def cb(rec: Any, _obj: Any) -> None:
        write_rank_manifest(rank_manifest(rec.rank, rec.spec, entry))

    return cb
