"""Issue 30, trust across users and permissions: a second real local account (``useradd``) plants
the SGLang control directory first; inputs this process may not read (``setpriv`` drops root's
permission override for the child) are one line and exit 1, an unreadable subdirectory is said.

Skipped with the reason when not root, or without useradd / setpriv.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kineto_synth import gpu_rank

from tracekit.collectors.sglang import rankinfo, window

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
H200 = SAMPLES / "h200x2-forensics" / "run.parquet"
NO_OVERRIDE = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--inh-caps", "-all", "--"]


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("needs root and useradd / runuser to make a second local account")
    name = f"tk{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True, capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _as(user: str, script: str) -> None:
    subprocess.run(["runuser", "-u", user, "--", "sh", "-c", script], check=True, capture_output=True)


class _Rec:
    def __init__(self) -> None:
        self.cycle = -1
        self.rank = 0


@pytest.fixture
def shared() -> Iterator[Path]:
    """A world-writable sticky directory, as /tmp is."""
    d = Path(f"/tmp/tk-shared-{uuid.uuid4().hex[:8]}")
    d.mkdir(mode=0o1777)
    d.chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_a_control_directory_planted_by_another_user_is_refused(other_user: str, shared: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    ctl, target = shared / "tracekit-sglang", shared / "steered"
    doc = {"id": str(target), "mode": "lite", "cycles": None, "state": "open", "created_unix_ns": time.time_ns(),
           "deadline_unix_ns": time.time_ns() + 3_600_000_000_000}
    _as(other_user, f"mkdir -m 0755 {ctl} && mkdir -m 0777 {target} && printf '%s' '{json.dumps(doc)}' > {ctl}/window.json"
                    f" && printf '{{}}' > {ctl}/rank-manifest-TP-0-1.json")
    monkeypatch.setenv("TRACEKIT_SGLANG_DIR", str(ctl))
    uid = int(subprocess.run(["id", "-u", other_user], capture_output=True, text=True, check=True).stdout)
    # the scheduler process (this one, root): no window, no file anywhere, said once in the log
    agent = window.Agent(_Rec())
    caplog.set_level(logging.ERROR, logger="tracekit.sglang")
    for _ in range(3):
        agent.rec.cycle += 1
        agent._last_poll = 0
        agent.tick()
    assert agent._active is None and sorted(p.name for p in target.iterdir()) == []
    assert sorted(p.name for p in ctl.iterdir()) == ["rank-manifest-TP-0-1.json", "window.json"]
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"tracekit: control directory {ctl} belongs to uid {uid}, not to this user (uid 0): refused (set "
                    "TRACEKIT_SGLANG_DIR to a directory of your own); no recording window will start in this process"]
    # its environment manifest is not written there, and the capture side refuses to read one from there
    with pytest.raises(rankinfo.ControlDirError, match="belongs to uid"):
        rankinfo.write_rank_manifest({"rank": 0, "pid": os.getpid(), "env": {"SECRET": "x"}})
    with pytest.raises(rankinfo.ControlDirError, match="belongs to uid"):
        rankinfo.read_rank_manifests(ctl)
    r = subprocess.run([sys.executable, "-m", "tracekit", "capture", "--ranks", "all", "--sglang", "http://127.0.0.1:9",
                        "--profile", "lite", "-o", str(shared / "run.parquet")],
                       capture_output=True, text=True, timeout=120, env=dict(os.environ, TRACEKIT_SGLANG_DIR=str(ctl)))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (f"tracekit: error: control directory {ctl} belongs to uid {uid}, not to this user (uid 0): "
                        "refused (set TRACEKIT_SGLANG_DIR to a directory of your own)\n")


def test_a_control_directory_writable_by_others_or_a_link_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    with pytest.raises(rankinfo.ControlDirError, match=r"is writable by other users \(mode 777\): refused"):
        rankinfo.private_dir(loose)
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    with pytest.raises(rankinfo.ControlDirError, match="is a symbolic link: refused"):
        rankinfo.private_dir(link)
    made = rankinfo.private_dir(tmp_path / "new")
    assert made.stat().st_mode & 0o777 == 0o700


def test_the_default_control_directory_is_per_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACEKIT_SGLANG_DIR", raising=False)
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert rankinfo.manifest_dir() == run / "tracekit-sglang"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert rankinfo.manifest_dir().name == f"tracekit-sglang-{os.geteuid()}"


@pytest.mark.parametrize("wid", ["/tmp/elsewhere", "../up", "a/b", ".hidden", ""])
def test_a_window_id_is_never_followed_out_of_the_directory(tmp_path: Path, wid: str) -> None:
    ctl = tmp_path / "ctl"
    ctl.mkdir(mode=0o700)
    doc = {"id": wid, "mode": "lite", "cycles": None, "state": "open", "created_unix_ns": time.time_ns(),
           "deadline_unix_ns": time.time_ns() + 3_600_000_000_000}
    (ctl / window.CONTROL).write_text(json.dumps(doc))
    agent = window.Agent(_Rec(), ctl)
    agent.rec.cycle += 1
    agent.tick()
    assert agent._active is None
    assert sorted(p.name for p in ctl.iterdir()) == [window.CONTROL]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctl"]


# --- inputs this process may not read ----------------------------------------------------------


@pytest.fixture
def no_override() -> list[str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run tracekit without root's permission override")
    return NO_OVERRIDE


def _cli(prefix: list[str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "tracekit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def test_an_unreadable_run_and_an_unreadable_trace_are_one_line_and_exit_1(tmp_path: Path,
                                                                          no_override: list[str]) -> None:
    run = tmp_path / "run.parquet"
    shutil.copy(H200, run)
    trace = gpu_rank(0, world=1).write(tmp_path / "r0.json")
    run.chmod(0)
    trace.chmod(0)
    for args, name in ((["info", "run.parquet"], "run.parquet"), (["attribute", "run.parquet"], "run.parquet"),
                       (["ingest", "r0.json", "-o", "o.parquet"], "r0.json")):
        r = _cli(no_override, args, tmp_path)
        assert r.returncode == 1 and r.stdout == "", (args, r.stderr)
        assert r.stderr == f"tracekit: error: {name}: cannot read (Permission denied)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r0.json", "run.parquet"]


def test_an_unreadable_subdirectory_is_said(tmp_path: Path, no_override: list[str]) -> None:
    traces = tmp_path / "traces"
    (traces / "sub").mkdir(parents=True)
    gpu_rank(0).write(traces / "rank-0.json")
    gpu_rank(1).write(traces / "sub" / "rank-1.json")
    (traces / "sub").chmod(0)
    try:
        r = _cli(no_override, ["ingest", "traces", "-o", "o.parquet"], tmp_path)
        assert r.returncode == 1
        assert r.stderr == ("tracekit: error: traces/sub: cannot read the directory (Permission denied): traces under "
                            "it are not ingested\n")
        r = _cli(no_override, ["ingest", "traces", "-o", "o.parquet", "--on-error", "skip", "--allow-missing-ranks"],
                 tmp_path)
        assert r.returncode == 3, r.stderr
        assert "  traces/sub: cannot read the directory (Permission denied): traces under it are not ingested" in \
            r.stderr.splitlines()
    finally:
        (traces / "sub").chmod(0o755)
