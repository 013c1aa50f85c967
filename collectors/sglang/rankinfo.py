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
import platform
import re
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENV_PREFIXES = ("NCCL_", "CUDA_", "SGLANG_", "TORCH_", "NVIDIA_", "PYTORCH_", "TRACEKIT_", "OMP_")
ENV_EXTRA = ("LD_LIBRARY_PATH", "PYTHONPATH", "MASTER_ADDR", "MASTER_PORT")
MANIFEST_RE = re.compile(r"^rank-manifest-TP-(\d+)-(\d+)\.json$")


def manifest_dir() -> Path:
    return Path(os.environ.get("TRACEKIT_SGLANG_DIR") or Path(tempfile.gettempdir()) / "tracekit-sglang")


def rank_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES) or k in ENV_EXTRA}


def _versions() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, Any] = {"python": platform.python_version()}
    for dist in ("sglang", "torch", "tracekit", "flashinfer-python", "sgl-kernel"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_cuda"] = getattr(torch.version, "cuda", None)
        try:
            if torch.cuda.is_available():
                nccl = torch.cuda.nccl.version()
                out["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
        except Exception:
            pass
    return out


def _device() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    try:
        if not torch.cuda.is_available():
            return {}
        idx = torch.cuda.current_device()
        return {"device": idx, "gpu_name": torch.cuda.get_device_name(idx)}
    except Exception:
        return {}


def rank_manifest(rank: int | None, spec: dict[str, int] | None = None, entry: str | None = None) -> dict[str, Any]:
    """The ``ranks[<r>]`` section of a run manifest for this process."""
    m: dict[str, Any] = {
        "rank": rank,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "taken_unix_ns": time.time_ns(),
        "env": rank_env(),
        "versions": _versions(),
        "collector": "tracekit.collectors.sglang",
    }
    m.update(_device())
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
    name = f"rank-manifest-TP-{rank if rank is not None else 'x'}-{man.get('pid', os.getpid())}.json"
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
