"""Render ``tracekit ranks``: per-rank straggler table, plain-language lines, JSON document."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table

from tracekit.analyzers.rank_summary import WORST_N, summarize
from tracekit.analyzers.reports import RanksReport
from tracekit.documents import RANKS
from tracekit.ranklist import format_rank_list
from tracekit.render.rank_fold import ALL, Column, RankView, count, rank_table
from tracekit.render.units import dur, ms


def _short(name: str, limit: int = 70) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


COMPACT: Final = ("sm_clock_mhz", "max_sm_clock_mhz", "throttle_reasons", "pcie_gen", "pcie_width", "temperature_c", "power_w")


def _state_text(state: pl.DataFrame, rank: int) -> str:
    """The few facts that explain a slow rank: SM clock (start -> end of the window, of max),
    throttle reasons, PCIe link, temperature, power. Everything else is in --json."""
    d = {k.replace("gpu.", ""): v for k, v in state.filter(pl.col("rank") == rank).select("key", "value").iter_rows()}
    parts: list[str] = []
    sm, sm_end, sm_max = d.get("sm_clock_mhz"), d.get("end.sm_clock_mhz"), d.get("max_sm_clock_mhz")
    if sm is not None:
        clock = f"SM {sm}" + (f"->{sm_end}" if sm_end is not None and sm_end != sm else "") + " MHz"
        parts.append(clock + (f" (max {sm_max})" if sm_max is not None else ""))
    thr = {d.get("throttle_reasons"), d.get("end.throttle_reasons")} - {None, "[]"}
    if "throttle_reasons" in d or "end.throttle_reasons" in d:
        parts.append("throttle: " + (", ".join(sorted(t for t in thr if t)) if thr else "none"))
    if d.get("pcie_gen") is not None:
        parts.append(f"PCIe Gen{d['pcie_gen']} x{d.get('pcie_width', '?')}")
    if d.get("temperature_c") is not None:
        parts.append(f"{d.get('end.temperature_c', d['temperature_c'])} C")
    if d.get("power_w") is not None:
        parts.append(f"{float(d.get('end.power_w', d['power_w'])):.0f} W")
    if not parts:
        parts = [f"{k}={v}" for k, v in d.items() if not k.startswith("end.")][:6]
    return ", ".join(parts)


def state_by_rank(state: pl.DataFrame) -> dict[int, dict[str, str]]:
    out: dict[int, dict[str, str]] = {}
    for r, k, v in state.iter_rows():
        out.setdefault(int(r), {})[k] = v
    return out


def before_late(r: dict[str, Any]) -> list[str]:
    """What a late rank did in the segments before its late arrivals (a ``ranks`` row, or an
    ``attribute`` straggler row: the same columns), as the other ranks' mean excess."""
    if r["busy_ns_excess"] is None:
        return []
    return [
        f"GPU busy {dur(r['busy_ns_excess'], True)} vs the other ranks' mean",
        f"launch gaps {dur(r['launch_gap_ns_excess'], True)}",
        f"other idle {dur(r['other_idle_ns_excess'], True)}",
        f"{r['syncs_before_late']} host syncs ({dur(r['sync_ns_before_late'])})",
    ]


def summary_lines(rep: RanksReport, view: RankView | None = None) -> list[str]:
    """The plain-language lines: every late rank (``view`` None, the JSON document), or those ``view``
    shows, the ``WORST_N`` worst only when it folds."""
    state = rep.state
    ranks = rep.ranks
    coll = rep.collectives
    n = coll.height
    if n == 0:
        return ["no collective matched on every rank: no straggler view (single rank, or no communication kernels)"]
    lines = [
        f"{n} collectives matched on all {ranks.height} ranks; {rep.with_last_rank} had an arrival spread >= 1 µs"
        f" (spread median {ms(unit=False, ns=rep.skew_median_ns)} ms, max {ms(unit=False, ns=rep.skew_max_ns)} ms)."
    ]
    order = ranks.sort(["inflicted_wait_ns", "rank"], descending=[True, False])
    kernels = rep.kernels
    fair = 1.0 / max(ranks.height, 1)
    late = [r for r in order.iter_rows(named=True) if r["last_count"] and (view is None or view.shows(r["rank"]))]
    folded = late[WORST_N:] if view is not None and view.folds(len(late)) else []
    for r in late[: len(late) - len(folded)]:
        share = r["last_share"] or 0.0
        line = (
            f"rank {r['rank']} arrived last at {r['last_count']}/{r['collectives']} collectives ({share * 100:.0f}%,"
            f" {'well above' if share > 1.5 * fair else 'about'} the {fair * 100:.{0 if fair >= 0.01 else 2}f}% of an even spread),"
            f" making the others wait {ms(unit=False, ns=r['inflicted_wait_ns'])} ms in total"
            f" ({ms(unit=False, ns=r['late_margin_ns'])} ms behind the next-latest rank)."
        )
        if r["last_count"] > 1 and r["worst_wait_ns"] is not None and r["worst_wait_ns"] >= 0.25 * (r["inflicted_wait_ns"] or 0):
            where = f"in {r['worst_phase']}" if r["worst_phase"] else "outside any phase"
            line += (
                f" The single worst collective ({r['worst_key']}, {where}) accounts for {dur(r['worst_wait_ns'])}"
                " of it: a first collective waiting for a late rank is waiting, not transfer."
            )
        lines.append(line)
        why = before_late(r)
        top = kernels.filter(pl.col("rank") == r["rank"]).head(3)
        if top.height:
            why.append(
                "slower kernels: "
                + ", ".join(f"{_short(f)} {dur(x, True)} ({k} arrivals)" for f, k, x in top.select("family", "late_arrivals", "excess_ns").iter_rows())
            )
        if why:
            lines.append("  before its late arrivals: " + "; ".join(why) + ".")
        st = _state_text(state, r["rank"])
        if st:
            lines.append(f"  state: {st}")
    if folded:
        lines.append(f"... and {len(folded)} more ranks that arrived last at least once (the {WORST_N} that made the"
                     " others wait longest are above; --all-ranks or --json for every one)")
    if len(lines) == 1:
        lines.append("no rank arrived last by 1 µs or more: no straggler.")
    return lines


