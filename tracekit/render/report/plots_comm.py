"""Who waits for whom and what it costs: collective arrival skew, ``gap`` as a waterfall,
speculation economics. Drawn from ``ranks`` / ``gap`` / ``spec`` documents and the
matched collectives behind ``ranks``; the tok/s curve evaluates ``analyzers.spec``'s own
model (``tokens_per_s``) at each accept length."""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from tracekit.analyzers.robust import nearest_rank

from .collect import Got, RunDocs
from .common import (
    BUCKET_COLORS,
    NS_PER_MS,
    Plot,
    base_layout,
    bucket_label,
    figure,
    many_ranks,
    short_name,
    worst_named,
)

MAX_NOTES: Final = 12  # the ranks document's sentences under the skew plot (all of them: --json)


def straggler(ranks_doc: dict[str, Any]) -> dict[str, Any] | None:
    """The rank that made the others wait longest (``ranks``' order), or None."""
    late = [r for r in ranks_doc["ranks"] if r["last_count"]]
    return max(late, key=lambda r: (r["inflicted_wait_ns"], -r["rank"])) if late else None


def skew_plot(side: RunDocs, tag: str = "") -> Plot:
    """Group 4: rank x collective heat map of the wait at each matched collective; the straggler named."""
    import plotly.graph_objects as go

    key = f"collective-skew{tag and '-' + tag}"
    title = f"{tag + ': ' if tag else ''}Collective arrival skew — wait per rank at each collective matched on every rank (µs)"
    arr = side.arrivals
    if side.ranks.value is None:
        return Plot(key, title, None, f"ranks: {side.ranks.why}")
    if arr.is_empty():
        return Plot(key, title, None, side.ranks.value["summary"][0])
    order = arr.group_by("key").agg(pl.col("start_ns").min().alias("_first"), pl.col("phase").first()).sort("_first")
    keys = order.get_column("key").to_list()
    idx = {k: i for i, k in enumerate(keys)}
    ranks = sorted(set(arr.get_column("rank").to_list()))
    z: list[list[float | None]] = [[None] * len(keys) for _ in ranks]
    cd: list[list[list[Any]]] = [[["", 0, ""] for _ in keys] for _ in ranks]
    phases = dict(zip(keys, order.get_column("phase").to_list(), strict=True))
    for k, r, w in arr.select("key", "rank", "wait_ns").iter_rows():
        i, j = ranks.index(r), idx[k]
        z[i][j] = None if w is None else w / 1e3
        cd[i][j] = [k, -1 if w is None else int(w), phases.get(k) or "outside any phase"]
    st = straggler(side.ranks.value)
    who = "no straggler (no rank arrived last by >= 1 µs)" if st is None else (
        f"straggler: rank {st['rank']} — last at {st['last_count']} of {st['collectives']} collectives, "
        f"made the others wait {st['inflicted_wait_ns']:,d} ns in total")
    # one long wait must not wash out the rest: the colour scale stops at the p99 wait (nearest rank) and the
    # waits beyond it are named
    waits = [(w, ranks[i], j) for i, row in enumerate(z) for j, w in enumerate(row) if w is not None]
    top = nearest_rank([w for w, _, _ in waits], 0.99)
    beyond = sorted((x for x in waits if top is not None and x[0] > top), reverse=True)
    if beyond:
        w, r, j = beyond[0]
        who += (f"; colour scale clipped at the p99 wait {top:,.1f} µs: {len(beyond)} wait(s) beyond it, the longest "
                f"{w:,.1f} µs on rank {r} at collective #{j} ({keys[j]})")
    many = many_ranks(len(ranks))  # y = the rank number (ticks thinned), the page grows with the ranks up to a limit
    fig = figure([go.Heatmap(
        z=z, x=list(range(len(keys))), y=ranks if many else [f"rank {r}" for r in ranks], customdata=cd, colorscale="Reds",
        zmin=0, **({"zmax": top} if beyond else {}),
        colorbar={"title": {"text": "wait (µs)"}},
        hovertemplate=(("rank " if many else "") + "%{y} · collective #%{x} (%{customdata[0]}, %{customdata[2]})<br>"
                       "waited %{z:.3f} µs = %{customdata[1]:,d} ns for the last rank<extra></extra>"),
    )], base_layout(f"{title}<br><sup>{who}</sup>", "collective (in order of first arrival)", "rank",
                    **({"height": min(1200, 320 + 2 * len(ranks))} if many else {})))
    notes = list(side.ranks.value["summary"])
    if len(notes) > MAX_NOTES:
        notes = [*notes[:MAX_NOTES], f"... {len(notes) - MAX_NOTES} more lines (tracekit ranks RUN --json: every rank)"]
    waited = (side.ranks.value.get("rank_summary") or {}).get("inflicted_wait_ns")
    if many and waited:
        notes.insert(0, f"made the others wait, over {waited['ranks']} ranks: median {waited['median']:,} ns, p90 "
                        f"{waited['p90']:,} ns; " + worst_named(waited, lambda v: f"{v:,} ns"))
    return Plot(key, title, fig, notes=notes)


