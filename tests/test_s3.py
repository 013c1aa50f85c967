"""Issue 29: a sharded run on object storage, written and read back through a real S3 API server.

moto's server mode (``moto_server``, from PyPI) listens on loopback; the tracekit processes reach it
through the usual AWS environment (``AWS_ENDPOINT_URL``, keys). The real 2-rank H200 traces are
ingested to ``s3://bucket/run/`` (in this process's executor, and through a Dask LocalCluster whose
workers upload their shards), then every command reads the prefix, ``tracekit merge`` makes one
file, and the tables equal the in-process ingest's.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

pytest.importorskip("s3fs", reason="s3:// needs the extra tracekit[s3] (s3fs)")
if shutil.which("moto_server", path=str(Path(sys.executable).parent)) is None and shutil.which("moto_server") is None:
    pytest.skip("no moto_server (pip install 'moto[server]')", allow_module_level=True)

from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"
TRACES = sorted(str(p) for p in SAMPLE.glob("eager-rank-0000*.trace.json.gz"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with a bucket ``tkruns``; yields the environment that reaches it."""
    port = _free_port()
    exe = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")  # noqa: SIM115
    server = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "tk",
           "AWS_SECRET_ACCESS_KEY": "tk", "AWS_DEFAULT_REGION": "us-east-1"}
    try:
        deadline = time.monotonic() + 120  # a last guard: the server answers within seconds
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"moto_server did not start: {Path(log.name).read_text()}") from None
                time.sleep(0.2)  # polling a port that is not open yet: nothing to wait on
        r = subprocess.run([sys.executable, "-c", "import s3fs; s3fs.S3FileSystem().mkdir('tkruns')"], env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        yield env
    finally:
        server.terminate()
        server.wait(30)
        log.close()


def _tk(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


def test_sharded_run_on_s3(tmp_path: Path, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    ref = _tk("ingest", *TRACES, "-o", "local.parquet", "-q", cwd=tmp_path, env=s3)
    assert ref.returncode == 0, ref.stderr
    r = _tk("ingest", *TRACES, "-o", "s3://tkruns/run/", cwd=tmp_path, env=s3)
    assert r.returncode == 0, r.stderr
    assert "wrote 2 rank shard(s) (33870 events) into s3://tkruns/run/" in r.stdout
    listed = subprocess.run([sys.executable, "-c", "import s3fs; print(sorted(s3fs.S3FileSystem().ls('tkruns/run')))"],
                            env=s3, capture_output=True, text=True, timeout=120)
    assert listed.stdout.strip() == "['tkruns/run/rank-00000.parquet', 'tkruns/run/rank-00001.parquet']", listed.stderr
    for cmd in (["info"], ["attribute"], ["ranks"]):
        got = _tk(*cmd, "s3://tkruns/run", cwd=tmp_path, env=s3)
        want = _tk(*cmd, "local.parquet", cwd=tmp_path, env=s3)
        assert got.returncode == want.returncode == 0, (cmd, got.stderr)
        assert got.stdout.replace("s3://tkruns/run", "RUN") == want.stdout.replace("local.parquet", "RUN"), cmd
    m = _tk("merge", "s3://tkruns/run", "-o", "merged.parquet", cwd=tmp_path, env=s3)
    assert m.returncode == 0, m.stderr
    for k, v in s3.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    assert_frame_equal(load_run(tmp_path / "local.parquet").events, load_run(tmp_path / "merged.parquet").events)
    assert_frame_equal(load_run(tmp_path / "local.parquet").events, load_run("s3://tkruns/run").events)


def test_dask_workers_upload_their_shards(tmp_path: Path, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed", reason="Dask is the optional extra tracekit[dask]")
    ref = _tk("ingest", *TRACES, "-o", "local.parquet", "-q", cwd=tmp_path, env=s3)
    assert ref.returncode == 0, ref.stderr
    r = _tk("ingest", *TRACES, "-o", "s3://tkruns/dask/", "--executor", "dask-local:2", cwd=tmp_path, env=s3)
    assert r.returncode == 0, r.stderr
    for k, v in s3.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    a, b = load_run(tmp_path / "local.parquet"), load_run("s3://tkruns/dask")
    assert_frame_equal(a.events, b.events)
    ma, mb = dict(a.manifest), dict(b.manifest)
    for d in (ma, mb):
        d.pop("created_unix_ns")
    assert ma == mb


# ---- capture -o s3://... (issue 29): each rank writes its shard locally, then uploads it in one PUT ----------------

CAPTURE = ["capture", "--device", "cpu", "--warmup", "1", "--after", "0", "--cycles", "2", "--batch-size", "2",
           "--ctx", "32", "--layers", "1", "--world", "2"]


def _shape(run: Any) -> dict[str, Any]:
    """What two captures of the same workload share (their times differ): ranks, each rank's phase instances
    by name, each rank's events by kind."""
    ev = run.events
    phases = (ev.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
              .group_by("rank", "name").len().sort("rank", "name").rows())
    kinds = ev.group_by("rank", "kind").len().sort("rank", "kind").rows()
    return {"ranks": run.ranks, "world": run.manifest["world_size"], "phases": phases, "kinds": kinds,
            "events": ev.height}


def _aws(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for k, v in env.items():
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)


def _objects(env: dict[str, str], prefix: str) -> list[str]:
    """The objects of the bucket whose key starts with ``prefix`` (bucket/key...)."""
    code = f"import json, s3fs; print(json.dumps(sorted(s3fs.S3FileSystem().find({prefix.split('/')[0]!r}))))"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    return [o for o in json.loads(got.stdout) if o.startswith(prefix)]


def test_capture_to_s3_prefix_and_object(tmp_path: Path, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    env = {**s3, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    ref = _tk(*CAPTURE, "-o", "local.parquet", cwd=tmp_path, env=env)
    assert ref.returncode == 0, ref.stderr
    r = _tk(*CAPTURE, "-o", "s3://tkruns/cap/", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert "wrote s3://tkruns/cap/ (" in r.stdout and "the run stays sharded under s3://tkruns/cap/" in r.stderr
    assert _objects(s3, "tkruns/cap/") == ["tkruns/cap/rank-00000.parquet", "tkruns/cap/rank-00001.parquet"]
    one = _tk(*CAPTURE, "-o", "s3://tkruns/cap1.parquet", cwd=tmp_path, env=env)
    assert one.returncode == 0, one.stderr
    assert "wrote s3://tkruns/cap1.parquet (" in one.stdout
    # merged into the one object; the shards under cap1.parquet.d/ are gone once merged
    assert _objects(s3, "tkruns/cap1") == ["tkruns/cap1.parquet"]
    assert list((tmp_path / "tmp").glob("tracekit-capture-*")) == []  # the local temp directories are removed
    want = _shape(load_run(tmp_path / "local.parquet"))
    for url in ("s3://tkruns/cap/", "s3://tkruns/cap1.parquet"):
        info = _tk("info", url, cwd=tmp_path, env=env)
        assert info.returncode == 0, (url, info.stderr)
        assert f"world size 2 · ranks present 0-1 · {want['events']:,} events" in info.stdout, (url, info.stdout)
        attr = _tk("attribute", url, cwd=tmp_path, env=env)
        assert attr.returncode == 0, (url, attr.stderr)
        assert "verify: host time" in attr.stdout and "allreduce" in attr.stdout, (url, attr.stdout)
    _aws(monkeypatch, s3)
    assert want["ranks"] == [0, 1] and want["phases"]
    prefix = load_run("s3://tkruns/cap/")
    assert _shape(prefix) == want and prefix.manifest["captured_ranks"] == [0, 1]
    assert prefix.manifest["launcher"] and "missing_ranks" not in prefix.manifest
    merged = load_run("s3://tkruns/cap1.parquet")
    assert _shape(merged) == want and merged.manifest["captured_ranks"] == [0, 1]
    assert "missing_ranks" not in merged.manifest


def test_capture_a_rank_whose_upload_fails(tmp_path: Path, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 reaches no endpoint (its environment only): its shard is lost, named with its URL; rank 0's is whole."""
    pytest.importorskip("torch")
    from tracekit.collectors.capture import CaptureConfig, run_capture
    from tracekit.collectors.workload.config import make_config

    _aws(monkeypatch, s3)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    cc = CaptureConfig(out="s3://tkruns/half/", world=2, cycles=2, warmup=1, after=0, device="cpu", timeout_s=120,
                       workload=make_config("tiny", batch_size=2, ctx_start=32),
                       rank_env={1: {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port()}"}})
    lines: list[str] = []
    res = run_capture(cc, progress=lines.append)
    assert res.out == "s3://tkruns/half/" and sorted(res.missing) == ["1"]
    why = res.missing["1"]
    assert why.startswith("failed: upload of its shard to s3://tkruns/half/rank-00001.parquet failed ("), why
    assert any(ln.startswith("rank 1: failed: upload of its shard to s3://tkruns/half/rank-00001.parquet") for ln in lines)
    # the logs (every rank's, as a local capture keeps them) uploaded by the launcher beside the shards
    assert _objects(s3, "tkruns/half/") == ["tkruns/half/rank-00000.log", "tkruns/half/rank-00000.parquet",
                                           "tkruns/half/rank-00001.log"]
    run = load_run("s3://tkruns/half")
    # the capture's run fields ride in rank 0's shard (uploaded again): the prefix says why rank 1 is missing
    assert run.ranks == [0] and run.manifest["captured_ranks"] == [0, 1] and run.manifest["missing_ranks"] == {"1": why}
    from tracekit.shard_merge import shard_missing

    assert shard_missing("s3://tkruns/half", run.manifest) == {
        "1": f"{why} (its log: s3://tkruns/half/rank-00001.log)"}
    info = _tk("info", "s3://tkruns/half/", cwd=tmp_path, env=s3)
    assert info.returncode == 0 and "missing rank 1: failed: upload of its shard" in info.stdout, info.stderr
    assert list(tmp_path.glob("tracekit-capture-*")) == []


@pytest.mark.parametrize("where", ["bucket", "endpoint"])
def test_capture_to_unreachable_storage(tmp_path: Path, s3: dict[str, str], where: str) -> None:
    pytest.importorskip("torch")
    env = {**s3, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    url = "s3://no-such-bucket/run/" if where == "bucket" else "s3://tkruns/run9/"
    if where == "endpoint":
        env["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{_free_port()}"
    r = _tk(*CAPTURE, "-o", url, cwd=tmp_path, env=env)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tracekit: error: {url}: cannot write under this prefix ("), lines
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert list((tmp_path / "tmp").glob("tracekit-capture-*")) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]  # nothing written here either


def test_two_nodes_capture_through_s3(tmp_path: Path, s3: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launchers (node 0 and node 1, one rank each, on loopback) share nothing but the prefix: each uploads
    its shard and node files under s3://tkruns/mn.parquet.d/, node 0 waits for node 1's end file there and merges."""
    pytest.importorskip("torch")
    small = [*CAPTURE[:-2], "--world", "2", "--nnodes", "2", "--master", f"127.0.0.1:{_free_port()}"]
    url = "s3://tkruns/mn.parquet"
    nodes = [subprocess.Popen([sys.executable, "-m", "tracekit", *small, "--node-rank", str(i), "-o", url],
                              cwd=tmp_path, env=s3, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in (1, 0)]
    (_out1, err1), (out0, err0) = (p.communicate(timeout=600) for p in nodes)
    assert nodes[0].returncode == 0, err1
    assert nodes[1].returncode == 0, err0
    assert "node 1: 1 shard(s) written to s3://tkruns/mn.parquet.d/; node 0 merges them into s3://tkruns/mn.parquet" in err1
    assert f"wrote {url} (" in out0
    assert _objects(s3, "tkruns/mn.") == ["tkruns/mn.parquet"]  # shards and node files removed once merged
    _aws(monkeypatch, s3)
    run = load_run(url)
    assert run.ranks == [0, 1] and sorted(run.manifest["nodes"]) == ["0", "1"]
    assert "missing_ranks" not in run.manifest
