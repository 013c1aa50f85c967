"""Render the `tracekit info` document (tracekit.summary.run_summary) as rich tables."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.finalize.categories import CATEGORIES
from tracekit.ranklist import format_rank_list, ranks_by_reason
from tracekit.render.nccl import render_environment, render_nccl_mix
from tracekit.render.rank_fold import ALL, Column, RankView, count, rank_table
from tracekit.render.units import ms


def _ms(ns: int | None) -> str:
    return ms(ns, unit=False, grouping=True, none="-")


def _ms_f(v: float) -> str:
    return _ms(round(v))


def _short(v: Any, width: int = 40) -> str:
    s = "(absent)" if v is None else (v if isinstance(v, str) else json.dumps(v, default=str))
    return s if len(s) <= width else s[: width - 1] + "…"


def _grouped(values: Mapping[Any, Any], width: int) -> list[tuple[str, str]]:
    """rank -> value as (value, ranks) pairs, the ranks that share a value together (``ranks 0-7,12``,
    ``ranklist.ranks_by_reason``); a key that is not a rank (``launcher``) stays on its own."""
    ranks = {int(r): _short(v, width) for r, v in values.items() if str(r).isdigit()}
    return ([(_short(v, width), str(r)) for r, v in values.items() if not str(r).isdigit()]
            + [(v, rs) for rs, v in ranks_by_reason(ranks)])


def _rank_columns() -> list[Column]:
    def busy_pct(r: Mapping[str, Any]) -> float | None:
        span = r.get("span_ns") or 0
        return 100.0 * r["busy_ns"] / span if span else None

    def num(k: str) -> Any:
        return lambda r: r[k]

    return [
        Column("rank", lambda r: str(r["rank"])),
        Column("devices", lambda r: ", ".join(r.get("devices") or []) or "-", justify="left"),
        Column("kernels", lambda r: f"{r['kernels']:,}", num("kernels"), count),
        Column("kernel", lambda r: _ms(r["kernel_ns"]), num("kernel_ns"), _ms_f),
        Column("busy", lambda r: _ms(r["busy_ns"]), num("busy_ns"), _ms_f),
        Column("span", lambda r: _ms(r["span_ns"]), num("span_ns"), _ms_f),
        Column("comm", lambda r: _ms(r["comm_ns"]), num("comm_ns"), _ms_f),
        Column("busy %", lambda r: "-" if (p := busy_pct(r)) is None else f"{p:.1f}", busy_pct, lambda v: f"{v:.1f}"),
    ]


def render_info(doc: Mapping[str, Any], console: Console, *, max_differences: int = 40,
                env_rows: Sequence[Any] | None = None, view: RankView = ALL,
                hosts: Mapping[int, str | None] | None = None) -> None:
    """The info tables; ``env_rows``: ``tracekit.env_view.environment_rows`` of the run's manifest;
    ``view``: ``--ranks`` / ``--all-ranks`` (per-rank tables of more than 16 ranks are folded:
    render.rank_fold); ``hosts``: rank -> host, for the ranks a folded table names."""
    ranks = doc.get("ranks", [])
    missing = doc.get("missing_ranks") or {}
    head = Text()
    head.append("run: ", style="bold")
    head.append(f"{doc.get('source') or '?'} · world size {doc.get('world_size')} · ranks present "
                f"{format_rank_list(doc.get('ranks_present', [])) or 'none'} · "
                f"{doc.get('events', 0):,} events over {_ms(doc.get('span_ns'))} ms")
    console.print(head)
    if missing:
        for rs, why in ranks_by_reason(missing):
            console.print(Text(f"missing {rs}: {why}", style="bold red"))
    kinds = doc.get("events_by_kind") or {}
    console.print("events by kind: " + ", ".join(f"{k} {n:,}" for k, n in kinds.items()))

    t = Table(title="per rank (ms; busy = union of kernels+copies+memsets, comm = union of allreduce+comm kernels)")
    _, lines = rank_table(t, ranks, _rank_columns(), 4, "high", view, hosts)
    console.print(t)
    for line in ([] if (n := view.note()) is None else [n]) + lines:
        console.print(line, highlight=False, markup=False, soft_wrap=True)

    present = [c for c in CATEGORIES if any(c in (r.get("by_category_ns") or {}) for r in ranks)]
    if present:
        ct = Table(title="time by category (ms, sum of durations)")
        most = max(present, key=lambda c: sum((r.get("by_category_ns") or {}).get(c, 0) for r in ranks))

        def cat(c: str) -> Column:
            def value(r: Mapping[str, Any]) -> float | None:
                v = (r.get("by_category_ns") or {}).get(c)
                return None if v is None else float(v)

            return Column(c, lambda r: "-" if (v := value(r)) is None else _ms_f(v), value, _ms_f)

        cols = [Column("rank", lambda r: str(r["rank"])), *[cat(c) for c in present]]
        _, lines = rank_table(ct, ranks, cols, 1 + present.index(most), "high", view, hosts)
        console.print(ct)
        for line in lines[:1]:  # the fold line; the worst ranks are in the table
            console.print(line, highlight=False, markup=False, soft_wrap=True)

    versions = doc.get("versions") or {}
    if versions:
        vt = Table(title="versions")
        vt.add_column("what")
        vt.add_column("value (ranks)")
        for name, per_rank in versions.items():
            groups = _grouped(per_rank, 40)
            text = Text(" | ".join(f"{v} ({rs})" for v, rs in groups),
                        style="yellow" if len(groups) > 1 else "")
            vt.add_row(name, text)
        console.print(vt)

    diffs = doc.get("differences") or []
    if diffs:
        dt = Table(title=f"manifest differences ({len(diffs)})")
        dt.add_column("key")
        dt.add_column("what")
        dt.add_column("values")
        for d in diffs[:max_differences]:
            style = "bold red" if d.get("loud") else ("yellow" if d.get("kind") != "ranks_differ" else "")
            what = {"launcher_only": "set in launcher, absent in rank(s)", "launcher_differs": "launcher != rank(s)",
                    "ranks_differ": "ranks differ"}.get(d.get("kind", ""), d.get("kind", ""))
            vals = "; ".join(f"{rs}={v}" for v, rs in _grouped(d.get("values") or {}, 24))
            dt.add_row(Text(d["key"], style=style), Text(what, style=style), vals)
        console.print(dt)
        if len(diffs) > max_differences:
            console.print(f"… {len(diffs) - max_differences} more (see --json)")
    else:
        console.print("manifest: no differences between ranks (nor between launcher and ranks, where recorded)")

    render_nccl_mix(doc.get("nccl") or [], console)
    if env_rows is not None:
        render_environment(doc.get("environment") or {}, env_rows, console)

    unmatched = doc.get("unmatched_kernels") or []
    if unmatched:
        ut = Table(title="kernels no category rule matched (counted as 'other'; extend with --categories)")
        ut.add_column("kernel")
        ut.add_column("count", justify="right")
        ut.add_column("ms", justify="right")
        for u in unmatched:
            ut.add_row(_short(u["normalized"], 70), f"{u['count']:,}", _ms(u["total_ns"]))
        console.print(ut)
    for note in doc.get("notes") or []:
        console.print(Text(note, style="yellow"))
    for s in doc.get("skipped") or []:
        console.print(Text(f"skipped at ingest: {s['path']}: {s['reason']}", style="yellow"))
