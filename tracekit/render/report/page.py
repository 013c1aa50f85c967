"""The HTML page: plotly.js inline (no network), one section per plot group, each figure's
JSON beside its div, a reason in place of every plot the run cannot give, the source
documents embedded as JSON. ``document.body.dataset.tkRendered`` is set once every
figure has been drawn (the browser test waits for it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from html import escape
from typing import Any, Final

from tracekit import __version__

from .common import Plot

DEFAULT_HEIGHT: Final = 480
CSS: Final = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0 auto;max-width:1280px;padding:0 24px 48px;color:#222}
h1{font-size:22px;margin:20px 0 4px}h2{font-size:18px;margin:32px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:16px}h4{font-size:14px;margin:16px 0 6px}nav a{margin-right:14px}
.tk-plot{width:100%;margin:8px 0}.missing{color:#8a4b00;background:#fff6e5;padding:8px 12px;border-left:3px solid #e8a33d}
.notes{font-size:13px;color:#444;margin:0 0 12px 0;padding-left:18px}.notes li{margin:2px 0;white-space:pre-wrap}
table{border-collapse:collapse;font-size:13px;margin:6px 0 12px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td{max-width:720px;overflow-wrap:anywhere}.meta{color:#555;font-size:13px}
"""
RENDER_JS: Final = """
(function(){
  var cfg={displaylogo:false,responsive:true};
  var divs=document.querySelectorAll('div.tk-plot');
  var jobs=[];
  divs.forEach(function(div){
    var spec=JSON.parse(document.getElementById(div.id+'-spec').textContent);
    jobs.push(Plotly.newPlot(div,spec.data,spec.layout,cfg));
  });
  Promise.all(jobs).then(function(){document.body.dataset.tkRendered=String(jobs.length);},
    function(e){document.body.dataset.tkRendered='error: '+e;});
})();
"""


@dataclass
class Section:
    """One plot group: heading, plots, optional HTML (facts, diff table) and a note when absent."""

    anchor: str
    heading: str
    plots: list[Plot]
    html: str = ""
    absent: str | None = None


def _json_in_html(obj: Any) -> str:
    """JSON safe inside a <script> element: ``<``, ``>``, ``&`` and U+2028/2029 as JSON escapes (the same
    strings once parsed), so no data (``<!--<script>`` in a kernel name) ends the element or puts the
    HTML parser in its script-data escaped states, which blanked every plot of the page."""
    return script_safe(json.dumps(obj, default=str, allow_nan=False))


def script_safe(json_text: str) -> str:
    """JSON text escaped for a <script> element (see ``_json_in_html``): every inline JSON of the page."""
    return json_text.translate(_SCRIPT_SAFE)


_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def height(p: Plot) -> int:
    """The figure's own height (layout.height), else the page default."""
    h = getattr(p.figure.layout, "height", None) if p.figure is not None else None
    return int(h) if h else DEFAULT_HEIGHT


def _plot_html(p: Plot) -> str:
    if p.figure is None:
        return f'<h3>{escape(p.title)}</h3><p class="missing" data-missing="{escape(p.key)}">not shown: {escape(str(p.why))}</p>'
    spec = script_safe(p.figure.to_json(validate=False, pretty=False))
    notes = "".join(f"<li>{escape(n)}</li>" for n in p.notes)
    return (
        f'<div class="tk-plot" id="{escape(p.key)}" style="height:{height(p)}px" data-title="{escape(p.title)}"></div>'
        f'<script type="application/json" id="{escape(p.key)}-spec">{spec}</script>'
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
    )


def page(title: str, meta: str, sections: list[Section], documents: dict[str, Any]) -> str:
    from plotly.offline import get_plotlyjs

    nav = " ".join(f'<a href="#{s.anchor}">{escape(s.heading)}</a>' for s in sections)
    body = []
    for s in sections:
        parts = [f'<section id="{s.anchor}"><h2>{escape(s.heading)}</h2>']
        if s.absent:
            parts.append(f'<p class="missing" data-missing="{s.anchor}">{escape(s.absent)}</p>')
        parts.extend(_plot_html(p) for p in s.plots)
        parts.append(s.html)
        parts.append("</section>")
        body.append("\n".join(parts))
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{escape(title)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head>\n<body>"
        f"<h1>{escape(title)}</h1><p class=\"meta\">{meta}</p><nav>{nav}</nav>\n"
        + "\n".join(body)
        + f'\n<script type="application/json" id="tk-documents">{_json_in_html(documents)}</script>'
        + f"\n<script>{RENDER_JS}</script>\n</body></html>\n"
    )


def meta_line(a_path: str, b_path: str | None) -> str:
    vs = f" against B = <code>{escape(b_path)}</code>" if b_path else ""
    return (
        f"tracekit {escape(__version__)} report of A = <code>{escape(a_path)}</code>{vs}. "
        "Every figure comes from the analyzers behind <code>tracekit attribute / gap / spec / ranks / info / diff</code> "
        "(their <code>--json</code> documents are embedded at the end of this page); times are integer ns from the "
        "capture's clocks, axes in ms, hover for exact values. Self-contained: opens offline."
    )
