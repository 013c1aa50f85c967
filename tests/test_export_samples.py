"""Export the committed real captures (samples/) to both formats and check them."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_data import exported_gpu, gpu_rows

from tracekit.errors import RunError
from tracekit.export import export_run
from tracekit.export.validate import validate_trace
from tracekit.store import read_manifest, read_run

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _runs() -> list[Path]:
    out = []
    for p in sorted(SAMPLES.rglob("*.parquet")) if SAMPLES.exists() else []:
        if p.name.startswith("rank-"):
            continue
        try:
            read_manifest(p)
        except RunError:
            continue
        out.append(p)
    return out


RUNS = _runs()


@pytest.mark.skipif(not RUNS, reason="no run.parquet samples committed yet")
@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(SAMPLES)) for p in RUNS])
@pytest.mark.parametrize("suffix", [".pftrace", ".json.gz"])
def test_sample_exports_validate(run: Path, suffix: str, tmp_path: Path) -> None:
    pytest.importorskip("perfetto")
    out = tmp_path / f"x{suffix}"
    res = export_run(run, out, flows=("launches", "collectives"))
    chk = validate_trace(out, collect=True)
    assert chk.ok, chk.problems
    ev = read_run(run)
    assert exported_gpu(chk.slices) == gpu_rows(ev)
    assert len(chk.processes) == ev["rank"].n_unique() == len(res.ranks)
