"""The run's facts and the ``diff`` table as HTML: ranks, devices, versions, profile mode,
dilation per phase, environment differences between ranks, outliers, collective issues.
Every value comes from the ``info`` / ``attribute`` / ``diff`` documents or the manifest."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

from tracekit.ranklist import format_rank_list, ranks_by_reason
from tracekit.render.diff import bucket_label
from tracekit.render.rank_fold import STATS, fold_line
from tracekit.render.units import dur

from .collect import Got, RunDocs
from .common import many_ranks, short_name


def table(head: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "") -> str:
    h = "".join(f"<th>{escape(str(c))}</th>" for c in head)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape('' if v is None else str(v))}</td>" for v in r) + "</tr>" for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def _ns(v: Any) -> str:
    return "n/a" if v is None else f"{int(v):,d} ns ({dur(v)})"


def find_key(obj: Any, key: str) -> Any:
    """The first value stored under ``key`` anywhere in a manifest (profile_mode lives in the capture config)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            got = find_key(v, key)
            if got is not None:
                return got
    return None


def _outliers(doc: dict[str, Any]) -> tuple[list[list[Any]], bool]:
    """Rows of every ``outliers`` list in ``attribute``'s (phase, rank) items; False when the
    document has no such key (an attribute without outlier detection)."""
    rows: list[list[Any]] = []
    seen = False
    for p in doc["phases"]:
        if "outliers" not in p:
            continue
        seen = True
        for o in p["outliers"] or []:
            t = o.get("gpu_window_ns", o.get("host_ns"))
            rows.append([p["phase"], o.get("rank", p["rank"]), o.get("cycle"), _ns(t), o.get("reason", "")])
    return rows, seen


RANK_HEAD = ("rank", "devices", "kernels", "kernel time", "GPU busy", "GPU span", "comm")
SUMMARISED = ("kernel_ns", "busy_ns", "span_ns", "comm_ns")


def _rank_row(r: dict[str, Any]) -> list[Any]:
    return [r["rank"], ", ".join(r["devices"]) or ("CPU only" if r["cpu_only"] else "unknown"), f"{r['kernels']:,d}",
            *[_ns(r[k]) for k in SUMMARISED]]


def _rank_rows(info: dict[str, Any]) -> list[str]:
    """The info document's ranks: every row, or above ``FOLD_ABOVE`` ranks its ``rank_summary`` (median, p90,
    mean, min, max) and the 3 busiest ranks in full, as the ``info`` command folds them."""
    ranks = info["ranks"]
    rs = info.get("rank_summary") or {}
    if not many_ranks(len(ranks)) or not rs.get("busy_ns"):
        return [table(RANK_HEAD, [_rank_row(r) for r in ranks])]
    by_rank = {r["rank"]: r for r in ranks}

    def cell(k: str, stat: str) -> str:
        s = rs.get(k)
        if not s:
            return "n/a"
        v = s[stat]["value"] if stat in ("min", "max") else s[stat]
        return _ns(v) + (f" (rank {s[stat]['rank']})" if stat in ("min", "max") else "")

    rows = [[f"{stat} of {len(ranks)}", "", "", *[cell(k, stat) for k in SUMMARISED]] for stat in STATS]
    rows += [_rank_row(by_rank[w["rank"]]) for w in rs["busy_ns"]["worst"]]
    return [table(RANK_HEAD, rows), f"<p>{escape(fold_line(len(ranks), len(rs['busy_ns']['worst']), 'GPU busy'))} "
            "(here: <code>tracekit info RUN --all-ranks</code>)</p>"]


