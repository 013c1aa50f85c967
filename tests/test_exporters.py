"""The exporter registry: export_events, format_of and validate_trace name no format."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pytest

from tracekit import exporters
from tracekit.export import export_run, format_of
from tracekit.export.layout import Layout
from tracekit.exporters import FORMATS, ExportFormat, WriteContext, format_for, format_of_bytes

CPU = Path(__file__).resolve().parents[1] / "samples" / "cpu8-builtin" / "run.parquet"
SEEN: list[WriteContext] = []


def write_lines(lay: Layout, out: IO[bytes], ctx: WriteContext) -> int:
    SEEN.append(ctx)
    data = b"".join(f"{n}\n".encode() for n in lay.ranks)
    out.write(data)
    return len(data)


def estimate_lines(lay: Layout) -> int:
    return 2 * len(lay.ranks)


def test_suffix_and_name_pick_the_format() -> None:
    assert format_of("a.pftrace") == "perfetto" and format_of("A.JSON.GZ") == "json"
    assert format_for("x.bin", "json").name == "json"
    with pytest.raises(ValueError, match="cannot tell the format"):
        format_for("x.bin")
    with pytest.raises(ValueError, match="unknown format"):
        format_for("x.json", "svg")
    assert format_of_bytes(b"\x1f\x8b\x08") is not None and format_of_bytes(b"\x0a\x05") is not None
    assert format_of_bytes(b"PK") is None


def test_a_new_format_is_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ExportFormat("lines", "rank lines", (".lines",), writer=f"{__name__}:write_lines",
                         estimator=f"{__name__}:estimate_lines", checker="tracekit.export.validate:validate_chrome",
                         magic=(b"0\n",))
    monkeypatch.setattr(exporters, "FORMATS", (*FORMATS, lines))
    res = export_run(CPU, tmp_path / "r.lines", selection=None)
    assert res.format == "lines" and res.estimated_bytes == 2 * len(res.ranks)
    assert (tmp_path / "r.lines").read_text().split() == [str(r) for r in res.ranks]
    assert SEEN[-1].path == str(tmp_path / "r.lines") and SEEN[-1].source == str(CPU)
