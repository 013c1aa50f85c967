"""`tracekit ingest --align`: clock offsets fitted on collective ends are applied and recorded."""

from __future__ import annotations

from pathlib import Path

import polars as pl
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.store import load_run

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin"


def test_ingest_align_collectives_records_offsets_and_keeps_raw_times(tmp_path: Path) -> None:
    files = sorted(str(p) for p in SAMPLE.glob("graphed-rank-*.trace.json.gz"))
    assert len(files) == 2
    runner = CliRunner()
    plain, aligned = tmp_path / "plain.parquet", tmp_path / "aligned.parquet"
    assert runner.invoke(cli, ["ingest", *files, "-o", str(plain), "-q"]).exit_code == 0
    res = runner.invoke(cli, ["ingest", *files, "-o", str(aligned), "--align", "collectives"])
    assert res.exit_code == 0, res.output
    assert "clocks aligned on" in res.output
    a, p = load_run(aligned), load_run(plain)
    clock = a.manifest["clock"]
    assert clock["align"] == "collectives" and clock["collectives"] > 100
    assert clock["offsets_ns"]["0"] == 0
    # both ranks on one host: the fitted offset is within a few residuals of zero
    assert abs(clock["offsets_ns"]["1"]) <= 4 * max(1, clock["residual_ns"]["max"])
    # raw times are recoverable exactly: start_ns - offset == the unaligned ingest
    off = pl.DataFrame({"rank": [0, 1], "_o": [clock["offsets_ns"]["0"], clock["offsets_ns"]["1"]]},
                       schema={"rank": pl.Int32, "_o": pl.Int64})
    raw = a.events.join(off, on="rank").with_columns((pl.col("start_ns") - pl.col("_o")).alias("start_ns")).drop("_o")
    key = ["rank", "kind", "name", "start_ns", "dur_ns"]
    assert raw.select(key).sort(key).equals(p.events.select(key).sort(key))
    # one host: auto means no alignment
    assert p.manifest["clock"]["align"] == "none"



def test_ingest_align_auto_counts_the_hosts_the_trace_names_give(tmp_path: Path) -> None:
    """torch's tensorboard_trace_handler names a file <host>_<pid>.<ns>.pt.trace.json: ingest
    records that host (when the pid is the trace's own), so --align auto sees two hosts."""
    from tracekit.ingest import ingest_traces
    from tracekit.manifest import hosts

    named = []
    for r, f in enumerate(sorted(SAMPLE.glob("graphed-rank-*.trace.json.gz"))):
        pids = ingest_traces([str(f)], allow_missing_ranks=True).events.get_column("pid").drop_nulls()
        dest = tmp_path / f"node{r}_{int(pids.mode()[0])}.1790857026000000000.pt.trace.json.gz"
        dest.write_bytes(f.read_bytes())
        named.append(str(dest))
    out = tmp_path / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", *named, "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    man = load_run(out).manifest
    assert hosts(man) == {"0": "node0", "1": "node1"}
    assert man["clock"]["align"] == "collectives" and man["clock"]["auto"] == "ranks on 2 hosts"
    # a pid that is not the trace's: the name is not trusted
    wrong = tmp_path / "w" / "elsewhere_1.1790857026000000000.pt.trace.json.gz"
    wrong.parent.mkdir()
    wrong.write_bytes(Path(named[0]).read_bytes())
    assert hosts(ingest_traces([str(wrong)], allow_missing_ranks=True).manifest) == {"0": None}
