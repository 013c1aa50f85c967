"""Issue 29, multi-host capture: two hosts on one machine, a real network between them, one shifted clock.

Two network namespaces joined by a veth pair (created and removed here) are the two hosts; each
runs ``tracekit capture --nnodes 2 --node-rank I --master ADDR:PORT`` in its own UTS namespace
(its own host name) with 2 gloo ranks, talking TCP across the veth. Node 1's wall clock is
shifted by +3.7 s with Debian's libfaketime (LD_PRELOAD: ``time.time_ns`` and the profiler's
clock read the shifted clock). Node 0 merges; the merged run must be aligned by its collectives:
the fitted offset of node 1's ranks equals the injected one within the residual the fit measured
(the collective-end jitter), and after alignment every collective's ranks overlap in time (within that
jitter), where before it none did. The shards travel once through a directory both hosts see, once
through an S3 server (moto's, in node 0's namespace: ``capture -o s3://tkruns/run.parquet``).

Needs root, ``ip``, ``unshare`` and libfaketime (``apt-get install -y faketime libfaketime``;
.ci/run installs them); skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

pytest.importorskip("torch")

from tracekit.analyzers.align import raw_times
from tracekit.analyzers.coll_match import host_collectives
from tracekit.manifest import typed
from tracekit.store import load_run

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SHIFT_NS = 3_700_000_000
SMALL = ["--device", "cpu", "--warmup", "1", "--after", "0", "--cycles", "2", "--batch-size", "2", "--ctx", "32",
         "--layers", "1", "--world", "4"]
PORT = 29517  # each namespace has its own ports: nothing else listens there
S3_PORT = 29519  # moto's S3 server in node 0's namespace


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command"
    if not FAKETIME_LIB.exists():
        return f"no libfaketime ({FAKETIME_LIB}; apt-get install -y faketime libfaketime)"
    return None


pytestmark = pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def hosts() -> Iterator[tuple[str, str, str]]:
    """Two namespaces (ns0, ns1) joined by a veth pair; yields (ns0, ns1, node 0's address)."""
    tag = f"tk{os.getpid() % 100000}"
    ns = (f"{tag}a", f"{tag}b")
    veth = (f"{tag}va", f"{tag}vb")
    octet = os.getpid() % 200 + 20
    addrs = (f"10.231.{octet}.1", f"10.231.{octet}.2")
    made: list[str] = []
    try:
        for n in ns:
            _ip("netns", "add", n)
            made.append(n)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, a in zip(ns, veth, addrs, strict=True):
            _ip("link", "set", v, "netns", n)
            _ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            _ip("-n", n, "link", "set", v, "up")
            _ip("-n", n, "link", "set", "lo", "up")
        yield ns[0], ns[1], addrs[0]
    finally:
        for n in made:  # removing a namespace removes its end of the veth pair, and the pair with it
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)


def _node(ns: str, host: str, rank: int, master: str, out: Path | str, env: dict[str, str],
          small: list[str] = SMALL, cwd: Path | None = None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "tracekit", "capture", *small, "--nnodes", "2", "--node-rank", str(rank),
           "--master", master, "-o", str(out)]
    # its own UTS namespace: the host name each rank records (two hosts have two names)
    shell = f"hostname {host} && exec " + " ".join(cmd)
    return subprocess.Popen(["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", shell],
                            cwd=cwd or Path(out).parent,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def _s3_in(ns: str, addr: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """moto's S3 server inside namespace ``ns`` on ``addr`` (node 1 reaches it across the veth), with a
    bucket ``tkruns``; yields the AWS environment that reaches it."""
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://{addr}:{S3_PORT}", "AWS_ACCESS_KEY_ID": "tk",
           "AWS_SECRET_ACCESS_KEY": "tk", "AWS_DEFAULT_REGION": "us-east-1"}
    with open(tmp_path / "moto.log", "w") as log:
        server = subprocess.Popen(["ip", "netns", "exec", ns, exe, "-H", addr, "-p", str(S3_PORT)], stdout=log,
                                  stderr=subprocess.STDOUT)
        try:
            # the bucket, made once the server answers (polling a port not open yet: nothing to wait on)
            make = ("import socket, time, s3fs\n"
                    "for _ in range(600):\n"
                    "    try:\n"
                    f"        socket.create_connection(({addr!r}, {S3_PORT}), timeout=1).close(); break\n"
                    "    except OSError: time.sleep(0.2)\n"
                    "s3fs.S3FileSystem().mkdir('tkruns')\n")
            r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", make], env=env, capture_output=True,
                               text=True, timeout=180)
            assert r.returncode == 0, (r.stderr, (tmp_path / "moto.log").read_text())
            yield env
        finally:
            server.terminate()
            server.wait(30)