def run_facts(side: RunDocs, tag: str) -> str:
    info = side.info
    out = [f"<h3>{escape(tag)}: {escape(side.path)}</h3>"]
    mode = find_key(side.manifest, "profile_mode")
    missing = info.get("missing_ranks") or {}
    summary: list[list[Any]] = [
        ["source", info.get("source")],
        ["world size", info.get("world_size")],
        ["ranks present", format_rank_list(info["ranks_present"])],
        ["missing ranks", "; ".join(f"{rs}: {why}" for rs, why in ranks_by_reason(missing)) or "none"],
        ["profile mode", mode if mode is not None else "not recorded (capture before profile modes, or ingested trace)"],
        ["what the mode records", (side.attribute.value or {}).get("profile") or "n/a"],
        ["events", f"{info['events']:,d}"],
        ["span", _ns(info["span_ns"])],
        ["attribution mode", "n/a" if side.attribute.value is None else side.attribute.value["mode"]],
    ]
    out.append(table(["fact", "value"], summary, "facts"))
    out.append("<h4>Ranks (from <code>tracekit info</code>)</h4>")
    out.extend(_rank_rows(info))
    vers = info.get("versions") or {}
    if vers:
        out.append("<h4>Versions</h4>")
        out.append(table(["what", "per rank"], [[k, "; ".join(f"{rs}: {v}" for rs, v in ranks_by_reason(
            {int(r): str(v) for r, v in per.items() if str(r).isdigit()}))] for k, per in vers.items()]))
    att = side.attribute.value
    dil = (att or {}).get("dilation") or {}
    out.append("<h4>Profiler dilation per phase (capture timers: median per instance, median over ranks)</h4>")
    if dil:
        out.append(table(["phase", "unprofiled", "profiled", "ratio"],
                         [[ph, _ns(d["unprofiled_ns"]), _ns(d["profiled_ns"]), f"x{d['ratio']:.3f}"] for ph, d in dil.items()]))
    else:
        out.append('<p class="missing">no unprofiled phase timers in this run\'s manifest (an ingested trace, or a capture without warm-up timing): dilation unknown</p>')
    diffs = info.get("differences") or []
    out.append("<h4>Environment and manifest differences between ranks (and the launcher)</h4>")
    if diffs:
        out.append(table(["key", "kind", "values"], [
            [d["key"], d["kind"] + (" (NCCL variable a rank did not see)" if d.get("loud") else ""),
             "; ".join(f"{k}: {v}" for k, v in d["values"].items())] for d in diffs]))
    else:
        out.append("<p>none: every rank saw the same environment and versions</p>")
    out.append("<h4>Outliers</h4>")
    if att is None:
        out.append(f'<p class="missing">attribute: {escape(str(side.attribute.why))}</p>')
    else:
        rows, seen = _outliers(att)
        if not seen:
            out.append('<p class="missing">this tracekit\'s attribute results carry no outlier list</p>')
        elif rows:
            out.append(table(["phase", "rank", "cycle", "time", "reason"], rows))
        else:
            out.append("<p>no instance past the outlier threshold</p>")
        issues = att.get("issues") or []
        if issues:
            out.append("<h4>Collective issues</h4><ul>" + "".join(f"<li>{escape(i)}</li>" for i in issues) + "</ul>")
    return "\n".join(out)


def diff_section(diff: Got[dict[str, Any]]) -> str:
    """Group 8's table: ``tracekit diff B A --phase all`` (old = B, new = A: deltas are A minus B, as the gap's)."""
    if diff.value is None:
        return f'<p class="missing">diff: {escape(str(diff.why))}</p>'
    d = diff.value
    st = d.get("statistic") or "median"
    out = [f"<p><code>tracekit diff B A</code>: old = B ({escape(short_name(d['old']))}), new = A "
           f"({escape(short_name(d['new']))}); deltas are A minus B; {escape(st)} per instance</p>"]
    out.append(table(
        ["phase", "time basis", "B instances", "A instances", f"B {st}", f"A {st}", "delta (A - B)", "at matched seq len"],
        [[p["phase"], p["time_basis"], p["old_instances"], p["new_instances"], _ns(p[f"old_{st}_ns"]),
          _ns(p[f"new_{st}_ns"]), dur(p["delta_ns"], True), dur(p.get("matched_delta_ns"), True)] for p in d["phases"]],
        "diff"))
    for ph, buckets in (d.get("buckets_by_phase") or {}).items():
        out.append(f"<h4>{escape(ph)}: buckets, {escape(st)} per instance</h4>")
        out.append(table(["bucket", "B", "A", "delta (A - B)", "basis"],
                         [[bucket_label(k), _ns(v["old_ns"]), _ns(v["new_ns"]), dur(v["delta_ns"], True), v["basis"]]
                          for k, v in buckets.items() if v["old_ns"] or v["new_ns"]], "diff"))
    if d.get("manifest_diff"):
        out.append("<h4>Manifest differences (B -> A)</h4>")
        out.append(table(["scope", "section", "key", "status", "B", "A"],
                         [[m["scope"], m["section"], m["key"], m["status"], m["old"], m["new"]] for m in d["manifest_diff"]]))
    if d.get("explanation"):
        out.append("<h4>What changed (diff's own words)</h4><ul>" + "".join(f"<li>{escape(str(x))}</li>" for x in d["explanation"]) + "</ul>")
    return "\n".join(out)
