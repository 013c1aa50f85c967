"""Rank files read and scanned in threads (tracekit.ingest: TRACEKIT_INGEST_THREADS) give the
same run as one file after another: table, manifest, skipped files and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_synth import gpu_rank

from tracekit.errors import TracekitError
from tracekit.ingest import ingest_traces

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "samples" / "h200x2-builtin" / "eager-rank-*.trace.json.gz",
           ROOT / "samples" / "h200x2-builtin" / "graphed-rank-*.trace.json.gz",
           ROOT / "samples" / "sglang-shapes-h200x2" / "*-TP-*.trace.json.gz"]


def _ingest(monkeypatch: pytest.MonkeyPatch, threads: int, paths: list[Path], **kw: object) -> object:
    monkeypatch.setenv("TRACEKIT_INGEST_THREADS", str(threads))
    return ingest_traces(paths, **kw)  # type: ignore[arg-type]


def _manifest(run: object) -> dict[str, object]:
    """The manifest but its creation time."""
    return {k: v for k, v in run.manifest.items() if k != "created_unix_ns"}  # type: ignore[attr-defined]


def _ranks(tmp_path: Path, world: int) -> list[Path]:
    return [gpu_rank(r, world).write(tmp_path / f"rank-{r}.trace.json.gz") for r in range(world)]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_threads_same_run_on_real_samples(monkeypatch: pytest.MonkeyPatch, sample: Path) -> None:
    files = sorted(sample.parent.glob(sample.name))
    assert len(files) >= 2
    one = _ingest(monkeypatch, 1, files)
    many = _ingest(monkeypatch, 3, files)
    assert one.events.height > 0  # type: ignore[attr-defined]
    assert one.events.equals(many.events, null_equal=True)  # type: ignore[attr-defined]
    assert _manifest(one) == _manifest(many)


def test_threads_skip_the_same_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    files = _ranks(tmp_path, 5)
    files[2].write_bytes(b"\x1f\x8b" + b"not gzip at all")  # a corrupt rank in the middle
    files[3].write_bytes(b'{"traceEvents": [}')  # gunzips fine (plain), malformed JSON
    kw = {"on_error": "skip", "allow_missing_ranks": True}
    one = _ingest(monkeypatch, 1, files, **kw)
    many = _ingest(monkeypatch, 4, files, **kw)
    skipped = one.manifest["ingest"]["skipped"]  # type: ignore[attr-defined]
    assert [s["path"] for s in skipped] == [str(files[2]), str(files[3])]
    assert _manifest(many) == _manifest(one)
    assert one.events.equals(many.events, null_equal=True)  # type: ignore[attr-defined]


def test_threads_fail_on_the_first_bad_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    files = _ranks(tmp_path, 4)
    files[1].write_bytes(b'{"traceEvents": [}')
    files[3].write_bytes(b"\x1f\x8b" + b"not gzip")
    msgs = []
    for threads in (1, 4):
        with pytest.raises(TracekitError) as exc:
            _ingest(monkeypatch, threads, files)
        msgs.append(str(exc.value))
    assert msgs[0] == msgs[1]
    assert str(files[1]) in msgs[0]