def gap_plot(got: Got[dict[str, Any]], key: str, what: str) -> Plot:
    """Group 5: ``gap`` as a waterfall from B's instance to A's, bucket by bucket, in the gap's statistic. The last
    bar is A's own value (not a running total); with medians, whose buckets need not add up, one bar says
    what the buckets leave, so the bars rise exactly the total delta the subtitle gives."""
    import plotly.graph_objects as go

    if got.value is None:
        return Plot(key, f"Gap waterfall: {what} (ms)", None, f"gap: {got.why}")
    doc = got.value
    stat = doc.get("statistic") or "mean"
    title = f"Gap waterfall: {what} — {stat} per instance, bucket by bucket (ms)"
    host = doc.get("mode") == "host"
    field = "host_ns" if host else "gpu_window_ns"
    a, b = doc["a"], doc["b"]
    an = f"A: {a['phase']} ({short_name(a['run'])})"
    bn = f"B: {b['phase']} ({short_name(b['run'])})"
    items = [(bucket_label(k, "host" if host else "gpu"), v["delta_ns"]) for k, v in doc["buckets"].items()
             if v["delta_ns"] != 0]
    rest = doc["total_delta_ns"] - sum(d for _, d in items)
    if abs(rest) >= 0.5:  # medians of buckets do not add up to the median of the window
        items.append((f"not in one bucket ({stat}s of buckets do not add up)", rest))
    labels = [bn] + [k for k, _ in items] + [an]
    vals = [b[field] / NS_PER_MS] + [d / NS_PER_MS for _, d in items] + [a[field] / NS_PER_MS]
    exact = [b[field]] + [d for _, d in items] + [a[field]]
    fig = figure([go.Waterfall(
        x=labels, y=vals, measure=["absolute"] + ["relative"] * len(items) + ["absolute"],
        customdata=exact, connector={"line": {"color": "#999"}},
        increasing={"marker": {"color": BUCKET_COLORS["allreduce"]}},
        decreasing={"marker": {"color": BUCKET_COLORS["gemm"]}},
        totals={"marker": {"color": "#4c78a8"}},
        hovertemplate=f"<b>%{{x}}</b><br>%{{y:+.4f}} ms<br>%{{customdata:,.1f}} ns ({stat} per instance)<extra></extra>",
    )], base_layout(f"{title}<br><sup>{'host range' if host else 'GPU window'}: {bn} -> {an}; "
                    f"total {doc['total_delta_ns']:+,.1f} ns per instance ({stat}; profiled window)</sup>",
                    "bucket", f"ms per instance ({stat})", showlegend=False))
    return Plot(key, title, fig, notes=[str(x) for x in doc.get("explanations", [])])


