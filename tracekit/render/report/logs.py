"""``tracekit report`` of one or two log runs (or log files): throughput and accept length against
tokens per request, per interval and as medians per tokens-per-request bin, the logs' facts and
the diff, on the report's page (``page``). Reads the frozen reports of ``analyzers/logs`` only."""

from __future__ import annotations

from html import escape
from typing import Any

from tracekit.analyzers.logs.curve import LogCurve

from . import ReportResult
from .common import Plot, base_layout, figure, short_name
from .page import Section, page

SIDE_COLORS = {"A": "#1f77b4", "B": "#d62728"}
METRICS = (("per_req_tps", "throughput per request (tok/s)"), ("gen_throughput", "throughput, all requests (tok/s)"),
           ("accept_length", "accept length (tokens per verify, bonus included)"))


def _curve_plot(key: str, label: str, curves: list[tuple[str, LogCurve]]) -> Plot:
    import plotly.graph_objects as go

    data: list[Any] = []
    for tag, c in curves:
        pts = [p for p in c.points if getattr(p, key) is not None]
        if not pts:
            continue
        name = f"{tag}: {short_name(c.path)}" if len(curves) > 1 else short_name(c.path)
        for graph, symbol, gname in ((True, "circle", "graph"), (False, "x", "eager"), (None, "diamond", "graph ?")):
            mine = [p for p in pts if p.graph is graph]
            if mine:
                data.append(go.Scatter(
                    x=[p.tokens_per_req for p in mine], y=[getattr(p, key) for p in mine], mode="markers",
                    name=f"{name}, {gname} (intervals)", marker={"color": SIDE_COLORS[tag], "symbol": symbol, "opacity": 0.5},
                    customdata=[[p.batch, p.line] for p in mine],
                    hovertemplate="tokens/req %{x:.0f}<br>" + label + " %{y:.3f}<br>batch %{customdata[0]}"
                                  "<br>line %{customdata[1]}<extra></extra>"))
        bins = [b for b in c.bins if getattr(b, key).median is not None]
        data.append(go.Scatter(
            x=[(b.tokens_lo + b.tokens_hi) / 2 for b in bins], y=[getattr(b, key).median for b in bins],
            mode="lines+markers", name=f"{name}, median per {c.tokens_width}-token bin",
            line={"color": SIDE_COLORS[tag]},
            customdata=[[b.tokens_lo, b.tokens_hi, getattr(b, key).p90, getattr(b, key).mean, getattr(b, key).n]
                        for b in bins],
            hovertemplate="tokens/req %{customdata[0]}-%{customdata[1]}<br>median %{y:.3f}, p90 %{customdata[2]:.3f}, "
                          "mean %{customdata[3]:.3f} (n=%{customdata[4]})<extra></extra>"))
    title = f"{label} vs tokens per request (#token / #running-req)"
    if not data:
        return Plot(f"log-{key}", title, None, "no interval of the log(s) has this value and a token count")
    notes = [f"{short_name(c.path)}: {c.left_out:,} intervals without a token count or running request left out"
             for _t, c in curves if c.left_out]
    return Plot(f"log-{key}", title, figure(data, base_layout(title, "tokens per request", label)), notes=notes)


def build_log_report(out: str, curves: list[tuple[str, LogCurve]], facts: list[tuple[str, list[str]]],
                     diff_lines: list[str] | None, documents: dict[str, Any], png_dir: str | None = None) -> ReportResult:
    try:
        import plotly  # noqa: F401
    except ImportError:
        from tracekit.errors import TracekitError

        raise TracekitError("tracekit report needs plotly: pip install 'tracekit[report]'", path=curves[0][1].path) from None
    from tracekit.outputs import atomic_write

    plots = [_curve_plot(k, label, curves) for k, label in METRICS]
    facts_html = "\n".join(f"<h3>{escape(tag)}</h3><pre>{escape(chr(10).join(lines))}</pre>" for tag, lines in facts)
    sections = [
        Section("log-curves", "1. Throughput and accept length against tokens per request", plots),
        Section("log-facts", "2. What the logs cover (tracekit info)", [], facts_html),
        Section("log-diff", "3. A vs B at matched batch, tokens per request and graph use (tracekit diff)", [],
                "" if diff_lines is None else f"<pre>{escape(chr(10).join(diff_lines))}</pre>",
                None if diff_lines is not None else "no --b-run given: tracekit report OLD.log --b-run NEW.log adds the "
                "second log to every plot and the binned diff"),
    ]
    a = curves[0][1].path
    b = curves[1][1].path if len(curves) > 1 else None
    title = f"tracekit report: {short_name(a)}" + (f" vs {short_name(b)}" if b else "")
    meta = (f"Engine logs: A = <code>{escape(a)}</code>" + (f", B = <code>{escape(b)}</code>" if b else "")
            + ". Every point is one stats interval the engine printed (its own clock, unprofiled); lines are the "
            "nearest-rank median per tokens-per-request bin (hover: p90, mean, n). Self-contained: opens offline.")
    html = page(title, meta, sections, documents)
    with atomic_write(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(html)
    res = ReportResult(out, [p.key for p in plots if p.figure is not None],
                       {p.key: str(p.why) for p in plots if p.figure is None}, bytes=len(html.encode()))
    if png_dir is not None:
        from .png import write_pngs

        res.pngs = write_pngs(plots, png_dir)
    return res


__all__ = ["build_log_report"]
