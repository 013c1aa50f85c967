"""Live capture against a local server process speaking SGLang's HTTP schema (tests/sglang_server.py),
whose ranks write real CPU-profiler traces with SGLang's file and span names."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

pytest.importorskip("torch")

import sglang_shapes as S

from tracekit.analyzers.phase_rows import phase_instances
from tracekit.collectors.sglang.live import LoadConfig, run_live_capture
from tracekit.errors import TracekitError
from tracekit.store import load_run

HERE = Path(__file__).parent
LOAD = LoadConfig(requests=40, input_len=16, output_len=8, concurrency=2)


class Server:
    def __init__(self, tmp: Path, *flags: str) -> None:
        self.manifests = tmp / "manifests"
        port_file = tmp / f"port-{time.monotonic_ns()}"
        env = dict(os.environ, TRACEKIT_SGLANG_DIR=str(self.manifests), NCCL_PROTO="Simple",
                   PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, str(HERE / "sglang_server.py"), str(port_file), *flags], env=env)
        deadline = time.monotonic() + 180  # a deadline: torch imports take long on a loaded machine
        while not (port_file.exists() and port_file.read_text()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("test server did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # a loaded machine: do not leave it behind
            self.proc.kill()
            self.proc.wait(30)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Server]:
    with Server(tmp_path, *getattr(request, "param", ("--world", "2", "--style", "0.5.23"))) as srv:
        yield srv


def test_capture_all_ranks_with_facts_and_manifests(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "run.parquet"
    res = run_live_capture(server.url, out, load=LOAD, num_steps=3, manifest_dir=server.manifests, timeout_s=120)
    assert res.path == out and res.ranks == [0, 1] and res.notes == []
    assert res.load.ok >= 1 and res.load.failed == 0
    run = load_run(out)
    assert run.ranks == [0, 1]
    inst = phase_instances(run.events)
    for rank in (0, 1):
        v = inst.filter((pl.col("rank") == rank) & (pl.col("phase") == "verify")).sort("cycle")
        assert v.get_column("cycle").to_list() == [0, 1, 2]
        assert v.get_column("batch_size").to_list() == [4, 4, 4]
        assert v.get_column("graphed").to_list() == [True, True, True]
        want = [sum(S.accepted(c, 4, 3)) / 4 for c in range(3)]
        assert v.get_column("accept_len").to_list() == pytest.approx(want, abs=1e-4)
        phases = inst.filter(pl.col("rank") == rank).get_column("phase").value_counts()
        counts = dict(zip(phases.get_column("phase").to_list(), phases.get_column("count").to_list(), strict=True))
        # SGLang 0.5.23's own `draft`/`draft_extend` spans join tracekit's same-phase ranges;
        # its `step[DRAFT bs=4]` steps inside them open no instance of their own
        assert counts == {"draft": 3, "verify": 3, "draft_extend": 4, "prefill": 1}
    man = run.manifest
    assert man["capture"]["mode"] == "sglang-live" and man["capture"]["num_steps"] == 3
    assert man["capture"]["server_args"]["speculative_num_draft_tokens"] == 4
    for r in ("0", "1"):
        env = man["ranks"][r]["env"]
        assert env["NCCL_PROTO"] == "Simple"  # what the rank process saw
        assert man["ranks"][r]["speculative"] == {"steps": 3, "topk": 1, "draft_tokens": 4}
        assert man["ranks"][r]["entry"] == "test-server"
    traces = sorted(p.name for p in res.trace_dir.iterdir())
    assert len(traces) == 2 and all(n.endswith((f"-TP-{i}.trace.json.gz",)) for n, i in zip(traces, (0, 1), strict=True))


@pytest.mark.parametrize("server", [("--world", "1", "--style", "0.5.9", "--old-info")], indirect=True)
def test_v1_server_with_old_info_route(server: Server, tmp_path: Path) -> None:
    res = run_live_capture(server.url, tmp_path / "r.parquet", load=LOAD, num_steps=2, manifest_dir=server.manifests, timeout_s=120)
    inst = phase_instances(load_run(res.path).events)
    v = inst.filter(pl.col("phase") == "verify").sort("cycle")
    assert v.get_column("cycle").to_list() == [0, 1]
    assert v.get_column("accept_len").null_count() == 0


def test_unreachable_server(tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match="unreachable"):
        run_live_capture("http://127.0.0.1:9", tmp_path / "r.parquet", load=LOAD)


@pytest.mark.parametrize("server", [("--world", "1", "--style", "0.5.23", "--no-hooks")], indirect=True)
def test_server_without_hooks(server: Server, tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match="without tracekit hooks"):
        run_live_capture(server.url, tmp_path / "a.parquet", load=LOAD, num_steps=2, manifest_dir=server.manifests,
                         trace_dir=tmp_path / "ta", timeout_s=120)
    # accepted on request: SGLang's own spans still give phases (no facts beyond bs).
    # A second server: like SGLang, the first refuses a new window until its ranks are done.
    second = Server(tmp_path, "--world", "1", "--style", "0.5.23", "--no-hooks")
    try:
        res = run_live_capture(second.url, tmp_path / "b.parquet", load=LOAD, num_steps=2, manifest_dir=second.manifests,
                               trace_dir=tmp_path / "tb", timeout_s=120, require_hooks=False)
    finally:
        second.close()
    inst = phase_instances(load_run(res.path).events)
    v = inst.filter(pl.col("phase") == "verify")
    assert v.height == 2 and v.get_column("batch_size").to_list() == [4, 4]
    assert v.get_column("accept_len").null_count() == 2  # SGLang's spans carry no accept length
    assert res.notes == [f"rank 0: no tracekit rank manifest in {second.manifests}"]


@pytest.mark.parametrize("server", [("--world", "1", "--style", "0.5.23", "--drop-rank", "0")], indirect=True)
def test_rank_file_never_appears(server: Server, tmp_path: Path) -> None:
    with pytest.raises(TracekitError, match=r"r-sglang-traces: trace file never appeared for rank 0 after 3s$"):
        run_live_capture(server.url, tmp_path / "r.parquet", load=LOAD, num_steps=2, manifest_dir=server.manifests, timeout_s=3)


def test_capture_command_with_sglang_url(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tracekit capture --ranks all --sglang URL` is the live capture, through the main command."""
    from click.testing import CliRunner

    from tracekit.cli import cli

    monkeypatch.setenv("TRACEKIT_SGLANG_DIR", str(server.manifests))
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["capture", "--ranks", "all", "--sglang", server.url, "--cycles", "2",
                                   "--requests", "20", "--input-len", "16", "--output-len", "8",
                                   "--concurrency", "2", "--timeout", "120", "-o", str(out)])
    assert res.exit_code == 0, res.output
    run = load_run(out)
    assert run.ranks == [0, 1] and run.manifest["capture"]["num_steps"] == 2
    bad = CliRunner().invoke(cli, ["capture", "--ranks", "0", "--sglang", server.url, "-o", str(out)])
    assert bad.exit_code == 2 and "--ranks all" in bad.output