def spec_plot(side: RunDocs, tag: str = "") -> Plot:
    """Group 6: tok/s per sequence against accept length at the measured cycle, break-even and target."""
    import plotly.graph_objects as go

    from tracekit.analyzers.spec_model import tokens_per_s

    key = f"spec-economics{tag and '-' + tag}"
    title = f"{tag + ': ' if tag else ''}Speculation economics — tok/s per sequence vs accept length at the measured cycle time"
    if side.spec.value is None:
        return Plot(key, title, None, f"spec: {side.spec.why}")
    doc = side.spec.value
    data: list[Any] = []
    shapes: list[dict[str, Any]] = []
    notes = list(doc["summary"])
    x_max = 1.0
    for i, bk in enumerate(doc["buckets"]):
        bs, cyc, k = bk["batch_size"], bk["cycle_ns"], bk["draft_tokens"]
        src = f", {bk['timing_source']} timers" if bk.get("timing_source") else ""
        lim = max(float(k or 0), (bk["break_even_tokens"] or 0) - 1, (bk["needed_tokens"] or 0) - 1, bk["accept_len"] or 0)
        x_max = max(x_max, lim * 1.15)
        steps = 60
        xs = [lim * 1.15 * j / steps for j in range(steps + 1)]
        data.append(go.Scatter(
            x=xs, y=[tokens_per_s(x + 1, cyc) for x in xs], mode="lines", name=f"bs={bs}: cycle {cyc:,.0f} ns{src}",
            line={"width": 2}, hovertemplate="accept length %{x:.2f}<br>%{y:.2f} tok/s per sequence<extra></extra>",
        ))
        if bk["accept_len"] is not None and bk["tps_per_seq"] is not None:
            data.append(go.Scatter(
                x=[bk["accept_len"]], y=[bk["tps_per_seq"]], mode="markers", name=f"bs={bs}: measured",
                marker={"size": 12, "symbol": "star"},
                customdata=[[bk["tokens_per_cycle"], bk["accept_len_source"], bk["cycles"]]],
                hovertemplate=("<b>measured</b><br>accept length %{x:.4f} (%{customdata[1]})<br>%{y:.3f} tok/s per "
                               "sequence<br>%{customdata[0]:.4f} tokens/cycle over %{customdata[2]} cycles<extra></extra>"),
            ))
        if bk["decode_tps_per_seq"] is not None and bk["break_even_tokens"] is not None:
            be = bk["break_even_tokens"] - 1
            data.append(go.Scatter(
                x=[0, x_max], y=[bk["decode_tps_per_seq"]] * 2, mode="lines", name=f"bs={bs}: plain decode",
                line={"dash": "dash", "color": "#222"},
                hovertemplate=f"plain decode %{{y:.3f}} tok/s ({bk['decode_step_ns']:,.0f} ns/step)<extra></extra>",
            ))
            data.append(go.Scatter(
                x=[be], y=[bk["decode_tps_per_seq"]], mode="markers+text", name=f"bs={bs}: break-even",
                text=[f"break-even {be:.2f}"], textposition="top center", marker={"size": 11, "symbol": "x", "color": "#222"},
                hovertemplate="break-even accept length %{x:.4f}<br>(%{y:.3f} tok/s)<extra></extra>",
            ))
        if bk["target_tps"] is not None:
            data.append(go.Scatter(
                x=[0, x_max], y=[bk["target_tps"]] * 2, mode="lines", name=f"bs={bs}: target {bk['target_tps']:g} tok/s",
                line={"dash": "dot", "color": "#e45756"}, hovertemplate="target %{y:.3f} tok/s<extra></extra>",
            ))
            if bk["needed_tokens"] is not None:
                need = bk["needed_tokens"] - 1
                data.append(go.Scatter(
                    x=[need], y=[bk["target_tps"]], mode="markers", name=f"bs={bs}: accept length needed",
                    marker={"size": 11, "symbol": "triangle-up", "color": "#e45756"},
                    hovertemplate="accept length needed %{x:.4f} for %{y:.3f} tok/s<extra></extra>",
                ))
        if k is not None and i == 0:
            shapes.append({"type": "line", "x0": k, "x1": k, "yref": "paper", "y0": 0, "y1": 1,
                           "line": {"dash": "dot", "color": "#999"}})
    sub = "no target given (tracekit report --target-tps N)" if doc["target_tps"] is None else f"target {doc['target_tps']:g} tok/s"
    layout = base_layout(f"{title}<br><sup>rank {doc['rank']} ({doc['rank_choice']}); decode step: {doc['decode_source']};"
                         f" {sub}; dotted grey line: k drafted tokens</sup>",
                         "accept length (accepted draft tokens per cycle, bonus excluded)", "tok/s per sequence",
                         shapes=shapes)
    return Plot(key, title, figure(data, layout), notes=notes)
