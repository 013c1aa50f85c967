"""The Perfetto export rank by rank (tracekit.export.ranked): one packet stream per rank, concatenated.

Checked on the real 2-rank H200 capture (samples/h200x2-mainjob): the trace holds exactly the slices,
counters, flows and processes of one layout of the whole run written as a single stream (the export
before rank streams), decoded with Perfetto's own schema (export.validate); the bytes are the same from
an in-memory run, a one-file run read in batches of ranks of any size and a sharded run; ids never
collide (the validator: every uuid described once, flows with exactly two ends, interned ids per
sequence); --full-ranks keeps the other ranks' collectives only.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tracekit.export import export_events, export_run
from tracekit.export.buckets import attribution_buckets
from tracekit.export.layout import build_layout
from tracekit.export.perfetto import write_perfetto
from tracekit.export.ranked import collective_rows
from tracekit.export.select import Selection, select_events
from tracekit.export.validate import validate_trace
from tracekit.store import load_run, write_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-mainjob" / "eager.parquet"


@pytest.fixture(scope="module")
def run() -> Any:
    return load_run(SAMPLE)


def _whole_run_stream(run: Any, out: Path, sel: Selection, flows: tuple[str, ...], outstanding: bool) -> None:
    """The export as it was before rank streams: one layout of the whole selection, one sequence."""
    ev = run.events
    picked = select_events(ev, sel)
    if sel.ranks is not None:
        ev = ev.filter(pl.col("rank").is_in(list(sel.ranks)))
    lay = build_layout(picked, run.manifest, flows=flows, buckets=attribution_buckets(ev, []), outstanding=outstanding)
    with open(out, "wb") as fh:
        write_perfetto(lay, fh)


def _content(path: Path) -> tuple[Counter[tuple[Any, ...]], int, int, dict[int, str]]:
    chk = validate_trace(path, collect=True)
    assert chk.ok, chk.problems[:5]
    slices = Counter((s.process, s.track, s.name, s.category, s.ts, s.dur, repr(sorted(s.args.items())))
                     for s in chk.slices)
    return slices, chk.n_counters, chk.n_flows, chk.processes


@pytest.mark.parametrize("sel, flows, outstanding", [
    (Selection(), ("launches", "collectives"), True),
    (Selection(phase="verify", cycles=(3, 5)), ("launches", "collectives"), False),
    (Selection(ranks=(1,), window=(5_000_000_000, None)), ("launches",), False),
])
def test_rank_streams_hold_the_whole_run_layout(run: Any, tmp_path: Path, sel: Selection, flows: tuple[str, ...],
                                                outstanding: bool) -> None:
    ref, new = tmp_path / "whole.pftrace", tmp_path / "ranked.pftrace"
    _whole_run_stream(run, ref, sel, flows, outstanding)
    res = export_events(run.events, run.manifest, new, selection=sel, flows=flows, outstanding=outstanding)
    a, b = _content(ref), _content(new)
    assert sum(a[0].values()) > 1000
    assert a == b
    assert res.n_slices == sum(b[0].values()) and res.n_flows == b[2] and res.n_counters == b[1]


@pytest.mark.parametrize("chunk", [None, 10])
def test_same_bytes_from_memory_one_file_and_shards(run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     chunk: int | None) -> None:
    """The batches of ranks do not depend on where the run is; chunk 10: one rank per stream."""
    if chunk is not None:
        monkeypatch.setattr("tracekit.export.ranked.CHUNK_EVENTS", chunk)
    flows = ("launches", "collectives")
    mem = tmp_path / "mem.pftrace"
    export_events(run.events, run.manifest, mem, flows=flows, outstanding=True)
    one = tmp_path / "one.pftrace"
    export_run(SAMPLE, one, flows=flows, outstanding=True)
    assert one.read_bytes() == mem.read_bytes()
    # a sharded run: one file per rank, each with its rank's manifest section
    shards = tmp_path / "run"
    for r in (0, 1):
        man = dict(run.manifest)
        man["ranks"] = {str(r): run.manifest["ranks"][str(r)]}
        write_run(run.events.filter(pl.col("rank") == r), shards / f"rank-{r:05d}.parquet", man)
    sh = tmp_path / "sharded.pftrace"
    res = export_run(shards, sh, flows=flows, outstanding=True)
    assert sh.read_bytes() == mem.read_bytes()
    assert res.ranks == [0, 1]
    if chunk is not None:  # two streams: the same trace as one stream, decoded
        whole = tmp_path / "whole.pftrace"
        _whole_run_stream(run, whole, Selection(), flows, True)
        assert _content(whole) == _content(sh)
        with open(sh, "rb") as fh:  # the second stream starts on its own sequence, state cleared
            from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

            seqs = {(p.trusted_packet_sequence_id, bool(p.sequence_flags & 1)) for p in Trace.FromString(fh.read()).packet
                    if p.sequence_flags & 1}
        assert seqs == {(1, True), (2, True)}


def test_full_ranks_keep_the_others_collectives(run: Any, tmp_path: Path) -> None:
    out = tmp_path / "full0.pftrace"
    res = export_events(run.events, run.manifest, out, flows=("collectives",), full_ranks=[0])
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems[:5]
    by_proc = Counter(s.process.split(" · ")[0] for s in chk.slices)
    coll1 = run.events.filter((pl.col("rank") == 1) & collective_rows())
    assert by_proc["rank 1"] == coll1.height > 0
    whole = tmp_path / "all.pftrace"
    export_events(run.events, run.manifest, whole, flows=("collectives",))
    assert by_proc["rank 0"] == sum(1 for s in validate_trace(whole, collect=True).slices if s.process.startswith("rank 0"))
    # every collective of rank 1 continues from / to rank 0's: one flow per consecutive pair
    assert res.n_flows == chk.n_flows == coll1.height
    assert "in full: ranks 0" in res.selection


def test_cli_full_ranks_and_errors(tmp_path: Path) -> None:
    def tk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=600)

    p = tk("export", str(SAMPLE), "-o", str(tmp_path / "x.pftrace"), "--full-ranks", "1", "--flows", "collectives")
    assert p.returncode == 0, p.stderr
    assert "in full: ranks 1, the others their collectives" in p.stdout
    p = tk("export", str(SAMPLE), "-o", str(tmp_path / "x.json"), "--full-ranks", "1")
    assert p.returncode == 2 and "--full-ranks and --executor are for the Perfetto export" in p.stderr
    p = tk("export", str(SAMPLE), "-o", str(tmp_path / "y.pftrace"), "--executor", "nope")
    assert p.returncode == 2 and "--executor 'nope'" in p.stderr
    p = tk("export", str(SAMPLE), "-o", str(tmp_path / "z.pftrace"), "--ranks", "7")
    assert p.returncode == 1 and "rank(s) 7 not in the run (it has 0,1)" in p.stderr
    assert not (tmp_path / "z.pftrace").exists()


def test_a_run_of_one_batch_is_the_whole_run_stream(run: Any, tmp_path: Path) -> None:
    """A run within one batch (here 2 ranks, 115k events) is one stream: the bytes of the whole-run export."""
    whole, new = tmp_path / "whole.pftrace", tmp_path / "new.pftrace"
    _whole_run_stream(run, whole, Selection(), ("launches",), False)
    export_run(SAMPLE, new)
    assert new.read_bytes() == whole.read_bytes()


needs_dask = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import distributed"], capture_output=True).returncode != 0,
    reason="Dask is the optional extra tracekit[dask]: not installed")


@needs_dask
def test_dask_executor_writes_the_same_bytes(tmp_path: Path) -> None:
    """`--executor dask-local:2`: the streams written by two worker processes (one rank per stream here),
    staged beside the output and appended in rank order: the bytes of the local executor; no staged file left."""
    env = {**__import__("os").environ, "TRACEKIT_EXPORT_BATCH_EVENTS": "10"}

    def tk(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, timeout=600,
                              env=env)

    loc, dk = tmp_path / "local.pftrace", tmp_path / "dask.pftrace"
    p = tk("export", str(SAMPLE), "-o", str(loc), "--flows", "all")
    assert p.returncode == 0, p.stderr
    p = tk("export", str(SAMPLE), "-o", str(dk), "--flows", "all", "--executor", "dask-local:2")
    assert p.returncode == 0, p.stderr
    assert "export: starting executor dask-local:2" in p.stderr
    assert dk.read_bytes() == loc.read_bytes()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["dask.pftrace", "local.pftrace"]
    with open(loc, "rb") as fh:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

        seqs = {p.trusted_packet_sequence_id for p in Trace.FromString(fh.read()).packet}
    assert seqs == {1, 2}  # one stream per rank


def test_full_ranks_with_a_phase_selection(run: Any, tmp_path: Path) -> None:
    """The other ranks' collectives are selected by their rank's own phase spans (host ranges and GPU
    windows), as in full: the same collective kernels as a full export of the selection holds."""
    sel = Selection(phase="verify", cycles=(3, 5))
    full, part = tmp_path / "full.pftrace", tmp_path / "part.pftrace"
    export_events(run.events, run.manifest, full, selection=sel)
    export_events(run.events, run.manifest, part, selection=sel, full_ranks=[0])
    coll = set(run.events.filter(collective_rows())["name"].unique().to_list())
    from tracekit.export.layout import display_names

    shown = set(display_names(sorted(coll)).values())

    def rank1_coll(p: Path) -> Counter[tuple[Any, ...]]:
        return Counter((s.name, s.ts, s.dur) for s in validate_trace(p, collect=True).slices
                       if s.process.startswith("rank 1") and s.name in shown and s.category != "phase")

    got, want = rank1_coll(part), rank1_coll(full)
    assert sum(got.values()) > 0 and got == want
