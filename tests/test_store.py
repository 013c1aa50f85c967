from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tracekit.errors import RunError
from tracekit.finalize import FINALIZE_VERSION, stamp
from tracekit.finalize.upgrade import upgrade_run
from tracekit.finalize.version import CHANGES, changes_since
from tracekit.schema import CATEGORY_DTYPE, COLUMNS, KIND_CODES, KIND_DTYPE, SCHEMA_VERSION, conform
from tracekit.shard_merge import merge_shards
from tracekit.store import load_run, new_manifest, read_manifest, read_run, write_run


def _events(rank: int, n: int = 5) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": [rank] * n,
            "kind": ["kernel"] * n,
            "name": [f"k{i}" for i in range(n)],
            # ns values that float64-µs would mangle
            "start_ns": [1_733_000_000_123_456_789 + 1001 * i for i in range(n)],
            "dur_ns": [7 + i for i in range(n)],
        }
    )


def test_roundtrip_keeps_every_ns_and_manifest(tmp_path: Path) -> None:
    ev = _events(0)
    man = new_manifest(source="test", ranks={"0": {"host": "h"}})
    p = write_run(ev, tmp_path / "run.parquet", man)
    back = read_run(p)
    assert back.columns == list(COLUMNS)
    assert back["start_ns"].to_list() == ev["start_ns"].to_list()
    assert back["dur_ns"].to_list() == ev["dur_ns"].to_list()
    m = read_manifest(p)
    assert m["schema_version"] == SCHEMA_VERSION
    assert m["ranks"] == {"0": {"host": "h"}}
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_shard_directory_reads_as_one_run(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    for r in (0, 1, 2):
        write_run(_events(r), d / f"rank-{r:05d}.parquet", new_manifest(ranks={str(r): {"pid": r}}, missing_ranks={"3": "killed"}))
    run = load_run(d)
    assert run.ranks == [0, 1, 2]
    assert set(run.manifest["ranks"]) == {"0", "1", "2"}
    assert run.manifest["missing_ranks"] == {"3": "killed"}
    out = merge_shards(d, tmp_path / "run.parquet")
    assert read_run(out).height == 15


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no such file"):
        read_run(tmp_path / "nope.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(RunError, match="not a readable Parquet"):
        read_run(junk)
    plain = tmp_path / "plain.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(plain)
    with pytest.raises(RunError, match="no tracekit manifest"):
        read_manifest(plain)
    with pytest.raises(RunError, match="no rank-"):
        read_run(tmp_path)


def test_conform_rejects_uncastable_column() -> None:
    with pytest.raises(pl.exceptions.InvalidOperationError):
        conform(pl.DataFrame({"start_ns": ["x"]}))


def test_phase_ids_repeated_across_shards_become_unique(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    for r in (0, 1):
        ev = pl.DataFrame(
            {
                "rank": [r, r, r],
                "kind": ["range", "launch", "kernel"],
                "name": ["tracekit:verify|cycle=0", "cudaLaunchKernel", "k"],
                "start_ns": [0, 10, 20],
                "dur_ns": [100, 5, 30],
                "phase": ["verify"] * 3,
                "phase_id": [0, 0, 0],  # every shard numbers its instances from 0
            }
        )
        write_run(ev, d / f"rank-{r:05d}.parquet", stamp(new_manifest(ranks={str(r): {}})))
    merged = read_run(merge_shards(d, tmp_path / "run.parquet"))
    per_rank = merged.group_by("rank").agg(pl.col("phase_id").unique())
    ids = {row[0]: row[1] for row in per_rank.iter_rows()}
    assert len(ids[0]) == 1 and len(ids[1]) == 1 and ids[0] != ids[1]
    # already-unique ids stay as they are
    again = read_run(tmp_path / "run.parquet")
    assert again["phase_id"].to_list() == merged["phase_id"].to_list()


def test_written_files_get_umask_permissions(tmp_path: Path) -> None:
    """mkstemp makes 0600 files; a run written by tracekit reads like any file the user writes."""
    old = os.umask(0o022)
    try:
        p = write_run(_events(0), tmp_path / "run.parquet", new_manifest())
    finally:
        os.umask(old)
    assert (p.stat().st_mode & 0o777) == 0o644


def test_top_level_api_is_lazy_and_light() -> None:
    import subprocess
    import sys

    code = ("import sys, tracekit; assert 'polars' not in sys.modules; "
            "tracekit.export_run, tracekit.ingest_traces, tracekit.read_run; "
            "print(sorted(m for m in ('torch', 'sglang', 'nvtx', 'pandas') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _raw_phase_run(rank: int = 0) -> pl.DataFrame:
    """What a writer hands to finalize: a verify range, its launch and kernel, nothing annotated."""
    return pl.DataFrame(
        {
            "rank": [rank] * 3,
            "kind": ["range", "launch", "kernel"],
            "name": ["tracekit:verify|cycle=0", "cudaLaunchKernel", "fused_moe_kernel"],
            "tid": [1, 1, None],
            "pid": [1, 1, None],
            "start_ns": [0, 10, 20],
            "dur_ns": [100, 5, 30],
            "correlation": [None, 7, 7],
        }
    )


def test_old_run_is_read_as_stored_and_upgraded_once(tmp_path: Path) -> None:
    old = write_run(_raw_phase_run(), tmp_path / "old.parquet", new_manifest())  # no finalize_version
    run = load_run(old)
    assert run.outdated is not None
    assert (run.outdated.from_version, run.outdated.to_version) == (None, FINALIZE_VERSION)
    assert "finalize_version" not in run.manifest
    assert run.events.get_column("phase").null_count() == 3  # readers never finalize
    up = upgrade_run(old, tmp_path / "new.parquet")
    assert up.written and (up.from_version, up.to_version) == (None, FINALIZE_VERSION) and up.changed
    new = load_run(tmp_path / "new.parquet")
    assert new.outdated is None and new.manifest["finalize_version"] == FINALIZE_VERSION
    k = new.events.filter(pl.col("kind") == "kernel").row(0, named=True)
    assert k["phase"] == "verify" and k["category"] == "moe"
    assert_frame_equal(load_run(old).events, run.events)  # the input is untouched
    # a current run is not rewritten; an older version is upgraded with what it lacks
    assert not upgrade_run(tmp_path / "new.parquet", tmp_path / "again.parquet").written
    assert not (tmp_path / "again.parquet").exists()
    older = write_run(_raw_phase_run(), tmp_path / "older.parquet", {**new_manifest(), "finalize_version": 1})
    assert load_run(older).outdated.from_version == 1  # type: ignore[union-attr]
    assert upgrade_run(older, older).changed == changes_since(1) == (CHANGES[2],)
    assert load_run(older).outdated is None


def test_finalized_run_is_read_as_written(tmp_path: Path) -> None:
    """Readers never annotate: a run that says it is finalized is taken as it is."""
    p = write_run(_raw_phase_run(), tmp_path / "new.parquet", stamp(new_manifest()))
    run = load_run(p)
    assert run.outdated is None
    assert run.events.get_column("phase").null_count() == 3 and run.events.get_column("category").null_count() == 3


def test_shard_directory_is_as_finalized_as_its_least_finalized_shard(tmp_path: Path) -> None:
    d = tmp_path / "run.parquet.d"
    write_run(_raw_phase_run(0), d / "rank-00000.parquet", stamp(new_manifest(ranks={"0": {}})))
    write_run(_raw_phase_run(1), d / "rank-00001.parquet", new_manifest(ranks={"1": {}}))  # its finalize failed
    assert "finalize_version" not in read_manifest(d)
    assert load_run(d).outdated is not None
    from tracekit.render.store import outdated_line

    note = load_run(d).outdated
    assert note is not None and f"`tracekit merge {d} -o run.parquet`" in outdated_line(note)
    out = merge_shards(d, tmp_path / "run.parquet")  # the merge is the writer: it finalizes
    assert read_manifest(out)["finalize_version"] == FINALIZE_VERSION and load_run(out).outdated is None
    kernels = load_run(out).events.filter(pl.col("kind") == "kernel")
    assert kernels.get_column("phase").to_list() == ["verify", "verify"]
    assert kernels.get_column("phase_id").n_unique() == 2


def _old_format(events: pl.DataFrame, path: Path, manifest: dict[str, object]) -> Path:
    """A run file as tracekit wrote it before kind / category were Enum columns (String)."""
    df = conform(events).with_columns(pl.col("kind").cast(pl.String), pl.col("category").cast(pl.String))
    df.write_parquet(path, metadata={"tracekit": json.dumps(manifest)})
    return path


def test_run_with_string_kind_and_category_is_coded_on_read(tmp_path: Path) -> None:
    fin = load_run(write_run(_raw_phase_run(), tmp_path / "new.parquet", new_manifest())).events
    old = _old_format(fin, tmp_path / "old.parquet", stamp(new_manifest()))
    assert pl.read_parquet_schema(old)["kind"] == pl.String
    run = load_run(old)
    assert run.outdated is None  # finalized already: only the columns are converted
    assert run.events.schema["kind"] == KIND_DTYPE and run.events.schema["category"] == CATEGORY_DTYPE
    assert_frame_equal(run.events, fin)
    assert load_run(old, columns=["kind", "name"]).events.schema["kind"] == KIND_DTYPE
    # a shard directory of old and new files reads as one run
    d = tmp_path / "run.parquet.d"
    d.mkdir()
    _old_format(fin, d / "rank-00000.parquet", stamp(new_manifest(ranks={"0": {}})))
    write_run(fin.with_columns(pl.lit(1, pl.Int32).alias("rank")), d / "rank-00001.parquet", stamp(new_manifest(ranks={"1": {}})))
    both = read_run(d)
    assert both.schema["kind"] == KIND_DTYPE and both.get_column("rank").to_list() == [0, 0, 0, 1, 1, 1]
    assert both.get_column("kind").cast(pl.String).to_list() == ["range", "launch", "kernel"] * 2
    # a category outside the vocabulary reads as "other", as conform makes it (one rule for both)
    odd = _old_format(fin, tmp_path / "odd.parquet", stamp(new_manifest()))
    pl.read_parquet(odd).with_columns(pl.when(pl.col("kind") == "kernel").then(pl.lit("retired-category"))
                                      .otherwise(pl.col("category")).alias("category")).write_parquet(
        odd, metadata={"tracekit": json.dumps(stamp(new_manifest()))})
    odd_run = read_run(odd)
    assert odd_run.filter(pl.col("kind") == "kernel").get_column("category").cast(pl.String).to_list() == ["other"]
    # a kind outside the vocabulary: one line naming the file
    bad = _old_format(fin, tmp_path / "bad.parquet", stamp(new_manifest()))
    pl.read_parquet(bad).with_columns(pl.lit("bogus").alias("kind")).write_parquet(
        bad, metadata={"tracekit": json.dumps(stamp(new_manifest()))})
    with pytest.raises(RunError, match=r"column kind: 3 event\(s\) of a kind tracekit does not know \('bogus'") as err:
        read_run(bad)
    assert "\n" not in str(err.value)


def test_conform_codes_kind_and_category() -> None:
    ev = conform(pl.DataFrame({"kind": ["kernel", "launch", "kernel"], "category": ["moe", None, "not-a-category"]}))
    assert ev.schema["kind"] == KIND_DTYPE and ev.schema["category"] == CATEGORY_DTYPE
    # a category outside the rule vocabulary is "other" (what every analyzer made of it), a missing one stays missing
    assert ev.get_column("category").cast(pl.String).to_list() == ["moe", None, "other"]
    # the Enum sorts as the strings do (sort_events' order is unchanged)
    kinds = pl.Series(list(KIND_CODES), dtype=KIND_DTYPE)
    assert kinds.sort().cast(pl.String).to_list() == sorted(KIND_CODES)
    with pytest.raises(pl.exceptions.InvalidOperationError):
        conform(pl.DataFrame({"kind": ["not-a-kind"]}))
