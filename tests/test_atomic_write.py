"""outputs.atomic_write: the one way an output file is written (store, exporters, report, ...)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tracekit.outputs import atomic_write

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200-cross-thread" / "run.parquet"


def test_written_whole_with_plain_permissions(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with atomic_write(out) as tmp:
        Path(tmp).write_text("done")
        assert not out.exists() and Path(tmp).parent == tmp_path  # nothing at the output until complete
    assert out.read_text() == "done" and sorted(tmp_path.iterdir()) == [out]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_failure_removes_the_temp_file_and_keeps_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    out.write_text("before")
    with pytest.raises(ZeroDivisionError), atomic_write(out) as tmp:
        Path(tmp).write_text("half")
        _ = 1 // 0
    assert out.read_text() == "before" and sorted(tmp_path.iterdir()) == [out]


def test_os_error_names_the_output(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    with pytest.raises(OSError) as info, atomic_write(out):
        raise OSError(28, "No space left on device")  # what a writer raises without a file name
    assert info.value.filename == str(out) and list(tmp_path.iterdir()) == []


def test_report_failure_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("plotly", reason="tracekit[report] not installed")
    from tracekit.render import report
    from tracekit.render.report import page

    out = tmp_path / "report.html"
    out.write_text("the previous report")
    monkeypatch.setattr(page, "page", lambda *a, **k: "\ud800")  # cannot be encoded: the write fails
    with pytest.raises(UnicodeEncodeError):
        report.build_report(str(SAMPLE), str(out))
    assert out.read_text() == "the previous report" and sorted(tmp_path.iterdir()) == [out]
