"""Many ranks in every output (issue 29): the rank summary, folded text tables, ``--ranks``, ``--all-ranks``.

The CLI tests run on a 32-rank run made at test time from the committed H200 traces
(``bench/scale_gen.py``, the scale bench's generator) and check the folded tables against figures
computed here from the ``--json`` documents' rows (which keep every rank).
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tracekit.analyzers.rank_summary import WORST_N, summarize
from tracekit.cli import cli
from tracekit.render.rank_fold import FOLD_ABOVE
from tracekit.render.units import ms

REPO = Path(__file__).resolve().parents[1]
WORLD = 32


def _scale_gen() -> Any:
    spec = importlib.util.spec_from_file_location("scale_gen", REPO / "bench" / "scale_gen.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["scale_gen"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def run32(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("many")
    traces = _scale_gen().make_set(base, WORLD, 8, "eager")
    out = base / "run.parquet"
    res = CliRunner().invoke(cli, ["ingest", str(traces), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    return out


def _run(*args: str) -> str:
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code == 0, res.output
    return res.stdout


def _json(*args: str) -> dict[str, Any]:
    doc = json.loads(_run(*args, "--json"))
    assert isinstance(doc, dict)
    return doc


def _nearest(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[math.ceil(q * len(v)) - 1]


def _first_cells(text: str, title: str) -> list[str]:
    """The first cell of every body row of the table titled ``title`` (rich's box drawing)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if title in line)
    cells = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            cells.append(line.split("│")[1].strip())
    return cells


def test_summary_is_nearest_rank_and_names_the_worst() -> None:
    vals = [(r, v) for r, v in enumerate([5, 1, 9, 9, 3, 7, 2, 8, 6, 4])]
    s = summarize(vals, "x", "ns", hosts={2: "gpu-a", 3: "gpu-b"})
    assert s is not None
    assert (s.count, s.median, s.p90, s.mean) == (10, 5, 9, 5.4)  # 5th and 9th smallest of 10
    assert (s.min.rank, s.min.value, s.max.rank, s.max.value, s.max.host) == (1, 1, 2, 9, "gpu-a")
    assert [(w.rank, w.host) for w in s.worst] == [(2, "gpu-a"), (3, "gpu-b"), (7, None)]  # ties: lower rank first
    low = summarize([*vals, (10, None)], "x", "ns", worse="low")
    assert low is not None and low.count == 10 and [w.rank for w in low.worst] == [1, 6, 4]
    assert summarize([(0, None)], "x", "ns") is None


def test_ranks_folds_and_names_the_worst_ranks(run32: Path) -> None:
    doc = _json("ranks", str(run32))
    rows = doc["ranks"]
    assert len(rows) == WORLD > FOLD_ABOVE  # the document keeps every rank
    worst = sorted(rows, key=lambda r: (-r["inflicted_wait_ns"], r["rank"]))[:WORST_N]
    waits = [r["inflicted_wait_ns"] for r in rows]
    text = _run("ranks", str(run32))
    cells = _first_cells(text, "Stragglers")
    assert cells == [f"median of {WORLD}", f"p90 of {WORLD}", f"mean of {WORLD}", "min", "max",
                     *[str(r["rank"]) for r in worst]]
    assert worst[0]["rank"] == 1 and worst[0]["inflicted_wait_ns"] > 0  # the real straggler of the source traces
    assert f"{WORLD} rank rows: {WORLD - WORST_N} folded" in text
    line = next(line for line in text.splitlines() if line.startswith("made others wait ms over"))
    assert f"median {ms(unit=False, ns=_nearest(waits, 0.5))}, p90 {ms(unit=False, ns=_nearest(waits, 0.9))}" in line
    assert "highest: " + ", ".join(f"rank {r['rank']} {ms(unit=False, ns=r['inflicted_wait_ns'])}" for r in worst) in line
    rs = doc["rank_summary"]["inflicted_wait_ns"]
    assert (rs["median"], rs["p90"], rs["ranks"]) == (_nearest(waits, 0.5), _nearest(waits, 0.9), WORLD)
    assert [w["rank"] for w in rs["worst"]] == [r["rank"] for r in worst]

    every = _first_cells(_run("ranks", str(run32), "--all-ranks"), "Stragglers")
    assert every == [str(r) for r in range(WORLD)]


def test_ranks_selects_rows_but_analyses_every_rank(run32: Path) -> None:
    text = _run("ranks", str(run32), "--ranks", "0-3,12")
    assert _first_cells(text, "Stragglers") == ["0", "1", "2", "3", "12"]
    assert f"matched on all {WORLD} ranks" in text and "the analysis used every rank" in text
    doc = _json("ranks", str(run32), "--ranks", "0-3,12")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3, 12] and doc["ranks_selected"] == "0-3,12"
    assert doc["collectives"]["matched"] == _json("ranks", str(run32))["collectives"]["matched"]
    res = CliRunner().invoke(cli, ["ranks", str(run32), "--ranks", "3-1"])
    assert res.exit_code == 2 and "--ranks" in res.output


def test_gap_by_rank_folds(run32: Path) -> None:
    doc = _json("gap", str(run32), "--by", "rank")
    by = {(r["rank"], r["side"]): r["gpu_window_ns"] for r in doc["by_rank"]}
    delta = {r: by[(r, "a")] - by[(r, "b")] for r in range(WORLD)}
    worst = sorted(delta, key=lambda r: (-delta[r], r))[:WORST_N]
    assert [w["rank"] for w in doc["rank_summary"]["delta_ns"]["worst"]] == worst
    text = _run("gap", str(run32), "--by", "rank")
    assert _first_cells(text, "per rank:")[5:] == [str(r) for r in worst]
    assert len(_first_cells(_run("gap", str(run32), "--all-ranks"), "per rank:")) == WORLD


