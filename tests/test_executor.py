"""Issue 29: ingest through an executor (local, a Dask LocalCluster), sharded runs, a worker killed mid-write.

Real CLI processes on the real 2-rank H200 traces of samples/h200x2-builtin: the run ingested
through ``--executor dask-local:2`` (or as a sharded directory, or node by node with
``--rank-files``) must hold the same table and manifest as the in-process ingest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from tracekit.executor import ExecutorSpec, parse_executor
from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"
TRACES = sorted(str(p) for p in SAMPLE.glob("eager-rank-0000*.trace.json.gz"))
needs_dask = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import distributed"], capture_output=True).returncode != 0,
    reason="Dask is the optional extra tracekit[dask]: not installed")


def _tk(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tracekit", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def _same_run(a: str | Path, b: str | Path) -> None:
    ra, rb = load_run(a), load_run(b)
    assert_frame_equal(ra.events, rb.events)
    ma, mb = dict(ra.manifest), dict(rb.manifest)
    for m in (ma, mb):
        m.pop("created_unix_ns")
    assert ma == mb


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ref")
    r = _tk("ingest", *TRACES, "-o", "local.parquet", "-q", cwd=d)
    assert r.returncode == 0, r.stderr
    return d / "local.parquet"


@pytest.mark.parametrize(("text", "spec"), [
    ("local", ExecutorSpec()),
    ("dask-local:3", ExecutorSpec("dask-local", 3)),
    ("dask://10.0.0.1:8786", ExecutorSpec("dask", address="tcp://10.0.0.1:8786")),
])
def test_executor_syntax(text: str, spec: ExecutorSpec) -> None:
    assert parse_executor(text) == spec
    assert str(spec) == text


@pytest.mark.parametrize("bad", ["dask-local:0", "dask-local:x", "dask://nohost", "ray"])
def test_bad_executor_is_a_usage_error(bad: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--executor"):
        parse_executor(bad)
    r = _tk("ingest", *TRACES, "-o", "x.parquet", "--executor", bad, cwd=tmp_path)
    assert r.returncode == 2 and "--executor" in r.stderr and "Traceback" not in r.stderr
    assert not list(tmp_path.iterdir())


def test_sharded_directory_is_a_run_every_command_reads(tmp_path: Path, reference: Path) -> None:
    r = _tk("ingest", *TRACES, "-o", "shards/", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "wrote 2 rank shard(s) (33870 events) into shards/" in r.stdout
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == ["rank-00000.parquet", "rank-00001.parquet"]
    from tracekit.store import CLOCK_BY_RANK, read_manifest

    for r in (0, 1):  # a shard's clock maps hold its own rank only; the run's manifest unites them (below)
        clock = read_manifest(str(tmp_path / "shards" / f"rank-0000{r}.parquet"))["clock"]
        assert "offsets_ns" in clock
        assert all(list(clock[k]) == [str(r)] for k in CLOCK_BY_RANK if k in clock), clock
    _same_run(reference, tmp_path / "shards")
    for cmd in (["info"], ["attribute"], ["ranks"], ["gap"]):
        got = _tk(*cmd, "shards", cwd=tmp_path)
        want = _tk(*cmd, str(reference), cwd=tmp_path)
        assert got.returncode == want.returncode == 0, (cmd, got.stderr)
        assert got.stdout.replace("shards", "RUN") == want.stdout.replace(str(reference), "RUN"), cmd
    m = _tk("merge", "shards", "-o", "merged.parquet", cwd=tmp_path)
    assert m.returncode == 0, m.stderr
    assert_frame_equal(load_run(reference).events, load_run(tmp_path / "merged.parquet").events)


def test_rank_files_node_by_node(tmp_path: Path, reference: Path) -> None:
    """Each node ingests its own rank's trace into the shared directory; the merge has them all."""
    for t in TRACES:
        r = _tk("ingest", "--rank-files", t, "-o", "shared", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    a, b = load_run(reference), load_run(tmp_path / "shared")
    assert_frame_equal(a.events, b.events)  # one host's clock: the reference fitted and kept offsets 0
    assert b.manifest["clock"]["align"] == "none" and "auto" not in b.manifest["clock"]
    assert {k: v for k, v in a.manifest.items() if k not in ("clock", "created_unix_ns", "ingest")} == \
        {k: v for k, v in b.manifest.items() if k not in ("clock", "created_unix_ns", "ingest")}


@needs_dask
def test_dask_local_ingest_equals_local(tmp_path: Path, reference: Path) -> None:
    r = _tk("ingest", *TRACES, "-o", "dask.parquet", "--executor", "dask-local:2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "starting executor dask-local:2" in r.stderr
    _same_run(reference, tmp_path / "dask.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dask.parquet"]  # no staging or temp file left


@needs_dask
def test_worker_killed_mid_write_task_runs_again(tmp_path: Path, reference: Path) -> None:
    """The worker writing rank 1's shard dies half way through (os._exit after a partial temp file; the fault
    is tests/dask_fault_preload.py, a Dask worker preload): Dask runs the task again on a new worker; the run
    is complete, and no half shard or temp file stays."""
    marker = tmp_path / "killed-once"
    preload = Path(__file__).resolve().parent / "dask_fault_preload.py"
    env = {**os.environ, "TRACEKIT_TEST_WORKER_FAULT": f"1:{marker}",
           "DASK_DISTRIBUTED__WORKER__PRELOAD": repr([str(preload)])}
    r = _tk("ingest", *TRACES, "-o", "out/", "--executor", "dask-local:2", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    assert marker.exists()  # the fault did fire: a worker died in the middle of rank 1's write
    assert int(marker.read_text()) > 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["rank-00000.parquet", "rank-00001.parquet"]
    _same_run(reference, tmp_path / "out")


def test_bounded_ingest_to_one_file_equals_whole(tmp_path: Path, reference: Path) -> None:
    """``-o run.parquet`` rank by rank (the rule's line at 0 MiB: ``TRACEKIT_INGEST_WHOLE_MB=0``): staged,
    finalized per rank and streamed into the file; the same table and manifest as the whole ingest, the
    same warnings, and nothing staged left beside it."""
    env = {**os.environ, "TRACEKIT_INGEST_WHOLE_MB": "0"}
    r = _tk("ingest", *TRACES, "-o", "bounded.parquet", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    _same_run(reference, tmp_path / "bounded.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bounded.parquet"]
    whole = _tk("ingest", *TRACES, "-o", "whole.parquet", cwd=tmp_path)
    assert [ln for ln in r.stderr.splitlines() if "warning" in ln] == \
        [ln.replace("whole.parquet", "bounded.parquet") for ln in whole.stderr.splitlines() if "warning" in ln]


def test_the_rule_reads_the_gzip_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    from tracekit.ingest.plan import WHOLE_MAX_MB, ingests_whole, json_bytes

    plain = tmp_path / "t.json"
    plain.write_bytes(b"[" + b"0," * 300_000 + b"0]")
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert gz.stat().st_size < 10_000
    assert json_bytes(plain) == json_bytes(gz) == plain.stat().st_size
    assert ingests_whole([gz]) and WHOLE_MAX_MB == 512
    monkeypatch.setenv("TRACEKIT_INGEST_WHOLE_MB", "0")
    assert not ingests_whole([gz])
    monkeypatch.setenv("TRACEKIT_INGEST_WHOLE_MB", "1")
    assert ingests_whole([gz]) and not ingests_whole([gz, gz, gz, gz])


def test_join_problems_combine_rank_by_rank(reference: Path) -> None:
    """``combine_join_problems`` of the ranks' own lists = ``join_problems`` of the whole table (the
    bounded ingest's warnings), on the sample with launches dropped and duplicated on both ranks."""
    import polars as pl

    from tracekit import schema
    from tracekit.analyzers.joins import combine_join_problems, join_problems

    ev = load_run(reference).events
    launch = pl.col("kind") == schema.LAUNCH
    idx = pl.int_range(pl.len()).over("rank", pl.col("kind"))
    broken = pl.concat([ev.filter(~(launch & (idx % 50 == 3))), ev.filter(launch & (idx % 70 == 5))])
    broken = schema.sort_events(broken)
    whole = join_problems(broken)
    assert {p.what for p in whole} == {"unjoined", "duplicate"}
    assert combine_join_problems([join_problems(broken.filter(pl.col("rank") == r)) for r in (0, 1)]) == whole


def test_ranks_with_different_phase_counts_number_as_the_whole_ingest(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 with one phase instance fewer than rank 1 (its first draft range removed from the real
    trace): the whole ingest numbers instances over the run (rank 1's from rank 0's count on); the
    rank-by-rank file and the sharded run number them the same (``sharded.placed``), not rank * max."""
    import gzip
    import json

    src = json.loads(gzip.decompress(Path(TRACES[0]).read_bytes()))
    first = next(e["name"] for e in src["traceEvents"] if str(e.get("name", "")).startswith("tracekit:draft|"))
    src["traceEvents"] = [e for e in src["traceEvents"] if e.get("name") != first]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / Path(TRACES[0]).name).write_bytes(gzip.compress(json.dumps(src).encode()))
    traces = [str(tmp_path / "in" / Path(TRACES[0]).name), TRACES[1]]
    r = _tk("ingest", *traces, "-o", "whole.parquet", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    import polars as pl

    ids = load_run(tmp_path / "whole.parquet").events.group_by("rank").agg(pl.col("phase_id").n_unique()).sort("rank")
    n0, n1 = ids.get_column("phase_id").to_list()
    assert n0 < n1  # the case: rank * (max id + 1) would leave a gap
    env = {**os.environ, "TRACEKIT_INGEST_WHOLE_MB": "0"}
    for out in ("bounded.parquet", "shards/"):
        r = _tk("ingest", *traces, "-o", out, "-q", cwd=tmp_path, env=env)
        assert r.returncode == 0, r.stderr
        _same_run(tmp_path / "whole.parquet", tmp_path / out)
    # one rank per finalize group (the groups' byte limit at 1): rank 1's ids start after rank 0's group
    from tracekit.executor import LocalExecutor
    from tracekit.ingest import sharded

    monkeypatch.setattr(sharded, "GROUP_BYTES", 1)
    one = sharded.ingest_file(traces, tmp_path / "groups.parquet", LocalExecutor())
    assert one.shards == 2
    sharded.ingest_sharded(traces, tmp_path / "groups", LocalExecutor())
    for got in ("groups.parquet", "groups"):
        assert_frame_equal(load_run(tmp_path / "whole.parquet").events, load_run(tmp_path / got).events)


def _tasks_on_worker(i: int) -> int:
    from distributed import get_worker

    return len(get_worker().state.tasks)


@needs_dask
def test_run_each_keeps_few_tasks_on_the_workers() -> None:
    """``run_each`` on Dask submits as results arrive: a worker never holds more than a few of the 60
    tasks (all submitted at once, it held the ones it finished ahead of the loop, with their arguments)."""
    from tracekit.executor import open_executor, run_each

    ex = open_executor("dask-local:1")
    try:
        window = ex.window()  # type: ignore[union-attr]
        seen = list(run_each(ex, _tasks_on_worker, [(i,) for i in range(60)]))
    finally:
        ex.close()
    assert window == 2 and len(seen) == 60
    assert max(seen) <= 2 * window, seen
