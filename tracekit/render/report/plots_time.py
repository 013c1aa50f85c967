"""Where the time goes: exclusive buckets per rank and phase, phase time against sequence
length, and the cycle composition (median and p90 per rank). Drawn from ``attribute``'s
document and ``analyzers.composition``; nothing is recomputed here."""

from __future__ import annotations

from typing import Any

import polars as pl

from .collect import RunDocs
from .common import (
    BUCKET_COLORS,
    NS_PER_MS,
    PART_LABELS,
    Plot,
    base_layout,
    bucket_label,
    figure,
    many_ranks,
    ordered_phases,
    phase_color,
    short_name,
    worst_named,
)


def _side_by_side(n: int, titles: list[str]) -> Any:
    from plotly.subplots import make_subplots

    return make_subplots(rows=1, cols=n, shared_yaxes=True, subplot_titles=titles, horizontal_spacing=0.06)


def _bucket_traces(doc: dict[str, Any], phase: str, show_legend: bool, tag: str, seen: set[str]) -> list[Any]:
    import plotly.graph_objects as go

    mode = doc["mode"]
    rows = sorted((p for p in doc["phases"] if p["phase"] == phase), key=lambda p: p["rank"])
    xs = [f"rank {p['rank']}" for p in rows]
    out = []
    for b in doc["bucket_order"]:
        tot = [int(p["buckets_ns"][b]) for p in rows]
        if not any(tot):
            continue
        n = [int(p["instances"]) for p in rows]
        out.append(go.Bar(
            name=bucket_label(b, mode), x=xs, y=[t / max(k, 1) / NS_PER_MS for t, k in zip(tot, n, strict=True)],
            marker_color=BUCKET_COLORS.get(b), legendgroup=b, showlegend=show_legend and b not in seen,
            customdata=[[t, k, p["rank"], b, tag, phase] for t, k, p in zip(tot, n, rows, strict=True)],
            hovertemplate=(f"<b>{bucket_label(b, mode)}</b> · {tag}: {phase} · %{{x}}<br>%{{y:.4f}} ms per instance (mean)"
                           "<br>%{customdata[0]:,d} ns over %{customdata[1]} instances<extra></extra>"),
        ))
        seen.add(b)
    return out


def _bucket_heatmap(doc: dict[str, Any], phase: str, tag: str) -> Any:
    """Many ranks: a phase's buckets (rows) x ranks (columns), each cell the bucket's % of that rank's
    window (one colour scale for every phase: ``coloraxis``), exact ns in the hover."""
    import plotly.graph_objects as go

    mode = doc["mode"]
    rows = sorted((p for p in doc["phases"] if p["phase"] == phase), key=lambda p: p["rank"])
    buckets = [b for b in doc["bucket_order"] if any(int(p["buckets_ns"][b]) for p in rows)]
    totals = [sum(int(p["buckets_ns"][b]) for b in doc["bucket_order"]) for p in rows]
    z = [[None if t <= 0 else 100.0 * int(p["buckets_ns"][b]) / t for p, t in zip(rows, totals, strict=True)]
         for b in buckets]
    cd = [[[int(p["buckets_ns"][b]), int(p["instances"]), int(p["buckets_ns"][b]) / max(int(p["instances"]), 1) / NS_PER_MS]
           for p in rows] for b in buckets]
    return go.Heatmap(
        z=z, x=[p["rank"] for p in rows], y=[bucket_label(b, mode) for b in buckets], customdata=cd, coloraxis="coloraxis",
        hovertemplate=(f"{tag}: {phase} · rank %{{x}} · <b>%{{y}}</b><br>%{{z:.1f}}% of the rank's window<br>"
                       "%{customdata[2]:.4f} ms per instance (mean)<br>%{customdata[0]:,d} ns over %{customdata[1]} "
                       "instances<extra></extra>"),
    )


