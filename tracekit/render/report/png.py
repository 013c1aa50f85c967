"""PNG copies of the page's figures, through kaleido (plotly's own exporter, driving a
headless Chrome / Chromium found on the machine). docs/report.md says why and what it costs."""

from __future__ import annotations

import os
from pathlib import Path

from tracekit.errors import TracekitError

from .common import Plot
from .page import height

WIDTH, SCALE = 1100, 1


def write_pngs(plots: list[Plot], out_dir: str) -> list[str]:
    """One ``<key>.png`` per drawn plot in ``out_dir`` (created); returns the paths written."""
    try:
        import kaleido
    except ImportError:
        raise TracekitError("--png-dir needs kaleido: pip install 'tracekit[report]'", path=out_dir) from None
    drawn = [p for p in plots if p.figure is not None]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    jobs = [{"fig": p.figure, "path": os.path.join(out_dir, f"{p.key}.png"),
             "opts": {"format": "png", "width": WIDTH, "height": height(p), "scale": SCALE}} for p in drawn]
    try:
        errors = kaleido.write_fig_from_object_sync(jobs, kopts={"mathjax": False})
    except Exception as exc:  # kaleido / choreographer: no browser, browser crashed
        raise TracekitError(f"PNG export failed ({type(exc).__name__}: {exc}); kaleido needs Chrome or Chromium "
                            "(Debian: apt-get install chromium)", path=out_dir) from None
    if errors:
        raise TracekitError(f"PNG export failed: {errors[0]}", path=out_dir)
    missing = [j["path"] for j in jobs if not os.path.exists(str(j["path"]))]
    if missing:
        raise TracekitError(f"PNG export wrote no {missing[0]}", path=out_dir)
    return [str(j["path"]) for j in jobs]