def test_attribute_names_the_slowest_ranks(run32: Path) -> None:
    doc = _json("attribute", str(run32))
    items = [p for p in doc["phases"] if p["phase"] == "verify"]
    assert len(items) == WORLD
    worst = sorted(items, key=lambda p: (-p["median_gpu_window_ns"], p["rank"]))[:WORST_N]
    assert [w["rank"] for w in doc["rank_summary"]["verify"]["worst"]] == [p["rank"] for p in worst]
    text = _run("attribute", str(run32))
    line = next(line for line in text.splitlines() if "each rank's median, over 32 ranks" in line
                and f"rank {worst[0]['rank']} " in line)
    assert re.search(r"p90 [\d.]+ ms", line)
    head = [line for line in text.splitlines() if "ranks: min %" in line]
    assert head and "p90 %" in head[0]


def test_info_folds_per_rank_tables(run32: Path) -> None:
    doc = _json("info", str(run32))
    rows = doc["ranks"]
    assert len(rows) == WORLD
    worst = sorted(rows, key=lambda r: (-r["busy_ns"], r["rank"]))[:WORST_N]
    assert [w["rank"] for w in doc["rank_summary"]["busy_ns"]["worst"]] == [r["rank"] for r in worst]
    text = _run("info", str(run32))
    assert f"ranks present 0-{WORLD - 1} " in text
    assert _first_cells(text, "per rank (ms")[5:] == [str(r["rank"]) for r in worst]
    assert len(_first_cells(_run("info", str(run32), "--all-ranks"), "per rank (ms")) == WORLD
    sel = _json("info", str(run32), "--ranks", "5,7")
    assert [r["rank"] for r in sel["ranks"]] == [5, 7] and sel["rank_summary"]["busy_ns"]["ranks"] == 2


def test_report_draws_rank_heat_maps(run32: Path) -> None:
    pytest.importorskip("plotly")
    from tracekit.render.report.collect import collect
    from tracekit.render.report.plots_comm import skew_plot
    from tracekit.render.report.plots_time import bucket_plots, composition_plot

    a, _, _ = collect(str(run32))
    doc = _json("attribute", str(run32))
    (buckets,) = bucket_plots(a, None)
    assert buckets.figure is not None and {tr.type for tr in buckets.figure.data} == {"heatmap"}
    assert all(list(tr.x) == list(range(WORLD)) for tr in buckets.figure.data)  # one column per rank
    verify = [p for p in doc["phases"] if p["phase"] == "verify"]
    slowest = min(verify, key=lambda p: (-p["median_gpu_window_ns"], p["rank"]))
    titles = [str(an.text) for an in buckets.figure.layout.annotations]
    assert any(t.startswith("verify") and f"highest: rank {slowest['rank']} " in t for t in titles)
    comp = composition_plot(a, None)
    assert comp.figure is not None and [tr.type for tr in comp.figure.data] == ["heatmap"]
    skew = skew_plot(a)
    assert skew.figure is not None and len(skew.figure.data[0].y) == WORLD


def test_report_facts_fold_the_ranks(run32: Path) -> None:
    pytest.importorskip("plotly")
    from tracekit.render.report.collect import collect
    from tracekit.render.report.facts import run_facts

    a, _, _ = collect(str(run32))
    busiest = sorted(a.info["ranks"], key=lambda r: (-r["busy_ns"], r["rank"]))[:WORST_N]
    html = run_facts(a, "A")
    body = html[html.index("Ranks (from"):html.index("</table>", html.index("Ranks (from"))]
    assert f"<td>median of {WORLD}</td>" in body and body.count("<tr>") == 1 + 5 + WORST_N
    assert [int(x) for x in re.findall(r"<tr><td>(\d+)</td>", body)] == [r["rank"] for r in busiest]
    assert f"0-{WORLD - 1}" in html  # ranks present, versions: ranges


def test_summaries_name_the_host_of_each_rank() -> None:
    cpu8 = REPO / "samples" / "cpu8-builtin" / "run.parquet"  # a real 8-rank capture on host "vm" (host mode)
    doc = _json("attribute", str(cpu8))
    assert doc["mode"] == "host" and doc["rank_summary"]
    for phase, s in doc["rank_summary"].items():
        items = [p for p in doc["phases"] if p["phase"] == phase]
        vals = [p["median_host_ns"] for p in items]
        assert s["ranks"] == len(items) and s["median"] == _nearest(vals, 0.5) and s["p90"] == _nearest(vals, 0.9)
        assert {w["host"] for w in s["worst"]} == {"vm"} and s["max"]["host"] == "vm"
    text = _run("attribute", str(cpu8))
    first = doc["rank_summary"][next(iter(doc["rank_summary"]))]["worst"][0]["rank"]
    assert f"highest: rank {first} (vm) " in text


def test_attribute_json_ranks_selects_items(run32: Path) -> None:
    from tracekit.documents import document_type

    doc = _json("attribute", str(run32), "--ranks", "0-3", "--by", "cycle")
    assert document_type(doc).problems(doc) == [] and doc["ranks_selected"] == "0-3"
    assert {p["rank"] for p in doc["phases"]} == {0, 1, 2, 3} and {c["rank"] for c in doc["cycles"]} == {0, 1, 2, 3}
    assert {s["ranks"] for s in doc["rank_summary"].values()} == {4}
    every = _json("attribute", str(run32), "--by", "cycle")
    assert doc["all_ranks"] == every["all_ranks"]  # the phase figures are still over every rank
