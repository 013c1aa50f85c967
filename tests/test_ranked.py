"""Issue 29: ``attribute``, ``ranks`` and ``gap`` rank by rank (``analyzers.ranked``, ``--executor``).

The reports read rank by rank must equal the whole-run path's: the ``--json`` documents and the text,
on a 64-rank set generated at test time by ``bench/scale_gen.py`` from the real 2-rank H200 traces
(ingested as a sharded run through the CLI, merged into one file), on every committed multi-rank
sample run (read rank by rank from the one file), and through a Dask LocalCluster of 2 workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.analyzers import analyses, ranked
from tracekit.analyzers.joins import unphased_gpu
from tracekit.executor import LocalExecutor
from tracekit.render import attribute_doc
from tracekit.render import gap as render_gap
from tracekit.render import ranks as render_ranks
from tracekit.store import load_run, open_ranked

REPO = Path(__file__).resolve().parent.parent
needs_dask = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import distributed"], capture_output=True).returncode != 0,
    reason="Dask is the optional extra tracekit[dask]: not installed")
LL = 20_000


def _tk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def set64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks (bench/scale_gen.py, the graphed source: 402,624 events), a sharded run ``run/`` and the
    same run as one file ``run.parquet``."""
    d = tmp_path_factory.mktemp("set64")
    gen = subprocess.run([sys.executable, str(REPO / "bench" / "scale_gen.py"), str(d), "64", "--source", "graphed"],
                         capture_output=True, text=True, timeout=600)
    assert gen.returncode == 0, gen.stderr
    r = _tk("ingest", "64", "-o", "run/", "-q", cwd=d)
    assert r.returncode == 0, r.stderr
    m = _tk("merge", "run", "-o", "run.parquet", cwd=d)
    assert m.returncode == 0, m.stderr
    return d


