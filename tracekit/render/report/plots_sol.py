"""Speed of light on the report: measured vs floor per bucket, and % of SOL against sequence length.

Drawn from ``attribute``'s document (its ``sol``: the speed-of-light model's floors per phase,
bucket and instance, ``analyzers/sol``); nothing is recomputed here. Floors are estimates
(docs/sol.md): the titles say so.
"""

from __future__ import annotations

from typing import Any

from .collect import RunDocs
from .common import BUCKET_COLORS, NS_PER_MS, Plot, base_layout, figure, ordered_phases, phase_color

_LABELS = {"attention": "attention", "moe": "MoE", "gemm": "dense GEMM", "allreduce": "allreduce", "comm": "other comm",
           "launch_idle": "launch overhead + idle", "other": "not modelled (norm, elementwise, ...)"}


def _sol(side: RunDocs) -> tuple[list[dict[str, Any]] | None, str | None]:
    doc = side.attribute.value
    if doc is None:
        return None, f"attribute: {side.attribute.why}"
    if doc.get("sol") is None:
        return None, f"% of SOL: {doc.get('sol_why') or 'not available for this run'}"
    return doc["sol"], None


def floor_plot(side: RunDocs, tag: str = "") -> Plot:
    """Per phase: each bucket's floor beside its measured median per instance (profiled window)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    key = f"sol-buckets{tag and '-' + tag}"
    title = f"{tag + ': ' if tag else ''}Measured vs floor per bucket (floors: speed-of-light estimates, docs/sol.md)"
    sol, why = _sol(side)
    if sol is None:
        return Plot(key, title, None, why)
    phases = [p for ph in ordered_phases([p["phase"] for p in sol]) for p in sol if p["phase"] == ph]
    fig = make_subplots(rows=1, cols=len(phases), subplot_titles=[p["phase"] for p in phases], horizontal_spacing=0.05)
    for c, p in enumerate(phases, start=1):
        names = [b for b in _LABELS if b in p["buckets"]]
        for what, key_ns, opacity in (("floor", "floor_ns", 0.45), ("measured (median)", "measured_ns", 1.0)):
            ys = [(p["buckets"][b][key_ns] or 0) / NS_PER_MS for b in names]
            fig.add_trace(go.Bar(
                name=what, x=[_LABELS[b] for b in names], y=ys, opacity=opacity, showlegend=c == 1,
                legendgroup=what, marker_color=[BUCKET_COLORS.get(b, "#bab0ac") for b in names],
                customdata=[[p["buckets"][b][key_ns], p["buckets"][b]["pct_of_sol"]] for b in names],
                hovertemplate=(f"<b>%{{x}}</b> {what}<br>%{{customdata[0]:,d}} ns<br>% of SOL %{{customdata[1]:.0f}}"
                               "<extra></extra>")), row=1, col=c)
    fig.update_layout(**base_layout(title, "", "ms per instance", barmode="group", height=460))
    notes = [f"{p['phase']}: floor {p['floor_ns'] / NS_PER_MS:.3f} ms, measured {p['measured_ns'] / NS_PER_MS:.3f} ms "
             f"({p['clock']}): {p['pct_of_sol']:.0f}% of SOL" + (" — WRONG FLOOR: a measurement beats it"
                                                                   if p["floor_beaten"] else "")
             for p in phases if p["pct_of_sol"] is not None]
    return Plot(key, title, fig, notes=notes)


def pct_seq_plot(side: RunDocs, tag: str = "") -> Plot:
    """Per instance: % of SOL (its own floor / its profiled GPU window) against its sequence length."""
    import plotly.graph_objects as go

    key = f"sol-seq{tag and '-' + tag}"
    title = f"{tag + ': ' if tag else ''}% of SOL vs sequence length, per instance (floor estimate / profiled GPU window)"
    sol, why = _sol(side)
    if sol is None:
        return Plot(key, title, None, why)
    data = []
    for ph in ordered_phases([p["phase"] for p in sol]):
        p = next(x for x in sol if x["phase"] == ph)
        pts = [i for i in p["instances"] if i["pct_of_sol"] is not None]
        if not pts:
            continue
        data.append(go.Scatter(
            x=[i["seq_len"] for i in pts], y=[i["pct_of_sol"] for i in pts], mode="markers", name=ph,
            marker={"color": phase_color(ph)},
            customdata=[[i["floor_ns"], i["window_ns"], i["rank"], i["cycle"]] for i in pts],
            hovertemplate=(f"<b>{ph}</b> rank %{{customdata[2]}} cycle %{{customdata[3]}}<br>seq %{{x}}<br>"
                           "floor %{customdata[0]:,d} ns / window %{customdata[1]:,d} ns = %{y:.1f}%<extra></extra>")))
    if not data:
        return Plot(key, title, None, "no instance with a floor and a GPU window")
    return Plot(key, title, figure(data, base_layout(title, "sequence length (tokens)", "% of SOL", height=420)))
