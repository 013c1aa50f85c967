"""Render ``tracekit ranks``: per-rank straggler table, plain-language lines, JSON document."""

from __future__ import annotations

from typing import Any, Final

import polars as pl
from rich.console import Console
from rich.table import Table

from tracekit.analyzers.reports import RanksReport
from tracekit.documents import RANKS
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


def summary_lines(rep: RanksReport) -> list[str]:
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
    for r in order.iter_rows(named=True):
        if not r["last_count"]:
            continue
        share = r["last_share"] or 0.0
        line = (
            f"rank {r['rank']} arrived last at {r['last_count']}/{r['collectives']} collectives ({share * 100:.0f}%,"
            f" {'well above' if share > 1.5 * fair else 'about'} the {fair * 100:.0f}% of an even spread),"
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
    if len(lines) == 1:
        lines.append("no rank arrived last by 1 µs or more: no straggler.")
    return lines


def to_json(rep: RanksReport) -> dict[str, Any]:
    state = rep.state
    coll = rep.collectives
    return RANKS.make({
        "ranks": rep.ranks.to_dicts(),
        "kernels": rep.kernels.to_dicts(),
        "collectives": {
            "matched": coll.height,
            "with_last_rank": rep.with_last_rank,
            "skew_ns_median": rep.skew_median_ns,
            "skew_ns_max": rep.skew_max_ns,
        },
        "state": {str(k): v for k, v in state_by_rank(state).items()},
        "summary": summary_lines(rep),
    })


def render(rep: RanksReport, console: Console) -> None:
    state = rep.state
    t = Table(
        title="Stragglers: who arrives last at collectives (ms are totals over the run)",
        title_justify="left",
    )
    for col in (
        "rank",
        "collectives",
        "arrived last",
        "made others wait ms",
        "own wait ms",
        "busy excess ms",
        "launch-gap excess ms",
        "host syncs",
        "state",
    ):
        t.add_column(col, justify="left" if col == "state" else "right")
    for r in rep.ranks.iter_rows(named=True):
        share = r["last_share"]
        t.add_row(
            str(r["rank"]),
            str(r["collectives"]),
            f"{r['last_count']} ({share * 100:.0f}%)" if share is not None else str(r["last_count"]),
            ms(unit=False, ns=r["inflicted_wait_ns"]),
            ms(unit=False, ns=r["own_wait_ns"]),
            ms(unit=False, ns=r["busy_ns_excess"]),
            ms(unit=False, ns=r["launch_gap_ns_excess"]),
            "" if r["syncs_before_late"] is None else str(r["syncs_before_late"]),
            _state_text(state, r["rank"]),
        )
    console.print(t)
    console.print(
        "excess = the late rank's time in the segment before its late arrivals minus the other ranks' mean;"
        " own wait = time this rank waited for the latest arrival",
        highlight=False,
        markup=False,
    )
    for line in summary_lines(rep):
        console.print(line, highlight=False, markup=False)
