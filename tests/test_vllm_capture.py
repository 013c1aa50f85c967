"""``tracekit capture --engine vllm`` on this CPU box: vLLM's offline engine, TP 2 through its own
executor and worker processes, tracekit's hooks inside the workers.

Every run starts vLLM (90-300 s on a loaded 2-core box), so each configuration runs once per
module (``captured``) and every test reads the runs it needs. vLLM lives in its own venv over the
test environment (tests/vllm_env.py: built once, cached; skipped with the reason when it cannot
be built). The runs: n-gram speculation (real acceptance on the greedy random target), EAGLE-3
(llama-tiny + random head), MTP (deepseek-v3-tiny: MLA, routed experts), and none (the baseline).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
import vllm_env

from tracekit.store import load_run

pytestmark = pytest.mark.vllm

RUNS: dict[str, list[str]] = {
    "ngram": ["--spec", "ngram"],
    "eagle3": ["--spec", "eagle3"],
    "mtp": ["--model", "deepseek-v3-tiny", "--spec", "mtp", "--num-spec-tokens", "1"],
    "none": ["--spec", "none"],
}


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    python = vllm_env.python()
    d = tmp_path_factory.mktemp("vllm")
    done: dict[str, Path] = {}

    def run(name: str) -> Path:
        if name not in done:
            out = d / f"{name}.parquet"
            cmd = [str(python), "-m", "tracekit", "capture", "--engine", "vllm", "--device", "cpu", "--world", "2",
                   "--cycles", "4", "--warmup", "2", "--after", "2", *RUNS[name], "-o", str(out)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1500)
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout}\n{proc.stderr}"
            done[name] = out
        return done[name]

    return run


def _phases(path: Path) -> dict[int, set[str]]:
    """The phases each rank's events belong to."""
    ev = load_run(path).events.filter(pl.col("phase").is_not_null())
    return {int(r): set(g["phase"].to_list()) for (r,), g in ev.group_by("rank")}


def _tracekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", ["eagle3", "mtp"])
def test_draft_and_verify_on_both_ranks(captured: Callable[[str], Path], name: str) -> None:
    path = captured(name)
    run = load_run(path)
    assert run.ranks == [0, 1] and run.manifest["capture"]["workload"] == "vllm"
    for r in ("0", "1"):
        sec = run.manifest["ranks"][r]
        calls = sec["workload"]["window_hooks"]["calls"]
        assert calls.get("draft", 0) >= 1 and calls.get("verify", 0) >= 1, calls
        assert sec["env"]["TRACEKIT_VLLM"] == "1"  # the environment the vLLM worker itself saw
        assert sec["workload"]["hooks_installed_by"] == "plugin"  # vllm.general_plugins, in the worker
        assert sec["pid"] != run.manifest["ranks"]["0" if r == "1" else "1"]["pid"]  # two worker processes
    res = _tracekit("attribute", str(path), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    seen = {(p["phase"], p["rank"]) for p in doc["phases"]}
    assert {("draft", 0), ("draft", 1), ("verify", 0), ("verify", 1)} <= seen


def test_allreduce_is_vllms_own_in_the_allreduce_bucket(captured: Callable[[str], Path]) -> None:
    res = _tracekit("attribute", str(captured("ngram")), "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["mode"] == "host"
    verify = [p for p in doc["phases"] if p["phase"] == "verify" and p["rank"] in (0, 1)]
    assert len(verify) == 2
    for p in verify:
        assert p["buckets_ns"].get("allreduce", 0) > 0, p["buckets_ns"]


def test_accept_lengths_equal_vllms_spec_decode_metrics(captured: Callable[[str], Path]) -> None:
    run = load_run(captured("ngram"))
    for r in ("0", "1"):
        wl = run.manifest["ranks"][r]["workload"]
        ours, theirs = wl["window_hooks"]["counts"], wl["engine_metrics"]["window"]
        assert ours == theirs, (ours, theirs)  # vllm:spec_decode_* over the same steps
        assert ours["num_accepted_tokens"] > 0 and ours["num_drafts"] > 0
    ev = run.events
    acc = ev.filter(pl.col("accept_len").is_not_null() & pl.col("rank").eq(0))
    assert acc.height >= 1 and float(acc["accept_len"].max()) > 0


def test_spec_gap_and_report_work(captured: Callable[[str], Path], tmp_path: Path) -> None:
    spec_run, base = str(captured("ngram")), str(captured("none"))
    assert "decode" in set().union(*_phases(Path(base)).values())
    for args in (["spec", spec_run], ["spec", spec_run, "--baseline", base],
                 ["gap", spec_run, "--a", "verify", "--b", "decode", "--b-run", base],
                 ["report", spec_run, "-o", str(tmp_path / "r.html")]):
        res = _tracekit(*args)
        assert res.returncode == 0, f"{args}: {res.stdout}\n{res.stderr}"
    assert (tmp_path / "r.html").stat().st_size > 10_000


PROFILER_SCRIPT = """
import sys
from vllm import LLM, SamplingParams
from tracekit.collectors.vllm.presets import LLAMA_TINY
import json, os, pathlib
d = pathlib.Path(sys.argv[1]); (d / "m").mkdir(parents=True); (d / "m" / "config.json").write_text(json.dumps(LLAMA_TINY))
if __name__ == "__main__":
    llm = LLM(model=str(d / "m"), load_format="dummy", skip_tokenizer_init=True, dtype="bfloat16", max_model_len=256,
              enforce_eager=True, max_num_seqs=2, gpu_memory_utilization=0.05, seed=1,
              speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3,
                                  "prompt_lookup_min": 1},
              profiler_config={"profiler": "torch", "torch_profiler_dir": str(d / "traces")})
    llm.start_profile()
    llm.generate([{"prompt_token_ids": list(range(5, 37))}] * 2,
                 SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True, detokenize=False))
    llm.stop_profile()
"""


def test_a_trace_of_vllms_own_profiler_ingests_with_its_phases(tmp_path: Path) -> None:
    python = vllm_env.python()
    script = tmp_path / "prof.py"
    script.write_text(PROFILER_SCRIPT)
    proc = subprocess.run([str(python), str(script), str(tmp_path)], capture_output=True, text=True, timeout=1500,
                          env={**__import__("os").environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    traces = sorted((tmp_path / "traces").rglob("*.json*"))
    assert traces, f"vLLM wrote no trace in {tmp_path / 'traces'}"
    out = tmp_path / "own.parquet"
    res = _tracekit("ingest", str(tmp_path / "traces"), "-o", str(out))
    assert res.returncode == 0, res.stderr
    phases = set().union(*_phases(out).values())
    assert {"prefill", "verify"} <= phases, phases
