"""Issue 29: a sharded run on object storage, written and read back through a real S3 API server.

moto's server mode (``moto_server``, from PyPI) listens on loopback; the tracekit processes reach it
through the usual AWS environment (``AWS_ENDPOINT_URL``, keys). The real 2-rank H200 traces are
ingested to ``s3://bucket/run/`` (in this process's executor, and through a Dask LocalCluster whose
workers upload their shards), then every command reads the prefix, ``tracekit merge`` makes one
file, and the tables equal the in-process ingest's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

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