def _bucket_heatmaps(sides: list[tuple[str, str, dict[str, Any]]], phases: list[str], title: str) -> Plot:
    """Group 1 with many ranks: one heat map per (run, phase), ranks along x; each subplot's title names
    the ranks whose median instance is slowest (the document's ``rank_summary``)."""
    from plotly.subplots import make_subplots

    cells = [(tag, doc, ph) for tag, _, doc in sides for ph in phases]

    def sub(tag: str, doc: dict[str, Any], ph: str) -> str:
        named = worst_named((doc.get("rank_summary") or {}).get(ph), lambda v: f"{v / NS_PER_MS:.3f} ms")
        return f"{tag + ': ' if len(sides) > 1 else ''}{ph}" + (f" — median instance per rank, {named}" if named else "")

    fig = make_subplots(rows=len(cells), cols=1, subplot_titles=[sub(*c) for c in cells], vertical_spacing=0.25 / len(cells))
    runs = "; ".join(f"{t} = {short_name(p)}" for t, p, _ in sides)
    ranks = max(len({p["rank"] for p in d["phases"]}) for _, _, d in sides)
    fig.update_layout(**base_layout(f"{title}<br><sup>{runs}; {ranks} ranks: one column per rank, colour = % of the "
                                    "rank's window; hover a cell for the exact ns</sup>", "", "",
                                    height=140 + 300 * len(cells),
                                    coloraxis={"colorscale": "Viridis", "cmin": 0, "cmax": 100,
                                               "colorbar": {"title": {"text": "% of window"}}}))
    for i, (tag, doc, ph) in enumerate(cells, start=1):
        fig.add_trace(_bucket_heatmap(doc, ph, tag), row=i, col=1)
        fig.update_xaxes(title_text="rank", row=i, col=1)
    fig.update_yaxes(autorange="reversed")  # buckets top-down in table order
    return Plot("buckets", title, fig)


def bucket_plots(a: RunDocs, b: RunDocs | None) -> list[Plot]:
    """Group 1: per phase (one column each), a stacked bar per rank of the exclusive buckets,
    mean per instance; with ``b``, B's run in a second row. More than ``FOLD_ABOVE`` ranks: heat maps
    (``_bucket_heatmaps``), readable at 1,024 ranks."""
    from plotly.subplots import make_subplots

    if a.attribute.value is None:
        return [Plot("buckets", "Exclusive buckets per rank and phase", None, f"attribute: {a.attribute.why}")]
    if a.attribute.value["mode"] == "timing":
        return [Plot("buckets", "Exclusive buckets per rank and phase", None,
                     f"a timing-mode capture: {a.attribute.value['cannot']}")]
    sides = [("A", a.path, a.attribute.value)]
    if b is not None and b.attribute.value is not None and b.attribute.value["mode"] == a.attribute.value["mode"]:
        sides.append(("B", b.path, b.attribute.value))
    phases = ordered_phases(sorted({p["phase"] for _, _, d in sides for p in d["phases"]}))
    host = sides[0][2]["mode"] == "host"
    what = "host range (CPU run: ops on the phase's thread)" if host else "GPU window"
    if any(many_ranks(len({p["rank"] for p in d["phases"]})) for _, _, d in sides):
        return [_bucket_heatmaps(sides, phases, f"Where each rank's {what} went, per phase — exclusive buckets, "
                                                "% of each rank's window")]
    title = f"Where each rank's {what} went, per phase — exclusive buckets, mean per instance (ms)"
    titles = [f"{t}: {ph}" if len(sides) > 1 else ph for t, _, _ in sides for ph in phases]
    fig = make_subplots(rows=len(sides), cols=len(phases), subplot_titles=titles, horizontal_spacing=0.04,
                        vertical_spacing=0.14, shared_yaxes="columns")  # A and B of a phase on one scale
    runs = "; ".join(f"{t} = {short_name(p)}" for t, p, _ in sides)
    fig.update_layout(**base_layout(f"{title}<br><sup>{runs}; hover a segment for the exact ns</sup>", "", "",
                                    barmode="stack", height=480 * len(sides)))
    seen: set[str] = set()
    for r, (tag, _, doc) in enumerate(sides, start=1):
        for c, ph in enumerate(phases, start=1):
            for tr in _bucket_traces(doc, ph, True, tag, seen):
                fig.add_trace(tr, row=r, col=c)
        fig.update_yaxes(title_text=f"{tag + ': ' if len(sides) > 1 else ''}ms per instance", row=r, col=1)
    return [Plot("buckets", title, fig)]


