"""Words and JSON documents of the log-run analyses (``info``, ``spec``, ``diff`` on log runs):
they only read the frozen reports of ``analyzers/logs``."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from tracekit.analyzers.logs.diff import Bin, LogDiff
from tracekit.analyzers.logs.gap import LogGap
from tracekit.analyzers.logs.info import LogInfo
from tracekit.analyzers.logs.spec import LogSpec
from tracekit.analyzers.logs.stats import Summary
from tracekit.analyzers.logs.trace_diff import LogTraceDiff
from tracekit.documents import LOG_DIFF, LOG_GAP, LOG_INFO, LOG_SPEC, LOG_TRACE_DIFF
from tracekit.render.units import ms

METRIC_LABELS = {"gen_throughput": "throughput, all requests (tok/s)", "per_req_tps": "throughput per request (tok/s)",
                 "accept_length": "accept length (tokens/verify, bonus incl.)"}


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:,.{digits}f}"


def _summ(s: Summary, digits: int = 2) -> str:
    if s.n == 0:
        return "n/a"
    return f"median {_num(s.median, digits)}, p90 {_num(s.p90, digits)}, mean {_num(s.mean, digits)} (n={s.n:,})"


def _summ_ns(s: Summary) -> str:
    if s.n == 0:
        return "n/a"
    return f"median {ms(s.median)}, p90 {ms(s.p90)}, mean {ms(s.mean)} (n={s.n:,})"


def _when(ns: int | None) -> str:
    if ns is None:
        return "no time"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _jsonable(obj: Any) -> Any:
    return dataclasses.asdict(obj) if dataclasses.is_dataclass(obj) and not isinstance(obj, type) else obj


# --- info -----------------------------------------------------------------------------------------

def info_lines(rep: LogInfo) -> list[str]:
    out = [f"{rep.path}: log run of {len(rep.files)} file(s); clock: {rep.clock}"]
    if rep.patterns:
        out.append("user patterns: " + "; ".join(repr(p) for p in rep.patterns))
    for f in rep.files:
        ver = f", {f.engine_version}" if f.engine_version else ""
        out.append(f"{f.path} ({f.kind}{ver}): {f.lines:,} lines, {sum(f.rows_by_grammar.values()):,} rows, "
                   f"{f.unmatched:,} unmatched, {f.half_matched:,} half-matched")
        for gv, n in f.versions.items():
            out.append(f"  {gv}: {n:,} rows")
        if f.first_ns is not None:
            out.append(f"  covers {_when(f.first_ns)} .. {_when(f.last_ns)} (server clock, read as UTC)")
        if f.intervals:
            out.append(f"  {f.intervals:,} stats intervals; interval {_summ_ns(f.interval_ns)}")
            graph = ", ".join(f"{k} {v:,}" for k, v in sorted(f.graph_intervals.items()))
            out.append(f"  graph use per interval: {graph}")
            out.append(f"  batch (#running-req): {_summ(f.running_req, 1)}")
            out.append(f"  tokens per request (#token / #running-req): {_summ(f.tokens_per_req, 0)}")
        if f.graph_modes:
            out.append("  cudagraph_mode set by the engine's fallback warnings: "
                       + ", ".join(f"{m} ({n:,} lines)" for m, n in f.graph_modes.items()))
        if f.graph_batches:
            total = sum(f.graph_batches.values())
            out.append("  batches per CUDA-graph runtime mode (--cudagraph-metrics): "
                       + ", ".join(f"{m} {n:,} ({n / total:.0%})" for m, n in f.graph_batches.items()))
        ranks = ", ".join(f"{k.upper()} {v}" for k, v in f.ranks.items() if v)
        if ranks:
            out.append(f"  ranks printing: {ranks}")
        spec = "on" if f.speculation else "off (no accept length)"
        if f.draft_tokens_per_verify is not None:
            spec += f", {f.draft_tokens_per_verify} draft tokens per verify ({f.draft_tokens_source})"
        out.append(f"  speculation: {spec}")
        for k, v in f.server_args.items():
            out.append(f"  server arg {k} = {v}")
        for k, n in f.user_fields.items():
            out.append(f"  user field {k}: {n:,} rows")
    return out


def info_json(rep: LogInfo) -> dict[str, Any]:
    return LOG_INFO.make({"path": rep.path, "clock": rep.clock, "patterns": list(rep.patterns),
                          "files": [_jsonable(f) for f in rep.files]})


# --- spec -----------------------------------------------------------------------------------------

def spec_lines(rep: LogSpec) -> list[str]:
    st = rep.statistic
    out = [f"{rep.path}: speculation from the engine's log ({rep.intervals:,} stats intervals; statistic: {st} "
           "over intervals, others beside it)",
           f"  accept length (tokens per verify, bonus included): {_summ(rep.accept_length)}",
           f"  accept rate ((accept length - 1) / k per draft token): {_summ(rep.accept_rate, 3)}"
           + (f"; k = {rep.draft_tokens_per_verify}" if rep.draft_tokens_per_verify is not None else "; k unknown"),
           f"  throughput, all requests (tok/s): {_summ(rep.gen_throughput)}",
           f"  throughput per request (tok/s): {_summ(rep.per_req_tps)}",
           f"  batch (#running-req): {_summ(rep.running_req, 1)}"]
    for t in rep.timings:
        out.append(f"  {t.phase} time [{t.source}]: {_summ_ns(t.ns)}")
    e = rep.economics
    if e is not None:
        out.append(f"timing_source: {rep.timing_source} (unprofiled; the engine's own clock)")
        out.append(f"  cycle ({st}): {ms(e.cycle_ns)}"
                   + (f"; at {e.tokens_per_cycle:.2f} tokens per verify: {e.tps_per_seq:,.1f} tok/s per sequence"
                      if e.tokens_per_cycle is not None and e.tps_per_seq is not None else ""))
        if e.break_even_tokens is not None and e.decode_step_ns is not None:
            verdict = ""
            if e.tokens_per_cycle is not None:
                verdict = (" - speculation pays" if e.tokens_per_cycle > e.break_even_tokens
                           else " - speculation costs more than plain decode")
            out.append(f"  break-even accept length: {e.break_even_tokens:.2f} tokens per verify (cycle / decode step "
                       f"{ms(e.decode_step_ns)}){verdict}")
        if e.needed_tokens is not None and e.target_tps is not None:
            out.append(f"  {e.target_tps:g} tok/s per sequence needs {e.needed_tokens:.2f} tokens per verify"
                       + (f" or a cycle of {ms(e.needed_cycle_ns)}" if e.needed_cycle_ns is not None else ""))
    for n in rep.notes:
        out.append(f"note: {n}")
    return out


def spec_json(rep: LogSpec) -> dict[str, Any]:
    return LOG_SPEC.make({
        "path": rep.path, "statistic": rep.statistic, "intervals": rep.intervals,
        "accept_length": _jsonable(rep.accept_length), "accept_rate": _jsonable(rep.accept_rate),
        "draft_tokens_per_verify": rep.draft_tokens_per_verify, "gen_throughput": _jsonable(rep.gen_throughput),
        "per_req_tps": _jsonable(rep.per_req_tps), "running_req": _jsonable(rep.running_req),
        "timings": [_jsonable(t) for t in rep.timings], "timing_source": rep.timing_source,
        "economics": None if rep.economics is None else _jsonable(rep.economics), "notes": list(rep.notes),
        "units": "times in ns (engine clock), throughput in tok/s, accept length in tokens per verify (bonus incl.)",
    })


# --- gap ------------------------------------------------------------------------------------------

def gap_lines(rep: LogGap) -> list[str]:
    st = rep.statistic
    b_where = "" if rep.b_path == rep.a_path else f" of {rep.b_path}"
    out = [f"{rep.a_path}: {rep.a.phase} vs {rep.b.phase}{b_where} (timing_source: {rep.timing_source}, unprofiled; "
           f"statistic: {st})",
           f"  A {rep.a.phase} [{rep.a.source}]: {_summ_ns(rep.a.ns)}",
           f"  B {rep.b.phase} [{rep.b.source}]: {_summ_ns(rep.b.ns)}"]
    if rep.delta_ns is not None:
        ratio = "" if rep.ratio is None else f" (x{rep.ratio:.2f})"
        out.append(f"A costs {ms(rep.delta_ns)} {'more' if rep.delta_ns >= 0 else 'less'} than B ({st}){ratio}; "
                   "not at matched batch / tokens per request: `tracekit diff` compares per bin")
    return out


def gap_json(rep: LogGap) -> dict[str, Any]:
    return LOG_GAP.make({"a_path": rep.a_path, "b_path": rep.b_path, "a": _jsonable(rep.a), "b": _jsonable(rep.b),
                         "statistic": rep.statistic, "delta_ns": rep.delta_ns, "ratio": rep.ratio,
                         "timing_source": rep.timing_source, "units": "ns (engine clock)"})


# --- diff -----------------------------------------------------------------------------------------

def bin_label(b: Bin) -> str:
    g = "graph ?" if b.graph is None else ("graph" if b.graph else "eager")
    return f"batch {b.batch}, {b.tokens_lo}-{b.tokens_hi} tokens/req, {g}"


def diff_lines(rep: LogDiff) -> list[str]:
    st = rep.statistic
    out = [f"log diff {rep.old} -> {rep.new}: compared at matched batch (#running-req), tokens per request "
           f"(#token / #running-req, bins of {rep.tokens_width}) and graph use; statistic: {st} per bin over its "
           f"intervals; clock: {rep.timing_source}"]
    if rep.no_common_bin:
        out.append("no common bin: the two logs never ran at the same batch, tokens per request and graph use - "
                   "nothing is compared (a comparison across different sequence lengths would mislead)")
    for d in rep.common:
        out.append(f"{bin_label(d.bin)}: {d.n_old:,} old vs {d.n_new:,} new intervals")
        for m in d.metrics:
            label = METRIC_LABELS.get(m.metric, f"{m.metric} (user pattern)")
            ratio = "" if m.ratio is None else f" (x{m.ratio:.3f})"
            delta = "" if m.delta is None else f", {m.delta:+,.3f}{ratio}"
            out.append(f"  {label}: {_num(m.old.stat(st), 3)} -> {_num(m.new.stat(st), 3)}{delta}; "
                       f"p90 {_num(m.old.p90, 3)} -> {_num(m.new.p90, 3)}, mean {_num(m.old.mean, 3)} -> "
                       f"{_num(m.new.mean, 3)}")
    for side, bins in (("old", rep.only_old), ("new", rep.only_new)):
        if bins:
            out.append(f"only in {side} ({len(bins)} bins, not compared): "
                       + "; ".join(f"{bin_label(b)} ({n:,})" for b, n in bins))
    for side, reasons in rep.left_out.items():
        for why, n in reasons.items():
            out.append(f"left out of {side}: {n:,} {why}")
    return out


def diff_json(rep: LogDiff) -> dict[str, Any]:
    return LOG_DIFF.make({
        "old": rep.old, "new": rep.new, "statistic": rep.statistic, "tokens_width": rep.tokens_width,
        "no_common_bin": rep.no_common_bin, "common": [_jsonable(d) for d in rep.common],
        "only_old": [{"bin": _jsonable(b), "intervals": n} for b, n in rep.only_old],
        "only_new": [{"bin": _jsonable(b), "intervals": n} for b, n in rep.only_new],
        "left_out": rep.left_out, "user_fields": list(rep.user_fields), "timing_source": rep.timing_source,
    })


def trace_diff_lines(rep: LogTraceDiff) -> list[str]:
    st = rep.statistic
    out = [f"diff {rep.old} -> {rep.new} (the {rep.log_side} side is the engine log): at matched batch, tokens per "
           f"request (bins of {rep.tokens_width}) and graph use; statistic: {st} per bin",
           f"  clocks: log verify time [{rep.log_clock or 'none in the log'}]; run verify time [{rep.trace_clock}]: "
           "two clocks, shown side by side, never subtracted"]
    if rep.no_common_bin:
        out.append("no common bin: the log and the run never ran at the same batch, tokens per request and graph use - "
                   "nothing is compared")
    for d in rep.common:
        m = d.accept_length
        delta = "" if m.delta is None else f", {m.delta:+.3f}"
        out.append(f"{bin_label(d.bin)}: {d.n_log:,} log intervals, {d.n_trace:,} run verify instances")
        out.append(f"  accept length (tokens/verify, bonus incl.): {_num(m.old.stat(st), 3)} -> {_num(m.new.stat(st), 3)}"
                   f"{delta}; p90 {_num(m.old.p90, 3)} -> {_num(m.new.p90, 3)}")
        log_t = "n/a (no verify time in the log)" if d.log_verify_ns is None else _summ_ns(d.log_verify_ns)
        out.append(f"  verify time, log (engine clock): {log_t}")
        out.append(f"  verify time, run (profiled window): {_summ_ns(d.trace_verify_ns)}")
    for side, bins in (("the log", rep.only_log), ("the run", rep.only_trace)):
        if bins:
            out.append(f"only in {side} ({len(bins)} bins, not compared): "
                       + "; ".join(f"{bin_label(b)} ({n:,})" for b, n in bins))
    for why, n in rep.left_out.items():
        out.append(f"left out of the log: {n:,} {why}")
    return out


def trace_diff_json(rep: LogTraceDiff) -> dict[str, Any]:
    return LOG_TRACE_DIFF.make({
        "old": rep.old, "new": rep.new, "log_side": rep.log_side, "statistic": rep.statistic,
        "tokens_width": rep.tokens_width, "no_common_bin": rep.no_common_bin,
        "common": [_jsonable(d) for d in rep.common],
        "only_log": [{"bin": _jsonable(b), "intervals": n} for b, n in rep.only_log],
        "only_trace": [{"bin": _jsonable(b), "instances": n} for b, n in rep.only_trace],
        "log_clock": rep.log_clock, "trace_clock": rep.trace_clock, "left_out": rep.left_out,
    })


__all__ = [
    "bin_label",
    "diff_json",
    "diff_lines",
    "gap_json",
    "gap_lines",
    "info_json",
    "info_lines",
    "spec_json",
    "spec_lines",
    "trace_diff_json",
    "trace_diff_lines",
]