def to_json(rep: RanksReport, hosts: Mapping[int, str | None] | None = None, view: RankView = ALL) -> dict[str, Any]:
    """The ``ranks`` document: every rank's row (``view.ranks``: those ranks' rows, then ``ranks_selected``
    says which) and ``rank_summary`` over the rows it holds."""
    state = rep.state
    coll = rep.collectives
    lines = summary_lines(rep, RankView(view.ranks, all_ranks=True))
    if view.ranks is not None:
        keep = pl.col("rank").is_in(list(view.ranks))
        rep = replace(rep, ranks=rep.ranks.filter(keep), kernels=rep.kernels.filter(keep), state=state.filter(keep))
        state = rep.state
    doc = RANKS.make({
        "ranks": rep.ranks.to_dicts(),
        "kernels": rep.kernels.to_dicts(),
        "collectives": {
            "matched": coll.height,
            "with_last_rank": rep.with_last_rank,
            "skew_ns_median": rep.skew_median_ns,
            "skew_ns_max": rep.skew_max_ns,
        },
        "state": {str(k): v for k, v in state_by_rank(state).items()},
        "summary": lines,
        "rank_summary": rank_summaries(rep, hosts),
    })
    if view.ranks is not None:
        doc["ranks_selected"] = format_rank_list(view.ranks)
    return doc


def _table_columns(state: pl.DataFrame) -> list[Column]:
    def num(k: str) -> Callable[[Mapping[str, Any]], float | None]:
        return lambda r: r[k]

    def msf(v: float) -> str:
        return ms(unit=False, ns=v)

    def last(r: Mapping[str, Any]) -> str:
        share = r["last_share"]
        return f"{r['last_count']} ({share * 100:.0f}%)" if share is not None else str(r["last_count"])

    return [
        Column("rank", lambda r: str(r["rank"])),
        Column("collectives", lambda r: str(r["collectives"]), num("collectives"), count),
        Column("arrived last", last, num("last_count"), count),
        Column("made others wait ms", lambda r: ms(unit=False, ns=r["inflicted_wait_ns"]), num("inflicted_wait_ns"), msf),
        Column("own wait ms", lambda r: ms(unit=False, ns=r["own_wait_ns"]), num("own_wait_ns"), msf),
        Column("busy excess ms", lambda r: ms(unit=False, ns=r["busy_ns_excess"]), num("busy_ns_excess"), msf),
        Column("launch-gap excess ms", lambda r: ms(unit=False, ns=r["launch_gap_ns_excess"]), num("launch_gap_ns_excess"), msf),
        Column("host syncs", lambda r: "" if r["syncs_before_late"] is None else str(r["syncs_before_late"]),
               num("syncs_before_late"), count),
        Column("state", lambda r: _state_text(state, r["rank"]), justify="left"),
    ]


KEY_COLUMN: Final = 3  # "made others wait": the worst ranks of a folded table


def rank_summaries(rep: RanksReport, hosts: Mapping[int, str | None] | None = None) -> dict[str, Any]:
    """The ``rank_summary`` of the ``ranks`` document: each per-rank quantity over every rank."""
    rows = rep.ranks.to_dicts()
    out: dict[str, Any] = {}
    for key in ("inflicted_wait_ns", "own_wait_ns", "last_count", "busy_ns_excess", "launch_gap_ns_excess"):
        s = summarize(((r["rank"], r[key]) for r in rows), key, "count" if key == "last_count" else "ns", hosts=hosts)
        out[key] = None if s is None else s.to_dict()
    return out


def render(rep: RanksReport, console: Console, view: RankView = ALL, hosts: Mapping[int, str | None] | None = None) -> None:
    t = Table(
        title="Stragglers: who arrives last at collectives (ms are totals over the run)",
        title_justify="left",
    )
    _, lines = rank_table(t, rep.ranks.to_dicts(), _table_columns(rep.state), KEY_COLUMN, "high", view, hosts)
    console.print(t)
    for line in ([] if (n := view.note()) is None else [n]) + lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(
        "excess = the late rank's time in the segment before its late arrivals minus the other ranks' mean;"
        " own wait = time this rank waited for the latest arrival",
        highlight=False,
        markup=False,
    )
    for line in summary_lines(rep, view):
        console.print(line, highlight=False, markup=False)
