"""tracekit report: the page opens in headless Chromium offline, every plot renders with data,
the numbers drawn equal ``attribute --json``, a screenshot is not blank, PNGs are written."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import browser
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
EAGER = SAMPLES / "h200x2-mainjob" / "eager.parquet"
GRAPHED = SAMPLES / "h200x2-mainjob" / "graphed.parquet"
CPU8 = SAMPLES / "cpu8-builtin" / "run.parquet"
SGLANG = SAMPLES / "sglang-shapes-h200x2"

pytest.importorskip("plotly", reason="tracekit[report] not installed")


def _need_chromium() -> None:
    if browser.chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")


def _cli(*args: str) -> str:
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout  # an old sample run adds a line on stderr


def _attribute(run: Path) -> dict[str, Any]:
    return json.loads(_cli("attribute", str(run), "--json"))  # type: ignore[no-any-return]


def _bucket_values(verdict: dict[str, Any]) -> dict[tuple[str, str, str, int, str], tuple[int, int]]:
    """(run tag, phase, bucket label, rank, bucket) -> (total ns, instances), as drawn on the page."""
    out = {}
    for p in verdict["plots"]:
        if p["id"] != "buckets":
            continue
        for t in p["customdata"]:
            for total, n, rank, bucket, tag, phase in t["customdata"]:
                out[(tag, phase, t["name"], rank, bucket)] = (total, n)
    return out


def _assert_numbers_equal(verdict: dict[str, Any], doc: dict[str, Any], tag: str) -> None:
    drawn = {(ph, rank, b): v for (t, ph, _, rank, b), v in _bucket_values(verdict).items() if t == tag}
    want = {}
    for item in doc["phases"]:
        for b, ns in item["buckets_ns"].items():
            if any(i["phase"] == item["phase"] and i["buckets_ns"][b] for i in doc["phases"]):
                want[(item["phase"], item["rank"], b)] = (ns, item["instances"])
    assert drawn == want


def _assert_rendered(verdict: dict[str, Any], expect_missing: set[str]) -> None:
    assert verdict["errors"] == [] and verdict["console_errors"] == []
    assert verdict["resources"] == []  # everything inline: the page fetched nothing
    plots = verdict["plots"]
    assert plots and verdict["rendered"] == str(len(plots))
    for p in plots:
        assert p["rendered"] and p["svg"] > 0, p["id"]
        assert p["traces"] > 0 and sum(p["points"]) > 0, p["id"]
        assert p["width"] > 100 and p["height"] > 100, p["id"]
    missing = {m["key"] for m in verdict["missing"]}
    assert missing == expect_missing
    assert all(m["text"].strip() for m in verdict["missing"])  # each missing plot says why


@pytest.fixture(scope="module")
def ab_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    text = _cli("report", str(EAGER), "--b-run", str(GRAPHED), "-o", str(out), "--target-tps", "150")
    assert f"wrote {out}" in text
    return out


def test_ab_report_in_chromium(ab_report: Path, tmp_path: Path) -> None:
    _need_chromium()
    v = browser.check_page(ab_report, tmp_path)
    _assert_rendered(v, expect_missing=set())
    ids = {p["id"] for p in v["plots"]}
    assert {"buckets", "seq-scatter", "cycle-composition", "collective-skew-A", "collective-skew-B",
            "gap-verify-decode", "gap-a-vs-b", "spec-economics-A", "spec-economics-B"} <= ids
    _assert_numbers_equal(v, _attribute(EAGER), "A")
    _assert_numbers_equal(v, _attribute(GRAPHED), "B")


def test_screenshot_not_blank(ab_report: Path, tmp_path: Path) -> None:
    _need_chromium()
    from PIL import Image

    png = tmp_path / "shot.png"
    browser.screenshot(ab_report, png, tmp_path)
    img = Image.open(png).convert("RGB")
    small = img.resize((img.width // 4, img.height // 4))
    colors = small.getcolors(maxcolors=small.width * small.height) or []
    non_white = sum(n for n, (r, g, b) in colors if r + g + b < 720) / (small.width * small.height)
    assert len(colors) > 50 and non_white > 0.05, (len(colors), non_white)


def test_page_is_self_contained(ab_report: Path) -> None:
    text = ab_report.read_text(encoding="utf-8")
    assert "<script src" not in text and "<link" not in text
    docs = text[text.index('id="tk-documents">') :]
    doc = json.loads(docs[docs.index(">") + 1 : docs.index("</script>")])
    assert doc["diff"]["phases"] and doc["a"]["attribute"]["phases"]
    assert doc["a"]["attribute"]["phases"] == _attribute(EAGER)["phases"]


def test_cpu_run_report(tmp_path: Path) -> None:
    _need_chromium()
    out = tmp_path / "cpu.html"
    png_dir = tmp_path / "png"
    text = _cli("report", str(CPU8), "-o", str(out), "--png-dir", str(png_dir))
    assert "not shown: collective-skew: no collective matched on every rank" in text
    v = browser.check_page(out, tmp_path)
    # a CPU run has no GPU: no speed-of-light floors (the page says why)
    _assert_rendered(v, expect_missing={"collective-skew", "diff", "sol-buckets", "sol-seq"})
    _assert_numbers_equal(v, _attribute(CPU8), "A")
    pngs = sorted(p.name for p in png_dir.iterdir())
    assert pngs == sorted(f"{p['id']}.png" for p in v["plots"])
    for p in png_dir.iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_sglang_trace_without_tracekit_labels(tmp_path: Path) -> None:
    _need_chromium()
    run = tmp_path / "sgl.parquet"
    _cli("ingest", str(SGLANG), "-o", str(run), "-q")
    out = tmp_path / "sgl.html"
    _cli("report", str(run), "-o", str(out))
    v = browser.check_page(out, tmp_path)
    missing = {m["key"] for m in v["missing"]}
    assert "buckets" in {p["id"] for p in v["plots"]}
    assert "gap-verify-decode" in missing  # SGLang's spec worker runs no plain decode step here
    _assert_rendered(v, expect_missing=missing)
    _assert_numbers_equal(v, _attribute(run), "A")


def test_bad_run_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "nope.parquet"), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 1
    assert len(res.output.strip().splitlines()) == 1 and "nope.parquet" in res.output


def test_b_run_without_speculation_is_the_decode_baseline(tmp_path: Path) -> None:
    import polars as pl

    from tracekit.render.report.collect import collect
    from tracekit.store import load_run, write_run

    r = load_run(GRAPHED)
    spec_ranges = pl.col("kind").is_in(["range", "gpu_range"]) & pl.col("phase").is_in(["draft", "verify", "draft_extend"])
    off = tmp_path / "spec-off.parquet"
    write_run(r.events.filter(~spec_ranges), off, r.manifest)
    a, b, diff = collect(str(EAGER), b_path=str(off))
    assert b is not None and {p["phase"] for p in b.attribute.value["phases"]} == {"decode"}  # type: ignore[index]
    assert a.spec.value is not None and a.spec.value["decode_source"].startswith("baseline run")
    gap = a.extra["gap_b_run"].value
    assert gap["a"]["phase"] == "verify" and gap["b"]["phase"] == "decode" and gap["b"]["run"] == str(off)
    assert diff.value is not None and [p["phase"] for p in diff.value["phases"]] == ["decode"]