def _storage(stack: contextlib.ExitStack, storage: str, ns0: str, addr0: str,
             tmp_path: Path) -> tuple[dict[str, str], Path | str]:
    """(the AWS environment, ``-o``) of a capture whose shards travel through ``storage``."""
    if storage == "shared":
        return {}, tmp_path / "run.parquet"
    if shutil.which("moto_server", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("no moto_server (pip install 'moto[server]')")
    pytest.importorskip("s3fs")
    env = stack.enter_context(_s3_in(ns0, addr0, tmp_path))
    return {k: v for k, v in env.items() if k.startswith("AWS_")}, "s3://tkruns/run.parquet"


def _read_back(out: Path | str, ns0: str, env0: dict[str, str], tmp_path: Path) -> Path:
    """The local run file of ``out``: an S3 object answers inside the namespaces only, so node 0's namespace
    reads it (``tracekit info``) and copies it here."""
    if isinstance(out, Path):
        return out
    info = subprocess.run(["ip", "netns", "exec", ns0, sys.executable, "-m", "tracekit", "info", out],
                          env=env0, capture_output=True, text=True, timeout=300)
    assert info.returncode in (0, 3) and "ranks present" in info.stdout, info.stderr
    get = f"import s3fs; s3fs.S3FileSystem().get({out.split('://', 1)[1]!r}, {str(tmp_path / 'got.parquet')!r})"
    got = subprocess.run(["ip", "netns", "exec", ns0, sys.executable, "-c", get], env=env0, capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    return tmp_path / "got.parquet"


@pytest.mark.parametrize("storage", ["shared", "s3"])
def test_two_hosts_merge_aligned_by_collectives(tmp_path: Path, hosts: tuple[str, str, str], storage: str) -> None:
    """``shared``: the shards through a directory both hosts see; ``s3``: through an S3 server in node 0's
    namespace (moto), nothing shared on disk."""
    ns0, ns1, addr0 = hosts
    master = f"{addr0}:{PORT}"
    with contextlib.ExitStack() as stack:
        aws, out = _storage(stack, storage, ns0, addr0, tmp_path)
        env0 = {**os.environ, **aws}
        env1 = {**os.environ, **aws, "LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": f"+{SHIFT_NS / 1e9:.1f}",
                "FAKETIME_DONT_RESET": "1"}
        p0 = _node(ns0, "tk-node0", 0, master, out, env0, cwd=tmp_path)
        p1 = _node(ns1, "tk-node1", 1, master, out, env1, cwd=tmp_path)
        try:
            out1, err1 = p1.communicate(timeout=540)  # a last guard: on this 2-core box the capture takes ~1 min
            out0, err0 = p0.communicate(timeout=120)
        finally:
            for p in (p0, p1):
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
        assert p1.returncode == 0, f"node 1 failed:\n{err1}\n{out1}"
        assert p0.returncode == 0, f"node 0 failed:\n{err0}\n{out0}"
        assert "node 0 merges them into" in out1
        assert f"wrote {out}" in out0
        assert "gloo's interface:" in err0 and "gloo's interface:" in err1
        run = load_run(_read_back(out, ns0, env0, tmp_path))
    _check_aligned(run)


def _check_aligned(run: Any) -> None:
    man = typed(run.manifest)
    assert {r: sec.host for r, sec in man.ranks.items()} == {"0": "tk-node0", "1": "tk-node0", "2": "tk-node1",
                                                              "3": "tk-node1"}
    assert set(run.manifest["nodes"]) == {"0", "1"} and run.manifest["nodes"]["1"]["host"] == "tk-node1"
    assert not man.missing_ranks
    assert {sec.env.get("GLOO_SOCKET_IFNAME") for sec in man.ranks.values()} != {None}
    clock = run.manifest["clock"]
    print("clock:", json.dumps(clock, sort_keys=True))  # bench/results/multihost-netns.txt keeps one run's
    assert clock["align"] == "collectives" and clock["auto"] == "ranks on 2 hosts"
    assert clock["collective_source"] == "gloo collectives (host ranges)"
    # offsets_ns is what was added to each rank's times: node 1's ranks read 3.7 s ahead, so -3.7 s
    jitter = int(clock["residual_ns"]["max"])
    assert 0 < jitter < 50_000_000, clock
    for r in ("2", "3"):
        assert abs(int(clock["offsets_ns"][r]) + SHIFT_NS) <= jitter, clock
    for r in ("0", "1"):
        assert abs(int(clock["offsets_ns"][r])) <= jitter, clock
    # after alignment every collective's ranks overlap (the latest arrival before the earliest end) to within
    # the jitter the fit measured: on a loaded box a gloo range's end is stamped when its thread runs again,
    # and the last rank to arrive may hold the collective for less than that (a barrier's last rank: µs)
    coll = host_collectives(run.events)
    span = coll.group_by("key").agg(pl.col("start_ns").max().alias("last_in"), pl.col("end_ns").min().alias("first_out"),
                                    pl.len().alias("n"))
    assert span.height > 10 and (span.get_column("n") == 4).all()
    late = span.filter(pl.col("last_in") > pl.col("first_out") + jitter)
    assert late.is_empty(), (late, jitter)
    # unaligned, node 1's ranks arrive 3.7 s after every other rank has left: no collective overlaps
    raw = host_collectives(raw_times(run.events, run.manifest))
    gap = raw.group_by("key").agg((pl.col("start_ns").max() - pl.col("end_ns").min()).alias("gap"))
    assert (gap.get_column("gap") > SHIFT_NS // 2).all()


@pytest.mark.parametrize("storage", ["shared", "s3"])
def test_a_dead_host_loses_only_its_ranks(tmp_path: Path, hosts: tuple[str, str, str], storage: str) -> None:
    """Node 1 (launcher and ranks) is killed in its profiling window: node 0's ranks lose their peers,
    write what they recorded, node 0 merges them and names node 1's host for ranks 2 and 3 (exit 3)."""
    ns0, ns1, addr0 = hosts
    with contextlib.ExitStack() as stack:
        aws, out = _storage(stack, storage, ns0, addr0, tmp_path)
        env = {**os.environ, **aws, "TRACEKIT_NODE_WAIT_S": "5"}
        out0, err0, code0 = _kill_node1(ns0, ns1, addr0, out, env, tmp_path)
        assert code0 == 3, f"node 0:\n{err0}\n{out0}"
        run = load_run(_read_back(out, ns0, env, tmp_path))
    man = typed(run.manifest)
    assert sorted(man.ranks) == ["0", "1"] and sorted(man.missing_ranks) == ["2", "3"]
    for r in ("2", "3"):
        assert man.missing_ranks[r].startswith("node 1 (host tk-node1) started its ranks but did not report their end "
                                               "within 5 s"), man.missing_ranks
    assert all(sec.aborted and "lost its peer" in sec.aborted for sec in man.ranks.values()), man.ranks
    assert "missing ranks 2-3: node 1 (host tk-node1)" in out0, out0


def _kill_node1(ns0: str, ns1: str, addr0: str, out: Path | str, env: dict[str, str],
                tmp_path: Path) -> tuple[str, str, int | None]:
    """Both nodes started, node 1 killed once its window runs; node 0's (stdout, stderr, exit status)."""
    master = f"{addr0}:{PORT}"
    long = [*SMALL[:SMALL.index("--cycles")], "--cycles", "400", *SMALL[SMALL.index("--cycles") + 2:]]
    p0 = _node(ns0, "tk-node0", 0, master, out, env, long, cwd=tmp_path)
    p1 = _node(ns1, "tk-node1", 1, master, out, env, long, cwd=tmp_path)
    try:
        assert p1.stderr is not None
        seen = []
        for line in p1.stderr:  # node 1's progress lines, until its window runs (EOF: it ended first)
            seen.append(line)
            if "profiling window started" in line:
                break
        assert any("profiling window started" in ln for ln in seen), "".join(seen)
        p1.kill()  # SIGKILL to its launcher: its ranks die with it (PR_SET_PDEATHSIG)
        p1.wait(60)
        out0, err0 = p0.communicate(timeout=300)  # a last guard
    finally:
        for p in (p0, p1):
            if p.poll() is None:
                p.kill()
                p.wait(10)
    return out0, err0, p0.returncode