def _time_key(doc: dict[str, Any]) -> tuple[str, str]:
    if doc["mode"] == "timing":  # no profiler: CUDA-event GPU time where the ranks have it
        if any(c.get("gpu_ns") is not None for c in doc.get("cycles") or []):
            return "gpu_ns", "GPU time between CUDA events (unprofiled)"
        return "host_ns", "host range (unprofiled)"
    return ("host_ns", "host range") if doc["mode"] == "host" else ("gpu_window_ns", "GPU window")


def seq_plot(a: RunDocs, b: RunDocs | None) -> Plot:
    """Group 2: phase time per instance against sequence length, one colour per phase; decode is the baseline."""
    import plotly.graph_objects as go

    key = "seq-scatter"
    if a.attribute.value is None:
        return Plot(key, "Phase time vs sequence length", None, f"attribute: {a.attribute.why}")
    sides = [("A", a)] + ([("B", b)] if b is not None and b.attribute.value is not None else [])
    data = []
    seen_seq = False
    has_decode = False
    field, what = _time_key(a.attribute.value)
    for tag, side in sides:
        doc = side.attribute.value
        assert doc is not None
        cyc = doc.get("cycles") or []
        for i, ph in enumerate(ordered_phases(sorted({c["phase"] for c in cyc}))):
            pts = [c for c in cyc if c["phase"] == ph and c["seq_len"] is not None and c.get(field) is not None]
            if not pts:
                continue
            seen_seq = True
            has_decode |= ph == "decode"
            name = f"{ph} (decode baseline)" if ph == "decode" else ph
            data.append(go.Scatter(
                x=[c["seq_len"] for c in pts], y=[c[field] / NS_PER_MS for c in pts], mode="markers",
                name=f"{tag}: {name}" if len(sides) > 1 else name,
                marker={"color": phase_color(ph, i), "symbol": "circle" if tag == "A" else "diamond-open", "size": 8,
                        "opacity": 0.8},
                customdata=[[c[field], c["rank"], c["cycle"], c["batch_size"]] for c in pts],
                hovertemplate=(f"<b>{tag}: {ph}</b><br>seq len %{{x:,d}} tokens<br>%{{y:.4f}} ms {what}"
                               "<br>%{customdata[0]:,d} ns · rank %{customdata[1]} · cycle %{customdata[2]}"
                               " · batch %{customdata[3]}<extra></extra>"),
            ))
    title = f"Phase time per instance vs sequence length ({what} of each instance)"
    if not seen_seq:
        return Plot(key, title, None, "no phase instance in the run records a sequence length (seq_len fact)")
    layout = base_layout(title, "sequence length (tokens)", f"{what} per instance (ms)")
    if not has_decode:
        layout["title"]["text"] += "<br><sup>no decode baseline: the run has no decode phase (give --b-run with speculation off)</sup>"
    return Plot(key, title, figure(data, layout))


def _composition_heatmap(comp: pl.DataFrame, ranks: list[int]) -> Any:
    """Many ranks: rows = each part's median and p90 and the whole cycle's, columns = ranks, colour = ms."""
    import plotly.graph_objects as go

    whole = {r["rank"]: r for r in comp.iter_rows(named=True)}
    ys: list[str] = []
    z: list[list[float | None]] = []
    cd: list[list[int | None]] = []
    for part, label in [*PART_LABELS.items(), ("", "whole cycle")]:
        rows = whole if not part else {r["rank"]: r for r in comp.filter(pl.col("part") == part).iter_rows(named=True)}
        if not rows:
            continue
        for stat in ("median", "p90"):
            col = f"cycle_{stat}_ns" if not part else f"{stat}_ns"
            vals = [None if (row := rows.get(r)) is None else row[col] for r in ranks]
            ys.append(f"{label} {stat}")
            z.append([None if v is None else v / NS_PER_MS for v in vals])
            cd.append(vals)
    return go.Heatmap(z=z, x=ranks, y=ys, customdata=cd, colorscale="Viridis", colorbar={"title": {"text": "ms"}},
                      hovertemplate="rank %{x} · <b>%{y}</b><br>%{z:.4f} ms<br>%{customdata:,d} ns<extra></extra>")