COMMANDS = [
    ["attribute"], ["attribute", "--json"], ["attribute", "--by", "cycle", "--json"], ["attribute", "--by", "seq"],
    ["attribute", "--phase", "verify", "--rank", "5", "--json"], ["attribute", "--phase", "draft.*"],
    ["ranks"], ["ranks", "--json", "--min-skew-us", "50"],
    ["gap"], ["gap", "--json", "--by", "rank", "--stat", "mean"], ["gap", "--a", "verify", "--b", "draft", "--rank", "7"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_sharded_64_ranks_equal_the_whole_run(set64: Path, cmd: list[str]) -> None:
    """The shard directory is read rank by rank (the rule), the small one-file run whole: same output."""
    got = _tk(*cmd, "run", cwd=set64)
    want = _tk(*cmd, "run.parquet", cwd=set64)
    assert got.returncode == want.returncode == 0, (got.stderr, want.stderr)
    assert "pass 2 (per-rank tables): rank 63 done, 64/64" in got.stderr  # progress, per rank
    assert "pass 2" not in want.stderr
    assert got.stdout == want.stdout.replace("run.parquet", "run")


def test_large_one_file_run_is_read_rank_by_rank(set64: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule: a one-file run over TRACEKIT_ANALYSIS_WHOLE_MB (default 16 MiB) is read rank by rank, a
    smaller one whole; a shard directory and any executor but local always rank by rank."""
    f = str(set64 / "run.parquet")
    assert (set64 / "run.parquet").stat().st_size < ranked.WHOLE_MAX_MB << 20
    assert ranked.choose(f, "local") is None
    assert ranked.choose(f, "dask-local") is not None
    assert ranked.choose(str(set64 / "run"), "local") is not None
    monkeypatch.setenv("TRACEKIT_ANALYSIS_WHOLE_MB", "0")
    rr = ranked.choose(f, "local")
    assert rr is not None and not rr.sharded and len(rr.ranks) == 64 and rr.rows == 402_624
    monkeypatch.setenv("TRACEKIT_ANALYSIS_WHOLE_MB", "1")  # 1 MiB: the 1.0 MB file is read whole
    assert ranked.choose(f, "local") is None
    got = subprocess.run([sys.executable, "-m", "tracekit", "ranks", "--json", "run.parquet"], cwd=set64,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "TRACEKIT_ANALYSIS_WHOLE_MB": "0"})
    assert got.returncode == 0 and "pass 2 (per-rank tables): rank 63 done, 64/64" in got.stderr
    assert got.stdout == _tk("ranks", "--json", "run.parquet", cwd=set64).stdout


@needs_dask
def test_dask_local_equals_the_whole_run(set64: Path) -> None:
    for cmd in (["ranks", "--json"], ["attribute", "--json"]):  # gap: the same passes (the library test)
        got = _tk(*cmd, "--executor", "dask-local:2", "run", cwd=set64)
        want = _tk(*cmd, "run.parquet", cwd=set64)
        assert got.returncode == want.returncode == 0, got.stderr
        assert "starting executor dask-local:2" in got.stderr
        assert got.stdout == want.stdout.replace("run.parquet", "run"), cmd


def _docs(att: Any, rk: Any, gp: Any, path: str) -> dict[str, str]:
    out = {f"attribute {by}": json.dumps(attribute_doc.document(att, by, path)) for by in ("rank", "cycle", "seq")
           } if att is not None else {}
    out["ranks"] = json.dumps(render_ranks.to_json(rk))
    if gp is not None:
        out["gap"] = json.dumps(render_gap.document(gp, path, path, by_rank=True))
    return out


SAMPLES = sorted(str(p.relative_to(REPO)) for p in (REPO / "samples").rglob("*.parquet")
                 if pl.scan_parquet(p).select(pl.col("rank").n_unique()).collect().item() > 1)


@pytest.mark.parametrize("sample", SAMPLES)
def test_committed_multi_rank_samples_equal_the_whole_run(sample: str) -> None:
    """Each multi-rank sample run read rank by rank from its one file: the same documents, or (host runs:
    attribute / gap) Unsupported, which the CLI answers with the whole-run read."""
    path = str(REPO / sample)
    rr = open_ranked(path)
    assert rr is not None and len(rr.ranks) > 1
    ex = LocalExecutor()
    whole = load_run(path)
    try:
        att, unphased = ranked.attribute(rr, ex, None, None, launch_latency_ns=LL)
        assert unphased == unphased_gpu(whole.events)
        want_att = analyses.attribute(whole.events, whole.manifest, None, None, launch_latency_ns=LL)
    except ranked.Unsupported as why:
        assert "host run" in str(why)
        att = want_att = None
    try:
        gp = ranked.gap(rr, None, ex, launch_latency_ns=LL)
        want_gp = analyses.gap(whole.events, whole.manifest, launch_latency_ns=LL)
    except ranked.Unsupported:
        gp = want_gp = None
    rk = ranked.ranks(rr, ex, min_skew_ns=1000, launch_latency_ns=LL)
    want_rk = analyses.ranks(whole.events, whole.manifest, min_skew_ns=1000, launch_latency_ns=LL)
    assert _docs(att, rk, gp, path) == _docs(want_att, want_rk, want_gp, path)
    assert att is not None or whole.events.filter(pl.col("kind") == "kernel").is_empty()


@pytest.mark.parametrize("sample", SAMPLES)
def test_info_of_committed_samples_rank_by_rank_equals_the_whole_run(sample: str) -> None:
    """``tracekit info``'s tables, time resolution and launch joins of each multi-rank sample read rank
    by rank (``ranked_light.run_info``) equal the whole table's."""
    from tracekit.analyzers.joins import join_problems
    from tracekit.analyzers.ranked_light import run_info
    from tracekit.resolution import time_resolution
    from tracekit.summary import info_document, info_parts

    path = str(REPO / sample)
    rr = open_ranked(path)
    assert rr is not None
    seen: list[str] = []
    got = run_info(rr, LocalExecutor(), None, seen.append)
    assert seen[-1] == f"info: rank {rr.ranks[-1].rank} done, {len(rr.ranks)}/{len(rr.ranks)}"
    whole = load_run(path)
    assert info_document(got.parts, rr.manifest) == info_document(info_parts(whole.events), whole.manifest)
    assert got.coarse == time_resolution(whole.events)
    assert got.joins == join_problems(whole.events)


INFO = [["info"], ["info", "--json"], ["info", "--all-ranks"], ["info", "--ranks", "3-5,60", "--json"]]


@pytest.mark.parametrize("cmd", INFO, ids=[" ".join(c) for c in INFO])
def test_info_of_64_shards_equals_the_whole_run(set64: Path, cmd: list[str]) -> None:
    """``info`` of the shard directory is read rank by rank (progress per rank), the one-file run whole:
    the same output and the same warning lines; the one file read rank by rank too
    (TRACEKIT_ANALYSIS_WHOLE_MB=0) prints the same."""
    got = _tk(*cmd, "run", cwd=set64)
    want = _tk(*cmd, "run.parquet", cwd=set64)
    assert got.returncode == want.returncode == 0, (got.stderr, want.stderr)
    assert "info: rank 63 done, 64/64" in got.stderr and "info: rank" not in want.stderr
    assert got.stdout == want.stdout.replace("run.parquet", "run")

    def warnings(err: str) -> list[str]:
        return [ln for ln in err.splitlines() if ln.startswith("tracekit:")]

    assert warnings(got.stderr) == [ln.replace("run.parquet", "run") for ln in warnings(want.stderr)]
    one = subprocess.run([sys.executable, "-m", "tracekit", *cmd, "run.parquet"], cwd=set64, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "TRACEKIT_ANALYSIS_WHOLE_MB": "0"})
    assert one.returncode == 0 and "info: rank 63 done, 64/64" in one.stderr
    assert one.stdout == want.stdout


@pytest.mark.parametrize("sample", SAMPLES)
def test_spec_of_committed_samples_rank_by_rank_equals_the_whole_run(sample: str) -> None:
    """``spec``'s document of each multi-rank sample from its phase rows and attribute's "% of SOL" read
    rank by rank (``ranked_light.spec_inputs``) equals the whole read's, or the run is read whole
    (``Unsupported``: host runs)."""
    from tracekit.analyzers.ranked_light import spec_inputs
    from tracekit.render import spec as render_spec

    path = str(REPO / sample)
    rr = open_ranked(path)
    assert rr is not None
    whole = load_run(path)
    try:
        rows, sol = spec_inputs(rr, LocalExecutor())
    except ranked.Unsupported as why:
        assert "host run" in str(why) or "phase ranges" in str(why)
        return
    got = render_spec.to_json(analyses.spec(rows, rr.manifest, sol=sol))
    assert got == render_spec.to_json(analyses.spec(whole.events, whole.manifest))


SPEC = [["spec"], ["spec", "--json"], ["spec", "--rank", "5", "--json"], ["spec", "--target-tps", "150"],
        ["spec", "--draft-tokens", "2", "--accept-len", "1.5", "--json"], ["spec", "--baseline-tps", "90", "--json"]]


@pytest.mark.parametrize("cmd", SPEC, ids=[" ".join(c) for c in SPEC])
def test_spec_of_64_shards_equals_the_whole_run(set64: Path, cmd: list[str]) -> None:
    """``spec`` of the shard directory is read rank by rank (progress per rank), the one-file run whole:
    the same output and warning lines (the committed samples with a model config test the floor's pass)."""
    got = _tk(*cmd, "run", cwd=set64)
    want = _tk(*cmd, "run.parquet", cwd=set64)
    assert got.returncode == want.returncode == 0, (got.stderr, want.stderr)
    assert "spec: pass 1 (collectives, phases): rank 63 done, 64/64" in got.stderr and "spec:" not in want.stderr
    assert "pass 2" not in got.stderr  # no model config in the manifest: no floor, attribute's pass 2 not run
    assert got.stdout == want.stdout.replace("run.parquet", "run")
    assert [ln for ln in got.stderr.splitlines() if ln.startswith("tracekit:")] == \
        [ln.replace("run.parquet", "run") for ln in want.stderr.splitlines() if ln.startswith("tracekit:")]


def test_spec_with_a_baseline_run_rank_by_rank(set64: Path) -> None:
    """``spec --baseline``: both runs rank by rank (shards) or both whole (small files): the same answer."""
    got = _tk("spec", "--json", "run", "--baseline", "run", cwd=set64)
    want = _tk("spec", "--json", "run.parquet", "--baseline", "run.parquet", cwd=set64)
    assert got.returncode == want.returncode, (got.stderr, want.stderr)
    assert "spec (baseline): pass 1 (collectives, phases): rank 63 done, 64/64" in got.stderr
    assert got.stdout == want.stdout.replace("run.parquet", "run")
    assert [ln for ln in got.stderr.splitlines() if ln.startswith("tracekit:")] == \
        [ln.replace("run.parquet", "run") for ln in want.stderr.splitlines() if ln.startswith("tracekit:")]


def test_gap_against_a_second_run_rank_by_rank(set64: Path) -> None:
    """``gap --b-run``: both runs read rank by rank, B's instances from B."""
    a = str(set64 / "run")
    b = str(REPO / "samples" / "h200x2-builtin" / "graphed.parquet")
    ex = LocalExecutor()
    ra, rb = open_ranked(a), open_ranked(b)
    assert ra is not None and rb is not None
    got = ranked.gap(ra, rb, ex, a="verify", b="decode", launch_latency_ns=LL)
    wa, wb = load_run(a), load_run(b)
    want = analyses.gap(wa.events, wa.manifest, wb.events, wb.manifest, a="verify", b="decode", launch_latency_ns=LL)
    assert json.dumps(render_gap.document(got, a, b)) == json.dumps(render_gap.document(want, a, b))


def test_unsupported_selections_fall_back_to_the_whole_run(set64: Path) -> None:
    """A --phase that matches no phase (ranges by name) is read whole: the CLI says so with an executor,
    and the answer is the whole-run path's (here its error line)."""
    rr = open_ranked(str(set64 / "run"))
    assert rr is not None
    with pytest.raises(ranked.Unsupported, match="names no phase"):
        ranked.attribute(rr, LocalExecutor(), "nccl.*", None, launch_latency_ns=LL)
    got = _tk("attribute", "--phase", "no_such_range", "--executor", "local", "run", cwd=set64)
    want = _tk("attribute", "--phase", "no_such_range", "run.parquet", cwd=set64)
    assert got.returncode == want.returncode == 1
    assert got.stderr.splitlines()[-1] == want.stderr.splitlines()[-1].replace("run.parquet", "run")


def test_a_shard_replaced_mid_read_is_one_error_line(set64: Path, tmp_path: Path) -> None:
    """A rank's file written again after the run was opened: RunError naming file and rank, no mixed read."""
    import shutil

    d = tmp_path / "run"
    shutil.copytree(set64 / "run", d)
    rr = open_ranked(str(d))
    assert rr is not None
    victim = d / "rank-00003.parquet"
    data = victim.read_bytes()
    victim.unlink()
    victim.write_bytes(data)  # a new file (new inode) at the path
    from tracekit.errors import RunError

    with pytest.raises(RunError, match="changed while the run was read") as err:
        ranked.ranks(rr, LocalExecutor(), min_skew_ns=1000, launch_latency_ns=LL)
    assert err.value.rank == 3 and err.value.path == str(victim)


def test_opening_shards_holds_two_manifests_at_most(set64: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Shards written before ``store.CLOCK_BY_RANK`` repeat the run's clock maps (n entries each): holding
    all n manifests made the driver's footprint grow as n squared (~290 MB at 1,024 ranks). ``open_ranked``
    folds them one at a time: when a footer is read, at most one earlier shard manifest is alive; the
    manifest is the merge of all the shards', its clock maps an entry per rank."""
    import weakref

    from tracekit import store

    class Tracked(dict[str, Any]):
        def __hash__(self) -> int:  # type: ignore[override]  # identity: a WeakSet member
            return id(self)

    alive: weakref.WeakSet[Tracked] = weakref.WeakSet()
    most = 0
    real = store._footer

    def footer(path: str) -> Any:
        nonlocal most
        most = max(most, len(alive))
        man, n, ident = real(path)
        t = Tracked(man)
        alive.add(t)
        return t, n, ident

    monkeypatch.setattr(store, "_footer", footer)
    rr = open_ranked(str(set64 / "run"))
    assert rr is not None and len(rr.ranks) == 64
    assert most <= 1, f"{most} shard manifests alive while a footer was read"
    shards = sorted((set64 / "run").glob("rank-*.parquet"))
    monkeypatch.setattr(store, "_footer", real)
    assert rr.manifest == store.merge_manifests([real(str(f))[0] for f in shards])
    assert len(rr.manifest["clock"]["offsets_ns"]) == 64


PAIR = [str(REPO / "samples" / "h200x2-builtin" / f"{m}.parquet") for m in ("graphed", "eager")]


@pytest.mark.parametrize("args", [["--json"], ["--phase", "all"], ["--phase", "all", "--stat", "mean", "--json"]])
def test_diff_rank_by_rank_equals_the_whole_run(args: list[str], tmp_path: Path) -> None:
    """``diff`` of the real 2x H200 graphed -> eager pair: the files read rank by rank
    (TRACEKIT_ANALYSIS_WHOLE_MB=0) and whole (the default at their size) print the same."""
    env = {**os.environ, "TRACEKIT_ANALYSIS_WHOLE_MB": "0"}
    cmd = [sys.executable, "-m", "tracekit", "diff", *args, *PAIR]
    got = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    want = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert got.returncode == want.returncode == 0, got.stderr
    assert "diff (new): pass 2 (per-rank tables): rank 1 done, 2/2" in got.stderr
    assert got.stdout == want.stdout


def test_diff_of_64_ranks_against_2(set64: Path) -> None:
    """The library: the 64-rank set (graphed source) against the 2-rank eager sample, both read rank by rank."""
    from tracekit.render import diff as render_diff

    a, b = str(set64 / "run"), PAIR[1]
    ra, rb = open_ranked(a), open_ranked(b)
    assert ra is not None and rb is not None
    got = ranked.diff(ra, rb, LocalExecutor(), phase=None)
    wa, wb = load_run(a), load_run(b)
    want = analyses.diff(wa.events, wa.manifest, wb.events, wb.manifest, phase=None)
    assert json.dumps(render_diff.to_json(got, a, b)) == json.dumps(render_diff.to_json(want, a, b))


def _workload_config(tmp: Path) -> Path:
    """The built-in workload's model config (the scale sets' source capture records it; the sets do not)."""
    from tracekit.analyzers.sol.run import workload_config
    from tracekit.store import read_manifest

    cfg = tmp / "workload.json"
    cfg.write_text(json.dumps(workload_config(dict(read_manifest(REPO / "samples" / "h200x2-builtin" / "graphed.parquet")))))
    return cfg


def test_sol_of_64_shards_equals_the_whole_run(set64: Path, tmp_path: Path) -> None:
    """``tracekit sol`` of the shard directory is read rank by rank (progress per rank), the one-file run
    whole: the same text and document; a run whose manifest gives no floor is refused before any event is
    read (one line, exit 1)."""
    cfg = str(_workload_config(tmp_path))
    for cmd in (["sol"], ["sol", "--json"]):
        got = _tk(*cmd, "run", "--model", cfg, "--gpu", "H200", "--engine", "workload", cwd=set64)
        want = _tk(*cmd, "run.parquet", "--model", cfg, "--gpu", "H200", "--engine", "workload", cwd=set64)
        assert got.returncode == want.returncode == 0, (got.stderr, want.stderr)
        assert "sol: pass 2 (per-rank tables): rank 63 done, 64/64" in got.stderr and "sol:" not in want.stderr
        assert got.stdout == want.stdout.replace("run.parquet", "run"), cmd
    doc = json.loads(got.stdout)
    assert {p["phase"] for p in doc["phases"]} == {"verify", "decode"}  # no draft config: no draft floors
    refused = _tk("sol", "run", "--gpu", "H200", cwd=set64)
    assert refused.returncode == 1 and "pass 1" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "tracekit: error: run: the run records no model config (only built-in, transformers and vllm captures do): "
        "pass --model CONFIG.json"]
    usage = _tk("sol", "--executor", "dask-local:2", "--calibrate", "-o", str(tmp_path / "x.toml"), cwd=set64)
    assert usage.returncode == 2 and "--executor is for a RUN" in usage.stderr


@needs_dask
def test_sol_through_dask_equals_the_whole_run(set64: Path, tmp_path: Path) -> None:
    cfg = str(_workload_config(tmp_path))
    got = _tk("sol", "--json", "--executor", "dask-local:2", "run", "--model", cfg, "--gpu", "H200", cwd=set64)
    want = _tk("sol", "--json", "run.parquet", "--model", cfg, "--gpu", "H200", cwd=set64)
    assert got.returncode == want.returncode == 0, got.stderr
    assert "starting executor dask-local:2" in got.stderr
    assert got.stdout == want.stdout.replace("run.parquet", "run")


@pytest.mark.parametrize("sample", SAMPLES)
def test_sol_of_committed_samples_rank_by_rank_equals_the_whole_run(sample: str) -> None:
    """``sol_of_run`` from ``ranked.sol_inputs`` equals the whole read's report on each multi-rank sample
    (those with a model config and a GPU give floors); where the manifest gives no floor, ``sol_preflight``
    raises the whole read's error; host runs are read whole (``Unsupported``)."""
    from tracekit.analyzers.sol.run import sol_of_run, sol_preflight
    from tracekit.errors import AnalysisError
    from tracekit.render import sol as render_sol

    path = str(REPO / sample)
    rr = open_ranked(path)
    assert rr is not None
    whole = load_run(path)
    try:
        want: Any = render_sol.to_json(sol_of_run(whole.events, whole.manifest, run=path))
    except AnalysisError as exc:
        want = exc.message
    try:
        sol_preflight(dict(rr.manifest))
        coll, inst = ranked.sol_inputs(rr, LocalExecutor())
        got: Any = render_sol.to_json(sol_of_run(coll, dict(rr.manifest), run=path, instances=inst))
    except AnalysisError as exc:
        got = exc.message
    except ranked.Unsupported as why:
        assert "host run" in str(why)
        return
    assert got == want
