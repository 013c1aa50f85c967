"""The environment each SGLang scheduler process really saw, written once per rank.

Taken inside the rank process at the first hooked call (so ``NCCL_*`` variables
set on the launcher but lost on the way to a spawned rank show up as missing),
written as JSON into the control directory (:func:`manifest_dir`) as
``rank-manifest-TP-<r>-<pid>.json``; live capture (live.py) picks the newest
file per rank into run.parquet's manifest ``ranks`` section.

The control directory is private to the user (:func:`private_dir`, the one rule for it, on the
server side and the capture side alike): ``TRACEKIT_SGLANG_DIR``, else ``tracekit-sglang`` under
the user's own runtime directory (``$XDG_RUNTIME_DIR``), else ``<tmp>/tracekit-sglang-<uid>``;
created 0700; one owned by another user, writable by others, or a symbolic link is refused.
A shared ``/tmp`` never lets one user steer where another user's server writes, or read its
environment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

MANIFEST_RE = re.compile(r"^rank-manifest-TP-(\d+)-(\d+)\.json$")


class ControlDirError(Exception):
    """A control directory tracekit will not use (another user's, writable by others, a link)."""


def manifest_dir() -> Path:
    """The control directory, as given (``TRACEKIT_SGLANG_DIR``) or the per-user default; not checked
    (:func:`private_dir` checks it where it is used)."""
    env = os.environ.get("TRACEKIT_SGLANG_DIR")
    if env:
        return Path(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _owned_private(Path(runtime)):
        return Path(runtime) / "tracekit-sglang"
    return Path(tempfile.gettempdir()) / f"tracekit-sglang-{os.geteuid()}"


def _owned_private(d: Path) -> bool:
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def private_dir(d: Path | None = None) -> Path:
    """The control directory ``d`` (default :func:`manifest_dir`), created 0700 when missing, checked:
    a directory (not a symbolic link) owned by this user and writable by nobody else; else
    ControlDirError saying what is wrong."""
    d = d if d is not None else manifest_dir()
    try:
        d.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
        st = os.lstat(d)
    except OSError as exc:
        raise ControlDirError(f"control directory {d}: cannot use it ({exc.strerror or exc})") from None
    if stat.S_ISLNK(st.st_mode):
        raise ControlDirError(f"control directory {d} is a symbolic link: refused (it could point anywhere)")
    if not stat.S_ISDIR(st.st_mode):
        raise ControlDirError(f"control directory {d} is not a directory")
    if st.st_uid != os.geteuid():
        raise ControlDirError(f"control directory {d} belongs to uid {st.st_uid}, not to this user (uid "
                              f"{os.geteuid()}): refused (set TRACEKIT_SGLANG_DIR to a directory of your own)")
    if st.st_mode & 0o022:
        raise ControlDirError(f"control directory {d} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}): "
                              "refused (chmod go-w it, or set TRACEKIT_SGLANG_DIR to a private directory)")
    return d


_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def inside(d: Path, name: object) -> Path:
    """``d / name`` for a name that stays inside ``d`` (one path component: no ``/``, no ``..``, not
    absolute); ControlDirError otherwise (a window id read from the control file is never followed out)."""
    if not isinstance(name, str) or not _SAFE_NAME.match(name) or name in (".", ".."):
        raise ControlDirError(f"control directory {d}: refused the name {name!r} (not one plain file name)")
    return d / name


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
    """Atomically write one rank's manifest (0600) into the private control directory; returns its path."""
    d = private_dir(directory)
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
    private_dir(directory)  # never a manifest another user could have planted
    for p in directory.iterdir():
        m = MANIFEST_RE.match(p.name)
        if not m:
            continue
        try:
            man = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError, RecursionError):
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
        try:
            write_rank_manifest(rank_manifest(rec.rank, rec.spec, entry))
        except ControlDirError as exc:  # serving goes on; the capture says the manifest is missing
            logging.getLogger("tracekit.sglang").error("tracekit: %s; this rank's environment manifest is not written", exc)

    return cb