def composition_plot(a: RunDocs, b: RunDocs | None) -> Plot:
    """Group 3: the cycle composition per rank, median and p90 over cycles (host time)."""
    import plotly.graph_objects as go

    key = "cycle-composition"
    title = "Speculative cycle composition per rank: median and p90 over cycles (host time)"
    sides = [(t, s) for t, s in [("A", a), ("B", b)] if s is not None and s.composition.value is not None]
    if not sides:
        return Plot(key, title, None, f"cycle composition: {a.composition.why}")
    fig = _side_by_side(len(sides), [f"{t}: {short_name(s.path)}" for t, s in sides] if b is not None else [])
    heat = False
    for i, (_, side) in enumerate(sides):
        comp: pl.DataFrame = side.composition.value  # type: ignore[assignment]
        ranks = sorted(set(comp.get_column("rank").to_list()))
        if many_ranks(len(ranks)):
            fig.add_trace(_composition_heatmap(comp, ranks), row=1, col=i + 1)
            heat = True
            continue
        for part, label in PART_LABELS.items():
            rows = {r["rank"]: r for r in comp.filter(pl.col("part") == part).iter_rows(named=True)}
            x0, x1, y, cd = [], [], [], []
            for r in ranks:
                for stat in ("median", "p90"):
                    row = rows.get(r)
                    if row is None:
                        continue
                    x0.append(f"rank {r}")
                    x1.append(stat)
                    y.append(row[f"{stat}_ns"] / NS_PER_MS)
                    cd.append([row[f"{stat}_ns"], row["cycles"], row[f"cycle_{stat}_ns"]])
            fig.add_trace(go.Bar(
                name=label, x=[x0, x1], y=y, marker_color=phase_color(part), legendgroup=part, showlegend=i == 0,
                customdata=cd,
                hovertemplate=(f"<b>{label}</b> · %{{x}}<br>%{{y:.4f}} ms<br>%{{customdata[0]:,d}} ns over "
                               "%{customdata[1]} cycles<br>whole cycle at this statistic: %{customdata[2]:,d} ns<extra></extra>"),
            ), row=1, col=i + 1)
        whole = {r["rank"]: r for r in comp.iter_rows(named=True)}  # cycle_* repeat on every part's row
        wx0 = [f"rank {r}" for r in ranks for _ in ("median", "p90")]
        wx1 = [stat for _ in ranks for stat in ("median", "p90")]
        wy = [whole[r][f"cycle_{stat}_ns"] for r in ranks for stat in ("median", "p90")]
        fig.add_trace(go.Scatter(
            name="whole cycle", x=[wx0, wx1], y=[v / NS_PER_MS for v in wy], mode="markers",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#222", "line": {"width": 3, "color": "#222"}},
            legendgroup="cycle", showlegend=i == 0, customdata=wy,
            hovertemplate="<b>whole cycle</b> · %{x}<br>%{y:.4f} ms<br>%{customdata:,d} ns<extra></extra>",
        ), row=1, col=i + 1)
    if heat:
        fig.update_layout(**base_layout(
            title + "<br><sup>one column per rank; each part's own median / p90 (observed values), so the parts need not "
            "add up to the whole cycle's row</sup>", "rank", "", height=520))
        fig.update_yaxes(autorange="reversed")  # parts top-down in cycle order
        return Plot(key, title, fig)
    fig.update_layout(**base_layout(
        title + "<br><sup>each part's own median / p90 (observed values), so a bar's parts need not add up to the whole cycle's (black mark)</sup>",
        "rank · statistic", "ms per cycle", barmode="stack"))
    return Plot(key, title, fig)
