"""What ``tracekit report`` prints after writing the page."""

from __future__ import annotations

from . import ReportResult


def report_lines(res: ReportResult) -> list[str]:
    lines = [f"wrote {res.path}: {len(res.drawn)} plots, {res.bytes / 1e6:.1f} MB (self-contained; open it in a browser)"]
    lines += [f"  not shown: {key}: {why}" for key, why in res.missing.items()]
    if res.pngs:
        lines.append(f"wrote {len(res.pngs)} PNGs to {res.pngs[0].rsplit('/', 1)[0]}/")
    return lines
