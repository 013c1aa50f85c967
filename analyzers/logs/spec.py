"""``tracekit spec`` on a log run: measured accept length and tok/s, and the break-even accept
length from the log's own verify / decode times (``analyzers/spec_model.py``'s formulas).

Times come from the engine's own clocks, never from a profiler: a user-pattern field
(``--verify verify_ms``; unit from the name's suffix ``_ns`` / ``_us`` / ``_ms`` / ``_s``) or the
metrics intervals' target-verify device time per verify call. ``timing_source`` says which. One
statistic (``median`` or ``mean`` over the intervals) feeds every formula; the others are shown
beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from tracekit.analyzers.logs.stats import Summary, summarize
from tracekit.analyzers.logs.views import intervals, user_fields, user_rows
from tracekit.analyzers.spec_model import Economics, economics, step_ns_from_tps
from tracekit.errors import AnalysisError

UNITS: Final = {"_ns": 1, "_us": 1_000, "_ms": 1_000_000, "_s": 1_000_000_000}
DEFAULT_FIELDS: Final = {"verify": "verify_ms", "draft": "draft_ms", "decode": "decode_ms"}


@dataclass(frozen=True)
class Timing:
    """A per-phase time series in ns from one clock."""

    phase: str  # verify / draft / decode
    source: str  # "engine log (pattern field verify_ms)", "engine metrics (...)", "--baseline-tps"
    ns: Summary


@dataclass(frozen=True)
class LogSpec:
    path: str
    statistic: str
    intervals: int
    accept_length: Summary  # tokens per verify, bonus included
    accept_rate: Summary
    draft_tokens_per_verify: int | None
    gen_throughput: Summary  # tok/s, all requests
    per_req_tps: Summary  # tok/s per request
    running_req: Summary
    timings: tuple[Timing, ...]
    timing_source: str | None  # "engine log" / "engine metrics" / None (no times)
    economics: Economics | None
    notes: tuple[str, ...]


def ns_factor(field: str) -> int:
    for suffix, f in UNITS.items():
        if field.endswith(suffix):
            return f
    raise AnalysisError(f"field {field!r} has no unit suffix (_ns, _us, _ms, _s): name it e.g. {field}_ms in the pattern")


_METRIC_PHASES: Final = {"verify": ("verify_ns", '"target_verify"'), "draft": ("draft_ns", '"draft" + "draft_extend"')}


def phase_timing(rows: pl.DataFrame, manifest: Mapping[str, Any], phase: str, field: str | None = None) -> Timing | None:
    """The engine's own time of ``phase`` in a log run: the user-pattern field ``field`` (default
    ``<phase>_ms``, any unit suffix), else the metrics' device timer (verify, draft); None when the
    log has neither. A named ``field`` the log lacks is an AnalysisError."""
    fields = [n for n, _k in user_fields(manifest)]
    name = field
    if name is None:
        name = DEFAULT_FIELDS.get(phase) if DEFAULT_FIELDS.get(phase) in fields else next(
            (f for f in fields if f.startswith(f"{phase}_") and any(f.endswith(u) for u in UNITS)), None)
    if name is not None and name in fields:
        vals = user_rows(rows, [name]).get_column(name).cast(pl.Float64)
        return Timing(phase, f"engine log (pattern field {name})", summarize((vals * ns_factor(name)).round(0)))
    if field is not None:
        raise AnalysisError(f"no user-pattern field {field!r} in this log run (fields: {', '.join(fields) or 'none'})")
    if phase in _METRIC_PHASES:
        col, cats = _METRIC_PHASES[phase]
        v = intervals(rows).get_column(col)
        if v.drop_nulls().len():
            return Timing(phase, f"engine metrics (sglang:forward_execution_seconds_total{{category={cats}}} / "
                          "sglang:spec_verify_calls_total, CUDA-event device time)", summarize(v))
    return None


def log_spec(rows: pl.DataFrame, manifest: Mapping[str, Any], path: str, *, stat: str = "median",
             verify_field: str | None = None, draft_field: str | None = None, decode_field: str | None = None,
             baseline_tps: float | None = None, target_tps: float | None = None) -> LogSpec:
    ivs = intervals(rows)
    if ivs.height == 0 and rows.filter(pl.col("record") == "user").height == 0:
        raise AnalysisError("the log run has no stats intervals and no user-pattern rows: nothing to compute")
    notes: list[str] = []
    timings: list[Timing] = []
    for phase, fld in (("verify", verify_field), ("draft", draft_field), ("decode", decode_field)):
        t = phase_timing(rows, manifest, phase, fld)
        if t is not None:
            timings.append(t)
    if baseline_tps is not None and not any(t.phase == "decode" for t in timings):
        timings.append(Timing("decode", f"--baseline-tps {baseline_tps:g} (plain decode tok/s per sequence)",
                              Summary(1, step_ns_from_tps(baseline_tps), step_ns_from_tps(baseline_tps),
                                      step_ns_from_tps(baseline_tps))))
    acc = summarize(ivs.get_column("accept_length"))
    ks = ivs.get_column("draft_tokens_per_verify").drop_nulls().unique()
    k = int(ks[0]) if ks.len() == 1 else None
    if ks.len() > 1:
        notes.append(f"the logs mix {ks.len()} draft-token counts ({', '.join(str(x) for x in ks.sort())}): k unknown")
    run = summarize(ivs.get_column("running_req"))
    by = {t.phase: t for t in timings}
    econ: Economics | None = None
    verify = by.get("verify")
    if verify is not None and verify.ns.stat(stat) is not None:
        cycle = float(verify.ns.stat(stat))  # type: ignore[arg-type]
        if "draft" in by and by["draft"].ns.stat(stat) is not None:
            cycle += float(by["draft"].ns.stat(stat))  # type: ignore[arg-type]
        else:
            notes.append("no draft time in the log: the cycle is the verify time alone (break-even is a lower bound)")
        dec = by.get("decode")
        econ = economics(cycle, tokens_per_cycle=acc.stat(stat), decode_step_ns=None if dec is None else dec.ns.stat(stat),
                         target_tps=target_tps, draft_tokens=k, batch_size=run.stat(stat) or 1.0)
        if dec is None:
            notes.append("no decode step time (a pattern field decode_ms, or --baseline-tps): no break-even")
    elif ivs.height:
        notes.append("no verify time in the log (a user pattern such as 'Target verify: {verify_ms:f} ms', or "
                     "metrics snapshots with SGLANG_ENABLE_METRICS_DEVICE_TIMER=1): accept length and tok/s only")
    sources = {t.source.split(" (")[0] for t in timings if not t.source.startswith("--")}
    return LogSpec(
        path=path, statistic=stat, intervals=ivs.height, accept_length=acc,
        accept_rate=summarize(ivs.get_column("accept_rate")), draft_tokens_per_verify=k,
        gen_throughput=summarize(ivs.get_column("gen_throughput")), per_req_tps=summarize(ivs.get_column("per_req_tps")),
        running_req=run, timings=tuple(timings), timing_source=" + ".join(sorted(sources)) or None,
        economics=econ, notes=tuple(notes),
    )


__all__ = ["DEFAULT_FIELDS", "UNITS", "LogSpec", "Timing", "log_spec", "ns_factor", "phase_timing"]
