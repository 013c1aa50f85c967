"""What every plot module shares: the Plot record, bucket names and colours, axis units.

Axes are in ms (or µs where named) for reading; every hover shows the exact integer ns
the analyzers returned, so a reader can check the page against ``--json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from tracekit.render.attribute import LABELS, phase_order
from tracekit.render.host_attribute import HOST_LABELS
from tracekit.render.rank_fold import FOLD_ABOVE

NS_PER_MS: Final = 1e6

# one colour per bucket on every plot of the page (both runs)
BUCKET_COLORS: Final = {
    "attention": "#4c78a8",
    "moe": "#f58518",
    "gemm": "#54a24b",
    "norm": "#b279a2",
    "elementwise": "#9d755d",
    "sampling": "#eeca3b",
    "other": "#bab0ac",
    "memory": "#72b7b2",
    "allreduce": "#e45756",
    "comm": "#ff9da6",
    "launch_overhead": "#79706e",
    "idle": "#d8d8d8",
    "host_overhead": "#79706e",
}
PHASE_COLORS: Final = {
    "draft": "#4c78a8",
    "verify": "#e45756",
    "draft_extend": "#54a24b",
    "decode": "#222222",
    "prefill": "#b279a2",
    "host_between": "#bab0ac",
}
PART_LABELS: Final = {"draft": "draft", "verify": "verify", "draft_extend": "draft-extend", "host_between": "between"}
FONT: Final = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 13}


@dataclass
class Plot:
    """One figure of the page, or the reason the run cannot give it (``figure`` None)."""

    key: str  # stable id: the div's id and the PNG's file name
    title: str
    figure: Any | None  # plotly.graph_objects.Figure
    why: str | None = None
    notes: list[str] = field(default_factory=list)  # the analyzer's own sentences, printed under the plot


def many_ranks(n: int) -> bool:
    """More ranks than a text table shows in full (``rank_fold.FOLD_ABOVE``): plots draw heat maps
    (x = rank) instead of one bar per rank."""
    return n > FOLD_ABOVE


def worst_named(summary: dict[str, Any] | None, fmt: Any) -> str:
    """``slowest: rank 1 (host a) 33.4 ms, ...`` from a document's ``rank_summary`` item ('' without one)."""
    if not summary:
        return ""
    return "highest: " + ", ".join(
        f"rank {w['rank']}{'' if w.get('host') is None else ' (' + str(w['host']) + ')'} {fmt(w['value'])}"
        for w in summary["worst"])


def bucket_label(bucket: str, mode: str) -> str:
    return (HOST_LABELS if mode == "host" else LABELS).get(bucket, bucket)


def phase_color(phase: str, i: int = 0) -> str:
    fallback = ("#17becf", "#bcbd22", "#8c564b", "#e377c2", "#7f7f7f")
    return PHASE_COLORS.get(phase, fallback[i % len(fallback)])


def ordered_phases(phases: list[str]) -> list[str]:
    return phase_order(phases)


def short_name(path: str) -> str:
    """The run's file name for legends (the full path is in the facts table)."""
    return path.rstrip("/").rsplit("/", 1)[-1]


def base_layout(title: str, x_title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.0, "xanchor": "left", "font": {"size": 15}},
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}},
        "font": FONT,
        "template": "plotly_white",
        "margin": {"l": 70, "r": 30, "t": 70, "b": 60},
        "legend": {"orientation": "v"},
        "hoverlabel": {"namelength": -1},
        **extra,
    }


def figure(data: list[Any], layout: dict[str, Any]) -> Any:
    import plotly.graph_objects as go

    return go.Figure(data=data, layout=layout)


__all__ = [
    "BUCKET_COLORS",
    "NS_PER_MS",
    "PART_LABELS",
    "Plot",
    "base_layout",
    "bucket_label",
    "figure",
    "many_ranks",
    "ordered_phases",
    "phase_color",
    "short_name",
    "worst_named",
]
