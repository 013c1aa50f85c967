"""Render the `tracekit info` document (tracekit.summary.run_summary) as rich tables."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.finalize.categories import CATEGORIES
from tracekit.ranklist import ranks_by_reason
from tracekit.render.nccl import render_environment, render_nccl_mix
from tracekit.render.units import ms


def _ms(ns: int | None) -> str:
    return ms(ns, unit=False, grouping=True, none="-")


def _short(v: Any, width: int = 40) -> str:
    s = "(absent)" if v is None else (v if isinstance(v, str) else json.dumps(v, default=str))
    return s if len(s) <= width else s[: width - 1] + "…"


def render_info(doc: Mapping[str, Any], console: Console, *, max_differences: int = 40,
                env_rows: Sequence[Any] | None = None) -> None:
    """The info tables; ``env_rows``: ``tracekit.env_view.environment_rows`` of the run's manifest."""
    ranks = doc.get("ranks", [])
    missing = doc.get("missing_ranks") or {}
    head = Text()
    head.append("run: ", style="bold")
    head.append(f"{doc.get('source') or '?'} · world size {doc.get('world_size')} · ranks present "
                f"{', '.join(str(r) for r in doc.get('ranks_present', [])) or 'none'} · "
                f"{doc.get('events', 0):,} events over {_ms(doc.get('span_ns'))} ms")
    console.print(head)
    if missing:
        for rs, why in ranks_by_reason(missing):
            console.print(Text(f"missing {rs}: {why}", style="bold red"))
    kinds = doc.get("events_by_kind") or {}
    console.print("events by kind: " + ", ".join(f"{k} {n:,}" for k, n in kinds.items()))

    t = Table(title="per rank (ms; busy = union of kernels+copies+memsets, comm = union of allreduce+comm kernels)")
    for col in ("rank", "devices", "kernels", "kernel", "busy", "span", "comm", "busy %"):
        t.add_column(col, justify="right" if col not in ("devices",) else "left")
    for r in ranks:
        span = r.get("span_ns") or 0
        pct = f"{100.0 * r['busy_ns'] / span:.1f}" if span else "-"
        t.add_row(
            str(r["rank"]), ", ".join(r.get("devices") or []) or "-", f"{r['kernels']:,}", _ms(r["kernel_ns"]),
            _ms(r["busy_ns"]), _ms(r["span_ns"]), _ms(r["comm_ns"]), pct,
        )
    console.print(t)

    present = [c for c in CATEGORIES if any(c in (r.get("by_category_ns") or {}) for r in ranks)]
    if present:
        ct = Table(title="time by category (ms, sum of durations)")
        ct.add_column("rank", justify="right")
        for c in present:
            ct.add_column(c, justify="right")
        for r in ranks:
            bc = r.get("by_category_ns") or {}
            ct.add_row(str(r["rank"]), *[_ms(bc.get(c)) if c in bc else "-" for c in present])
        console.print(ct)

    versions = doc.get("versions") or {}
    if versions:
        vt = Table(title="versions")
        vt.add_column("what")
        vt.add_column("value (ranks)")
        for name, per_rank in versions.items():
            groups: dict[str, list[str]] = {}
            for r, v in per_rank.items():
                groups.setdefault(_short(v), []).append(str(r))
            text = Text(" | ".join(f"{v} ({','.join(rs)})" for v, rs in groups.items()),
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
            vals = "; ".join(f"{k}={_short(v, 24)}" for k, v in (d.get("values") or {}).items())
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
