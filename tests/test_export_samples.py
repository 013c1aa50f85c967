"""Export the committed real captures (samples/) to both formats and check them."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_data import exported_gpu, gpu_rows

from tracekit.export import export_run
from tracekit.export.validate import validate_trace
from tracekit.store import read_manifest, read_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


# every committed run file (shards of a directory run aside): one that stops loading fails here
RUNS = [p for p in sorted(SAMPLES.rglob("*.parquet")) if not p.name.startswith("rank-")]


def test_the_committed_samples_are_found() -> None:
    names = {str(p.relative_to(SAMPLES)) for p in RUNS}
    assert {"cpu8-builtin/run.parquet", "h200x2-builtin/eager.parquet", "h200x2-mainjob/eager.parquet"} <= names


@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(SAMPLES)) for p in RUNS])
def test_sample_loads(run: Path) -> None:
    assert read_manifest(run).get("schema_version") is not None
    assert read_run(run).height > 0


@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(SAMPLES)) for p in RUNS])
def test_sample_exports_validate(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("perfetto")
    ev = read_run(run)
    # Perfetto: every GPU event of the run, exact ns, all checks
    out = tmp_path / "x.pftrace"
    res = export_run(run, out, flows=("launches", "collectives"))
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    assert exported_gpu(chk.slices) == gpu_rows(ev)
    assert len(chk.processes) == ev["rank"].n_unique() == len(res.ranks)
    # Chrome JSON of the same run: all checks, same slice and flow counts (the smaller samples only:
    # the JSON checks read every event with exact decimals, which is slow on big files)
    if ev.height > 60_000:
        return
    js = tmp_path / "x.json.gz"
    res_js = export_run(run, js, flows=("launches", "collectives"), buckets=False)
    chk_js = validate_trace(js)
    assert chk_js.ok, chk_js.problems
    assert (chk_js.n_slices, chk_js.n_flows) == (res_js.n_slices, res_js.n_flows) == (chk.n_slices, chk.n_flows)


def test_export_run_refuses_to_overwrite_its_run(tmp_path: Path) -> None:
    """The library entry point keeps the CLI's rule: an output that is the run is refused and the run
    is left as it was (an explicit format would otherwise have replaced run.parquet with a trace)."""
    import shutil

    from tracekit.errors import OutputIsInputError
    from tracekit.export import export_run

    run = tmp_path / "run.parquet"
    shutil.copy(SAMPLES / "cpu8-builtin" / "run.parquet", run)
    before = run.read_bytes()
    with pytest.raises(OutputIsInputError):
        export_run(run, run, fmt="perfetto")
    assert run.read_bytes() == before
