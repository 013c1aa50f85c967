"""info / spec / diff on log runs, against numbers worked out by hand from the samples' counters
(samples/logs/README.md) and the seed's quoted lines."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.analyzers.logs.diff import log_diff
from tracekit.analyzers.logs.spec import log_spec
from tracekit.cli.common import cli
from tracekit.documents import document_type
from tracekit.logs.parse import parse_logs
from tracekit.logs.patterns import compile_pattern

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "logs"
SEED = "Target verify: {verify_ms:f} ms/cyc"


def _run(tmp_path: Path, name: str, lines: list[str], patterns: tuple[str, ...] = ()) -> tuple[pl.DataFrame, dict[str, object]]:
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join(lines) + "\n")
    res = parse_logs([str(log)], tmp_path / f"{name}.parquet", [compile_pattern(p) for p in patterns])
    return pl.read_parquet(res.path), res.manifest


def _sglang() -> list[str]:
    return (SAMPLES / "sglang-0.5.9.log").read_text().splitlines()


def _seed() -> list[str]:
    return (SAMPLES / "seed-target-verify.log").read_text().splitlines()


def test_spec_from_log_and_user_pattern(tmp_path: Path) -> None:
    rows, man = _run(tmp_path, "a", _sglang() + _seed(), (SEED,))
    rep = log_spec(rows, man, "a", baseline_tps=82.0, target_tps=150.0)
    # accept lens of the six lines: 2.75 2.74 2.62 2.50 2.44 2.34 -> nearest-rank median = 3rd smallest
    assert rep.accept_length.n == 6 and rep.accept_length.median == pytest.approx(2.50)
    assert rep.draft_tokens_per_verify == 3
    (verify,) = [t for t in rep.timings if t.phase == "verify"]
    assert verify.ns.median == 19_980_000 and verify.source == "engine log (pattern field verify_ms)"
    e = rep.economics
    assert e is not None and rep.timing_source == "engine log"
    assert e.break_even_tokens == pytest.approx(19_980_000 / (1e9 / 82))
    assert e.needed_tokens == pytest.approx(150 * 0.01998)


def test_info_graph_use_of_a_vllm_log(tmp_path: Path) -> None:
    """vllm-v1.log: two fallback warnings set PIECEWISE; the --cudagraph-metrics table counts 72 graphed
    (FULL) batches and 12 eager (NONE) ones (make_vllm.py fed 30 + 24 + 18 and 12)."""
    from tracekit.analyzers.logs.info import log_info

    res = parse_logs([str(SAMPLES / "vllm-v1.log")], tmp_path / "v.parquet", [])
    (f,) = log_info(pl.read_parquet(res.path), res.manifest, "v").files
    assert f.graph_modes == {"PIECEWISE": 2} and f.graph_batches == {"FULL": 72, "NONE": 12}
    assert f.engine_version == "vllm 0.32.0" and f.ranks["dp"] == [0]


def test_spec_without_times_says_so(tmp_path: Path) -> None:
    rows, man = _run(tmp_path, "a", _sglang())
    rep = log_spec(rows, man, "a")
    assert rep.economics is None and any("no verify time" in n for n in rep.notes)


def test_diff_matches_bins_and_names_the_rest(tmp_path: Path) -> None:
    lines = _sglang()
    old, mo = _run(tmp_path, "old", lines[:4])
    new, mn = _run(tmp_path, "new", lines[3:])
    rep = log_diff(old, mo, new, mn, "old", "new")
    assert not rep.no_common_bin
    (common,) = rep.common  # line 4 (8 reqs, 6400 tokens, graph) is in both
    assert (common.bin.batch, common.bin.graph) == (8, True)
    assert common.bin.tokens_lo <= 800 < common.bin.tokens_hi
    assert {b.batch for b, _n in rep.only_old} == {1, 4} and {b.batch for b, _n in rep.only_new} == {8, 16}


def test_diff_token_range_only_gives_no_common_bin(tmp_path: Path) -> None:
    """Lines 2 and 3 ran at the same batch (4) and graph use; only the tokens per request differ
    (3121 / 4 vs 5200 / 4): no comparison."""
    lines = _sglang()
    old, mo = _run(tmp_path, "old", [lines[1]])
    new, mn = _run(tmp_path, "new", [lines[2]])
    rep = log_diff(old, mo, new, mn, "old", "new")
    assert rep.no_common_bin and rep.common == ()
    assert len(rep.only_old) == len(rep.only_new) == 1


def test_diff_user_pattern_times_per_bin(tmp_path: Path) -> None:
    lines, seed = _sglang(), _seed()
    old, mo = _run(tmp_path, "old", [lines[1], *seed[:2]], (SEED,))
    new, mn = _run(tmp_path, "new", [lines[1], *seed[2:]], (SEED,))
    rep = log_diff(old, mo, new, mn, "old", "new")
    (common,) = rep.common
    verify = next(m for m in common.metrics if m.metric == "verify_ms")
    assert verify.old.n == 2 and verify.new.n == 3
    assert verify.old.median == pytest.approx(19.98) and verify.new.median == pytest.approx(19.98)


@pytest.mark.parametrize(("args", "doc"), [
    (["info", "{log}", "--json"], "log-info"),
    (["spec", "{log}", "--json", "--baseline-tps", "82"], "log-spec"),
    (["diff", "{log}", "{log}", "--json"], "log-diff"),
])
def test_cli_documents_on_log_files(args: list[str], doc: str) -> None:
    log = str(SAMPLES / "sglang-0.5.9.log")
    res = CliRunner().invoke(cli, [a.replace("{log}", log) for a in args])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["document"] == doc and document_type(d).problems(d) == []


def test_diff_log_against_captured_run() -> None:
    """The 0.5.9 sample's batch-16 eager interval (20000 / 16 tokens per request) and the real 2x H200
    capture's verify instances (batch 16, seq_len ~1040, eager) share a 1000-token bin: accept length
    compared (the run's accept_len + 1), verify times on their own clocks, not subtracted."""
    log = str(SAMPLES / "sglang-0.5.9.log")
    run = str(Path(__file__).resolve().parent.parent / "samples" / "h200x2-mainjob" / "eager.parquet")
    res = CliRunner().invoke(cli, ["diff", log, run, "--tokens-width", "1000", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["document"] == "log-trace-diff" and document_type(doc).problems(doc) == []
    (common,) = doc["common"]
    assert common["bin"] == {"batch": 16, "tokens_lo": 1000, "tokens_hi": 2000, "graph": False}
    assert common["accept_length"]["old"]["median"] == pytest.approx(2.34)  # the log is the old side
    assert common["n_trace"] == common["trace_verify_ns"]["n"] and common["log_verify_ns"] is None
    assert doc["trace_clock"].startswith("profiled window") and "delta" not in common["trace_verify_ns"]
    res = CliRunner().invoke(cli, ["diff", run, log, "--json"])  # default bins: 1033-1042 vs 1250 apart
    assert res.exit_code == 0 and json.loads(res.stdout)["no_common_bin"] is True


def test_spec_from_metrics_device_timer(tmp_path: Path) -> None:
    files = [str(SAMPLES / f"sglang-metrics-{i}.prom") for i in (1, 2)]
    res = parse_logs(files, tmp_path / "m.parquet", [])
    rep = log_spec(pl.read_parquet(res.path), res.manifest, "m", baseline_tps=60.0)
    assert rep.timing_source == "engine metrics"
    verify = next(t for t in rep.timings if t.phase == "verify")
    draft = next(t for t in rep.timings if t.phase == "draft")
    assert verify.ns.median == 20_250_000 and draft.ns.median == 5_000_000  # 8.1 s / 400, (1.2 + 0.8) s / 400
    assert rep.economics is not None and rep.economics.cycle_ns == 25_250_000
    assert rep.economics.break_even_tokens == pytest.approx(25_250_000 / (1e9 / 60))


def test_report_of_two_logs(tmp_path: Path) -> None:
    pytest.importorskip("plotly")
    out = tmp_path / "r.html"
    lines = _sglang()
    (tmp_path / "old.log").write_text("\n".join(lines[:4]) + "\n")
    (tmp_path / "new.log").write_text("\n".join(lines[3:6]) + "\n")
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "old.log"), "--b-run", str(tmp_path / "new.log"),
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    for key in ("log-per_req_tps", "log-gen_throughput", "log-accept_length"):
        assert f'id="{key}"' in html and f'id="{key}-spec"' in html
    assert '"document": "log-diff"' in html and '"document": "log-info"' in html
    assert "only in old" in html  # the diff section names the bins of one log only


def test_report_log_against_trace_run_is_a_usage_error(tmp_path: Path) -> None:
    run = str(Path(__file__).resolve().parent.parent / "samples" / "h200x2-mainjob" / "eager.parquet")
    res = CliRunner().invoke(cli, ["report", str(SAMPLES / "sglang-0.5.9.log"), "--b-run", run,
                                   "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 2 and not (tmp_path / "r.html").exists()


def test_ingest_takes_log_files(tmp_path: Path) -> None:
    out = tmp_path / "r.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "vllm-v1.log"), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    from tracekit.logs.run import read_log_manifest

    man = read_log_manifest(out)
    assert man is not None and man["sources"][0]["matched"]["vllm.stats"] == 5
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": []}')
    res = CliRunner().invoke(cli, ["ingest", str(SAMPLES / "vllm-v1.log"), str(trace), "-o", str(tmp_path / "x.parquet")])
    assert res.exit_code == 2 and "cannot be ingested together" in res.output


def test_gap_on_logs_engine_clock(tmp_path: Path) -> None:
    """A from one log, B from another (the seed's old log against a newer one), then verify vs
    draft from the metrics' device timer."""
    seed = _seed()
    (tmp_path / "old.log").write_text("\n".join(seed[:2]) + "\n")  # 20.00, 19.98
    (tmp_path / "new.log").write_text("\n".join(seed[2:]) + "\n")  # 19.98, 19.98, 19.96
    res = CliRunner().invoke(cli, ["gap", str(tmp_path / "new.log"), "--a", "verify", "--b", "verify", "--b-run",
                                   str(tmp_path / "old.log"), "--pattern", SEED, "--stat", "mean", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["document"] == "log-gap" and document_type(doc).problems(doc) == []
    assert doc["timing_source"] == "engine log"
    assert doc["delta_ns"] == pytest.approx((19.98 + 19.98 + 19.96) / 3 * 1e6 - (20.00 + 19.98) / 2 * 1e6)
    files = [str(SAMPLES / f"sglang-metrics-{i}.prom") for i in (1, 2)]
    res = parse_logs(files, tmp_path / "m.parquet", [])
    from tracekit.analyzers.logs.gap import log_gap

    rows = pl.read_parquet(res.path)
    rep = log_gap(rows, res.manifest, "m", "verify", rows, res.manifest, "m", "draft")
    assert rep.delta_ns == 20_250_000 - 5_000_000 and rep.timing_source == "engine metrics"


def test_gap_on_a_log_without_times_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["gap", str(SAMPLES / "sglang-0.5.9.log")])
    assert res.exit_code == 1 and "gives no time for 'verify'" in res.output
