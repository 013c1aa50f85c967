"""NCCL settings read from kernel names (analyzers.nccl_mix) and the recorded environment
(tracekit.env_view), as `info` and `diff` print them. Renderers only: they read the documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tracekit.manifest import RANK_IDENTITY
from tracekit.ranklist import format_rank_list, rank_noun
from tracekit.render.units import ms

# the NCCL variables that choose algorithm and protocol: info says when no rank had them
TUNING_VARS = ("NCCL_ALGO", "NCCL_PROTO")
# what a kernel name can say (tracekit/nccl.py has the sources)
NAME_NOTE = ("setting = the kernel NCCL launched, as its name says: NCCL 2.19+ names only RING or TREE and "
             "protocol LL (NVLS, CollNet, PAT and the LL128 / SIMPLE protocols run inside those kernels), "
             "NCCL <= 2.18 names the algorithm and LL; symmetric-memory kernels (ncclSymkDevKernel, 2.27+) "
             "name the algorithm that ran (exact). Counts and ms: kernels in the profiled window, sum of durations.")


def _groups(rows: Sequence[Mapping[str, Any]]) -> list[tuple[list[int], list[Mapping[str, Any]]]]:
    """Ranks with the same set of (collective, dtype, setting), in rank order."""
    by_rank: dict[int, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_rank.setdefault(int(r["rank"]), []).append(r)
    groups: dict[frozenset[tuple[Any, ...]], list[int]] = {}
    for rank in sorted(by_rank):
        key = frozenset((r["collective"], r["dtype"], r["setting"]) for r in by_rank[rank])
        groups.setdefault(key, []).append(rank)
    out = []
    for ranks in groups.values():
        out.append((ranks, [r for rank in ranks for r in by_rank[rank]]))
    return out


def render_nccl_mix(rows: Sequence[Mapping[str, Any]], console: Console) -> None:
    """The per-rank table of NCCL kernels by collective, dtype and setting (ranks that ran the same
    set share a row group)."""
    if not rows:
        return
    t = Table(title="NCCL kernels per rank, by what their names say", title_justify="left")
    for c in ("ranks", "collective", "dtype", "setting", "kernels per rank", "ms per rank (mean)"):
        t.add_column(c, justify="right" if c.startswith(("kernels", "ms")) else "left")
    for ranks, grp in _groups(rows):
        acc: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
        for r in grp:
            acc.setdefault((r["collective"], r["dtype"], r["setting"], r["exact"]), []).append(r)
        first = True
        for (coll, dtype, setting, exact), rs in sorted(acc.items(), key=lambda kv: -sum(x["total_ns"] for x in kv[1])):
            counts = [int(x["count"]) for x in rs]
            per = f"{min(counts):,}" if min(counts) == max(counts) else f"{min(counts):,}-{max(counts):,}"
            mean_ns = sum(int(x["total_ns"]) for x in rs) // len(ranks)
            t.add_row(format_rank_list(ranks) if first else "", coll, dtype or "-",
                      setting + (" (exact)" if exact else ""), per, ms(mean_ns, unit=False, grouping=True))
            first = False
    console.print(t)
    console.print(Text(NAME_NOTE, style="dim"), soft_wrap=True)


def render_environment(env: Mapping[str, Any], rows: Sequence[Any], console: Console) -> None:
    """Every variable each rank saw (``tracekit.env_view.environment_rows``): value and ranks; ``*``
    where tracekit set it."""
    if not rows:
        console.print("environment: none recorded (ingested traces carry no environment; capture records it per rank)")
        return
    t = Table(title="environment each rank saw at start (* = set by tracekit's capture, not by you)", title_justify="left")
    for c in ("variable", "value", "ranks"):
        t.add_column(c)
    by_var: dict[str, list[Any]] = {}
    for row in rows:
        by_var.setdefault(row.var, []).append(row)
    for var, vrows in by_var.items():
        if var in RANK_IDENTITY and len(vrows) > 1 and all(len(r.ranks) == 1 and r.value is not None for r in vrows):
            t.add_row(var, Text("(each rank its own)", style="dim"), rank_noun(r.ranks[0] for r in vrows))
            continue
        for r in vrows:
            val = Text("(absent)", style="bold red" if var.startswith("NCCL_") else "yellow") if r.value is None else Text(
                r.value + (" *" if r.set_by_tracekit else ""), style="cyan" if r.set_by_tracekit else "")
            t.add_row(var, val, rank_noun(r.ranks))
    console.print(t)
    unset = [v for v in TUNING_VARS if v not in by_var]
    if unset:
        console.print(Text(f"{', '.join(unset)}: set on no rank (NCCL chose by itself)", style="dim"))


def mix_line(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per group of ranks: ``ranks 0-7: AllReduce bf16 RING/LL x460, AllGather RING/LL x60``
    (kernels per rank: the group's first rank), ``;`` between groups; ``none`` without NCCL kernels."""
    parts = []
    for ranks, grp in _groups(rows):
        first = [r for r in grp if int(r["rank"]) == ranks[0]]
        items = ", ".join(f"{r['collective']}{' ' + r['dtype'] if r['dtype'] else ''} {r['setting']} x{int(r['count']):,}"
                          for r in first)
        parts.append(f"{rank_noun(ranks)}: {items}")
    return "; ".join(parts) or "none"


def change_lines(changes: Sequence[Mapping[str, Any]]) -> list[str]:
    """``diff``'s lines for ranks whose NCCL kernel settings changed (empty: none changed)."""
    out = []
    for c in changes:
        old = ", ".join(f"{k} x{n:,}" for k, n in sorted(c["old"].items())) or "none"
        new = ", ".join(f"{k} x{n:,}" for k, n in sorted(c["new"].items())) or "none"
        out.append(f"NCCL kernels changed on rank {c['rank']} (from their names): {old} -> {new}")
    return out


__all__ = ["NAME_NOTE", "TUNING_VARS", "change_lines", "mix_line", "render_environment", "render_nccl_mix"]
