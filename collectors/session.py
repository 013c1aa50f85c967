"""Per-rank profiler session: torch.profiler over a bounded window -> the event table.

API (reused by the SGLang integration)::

    s = ProfilerSession(rank=r, cuda=True)
    s.start()            # at window start (after warm-up)
    ...                  # M cycles
    s.stop()
    events = s.events()  # polars frame in tracekit.schema columns (not finalized)
    s.export_json(path)  # optional raw Kineto JSON (".json.gz" is gzipped by torch)

Timing columns come from the in-process event API
(``prof.profiler.kineto_results.events()``): integer ns, no float µs round
trip, and no JSON to write and parse (docs/capture.md has the measurement).
What it lacks are kernel args (grid, collective args); collectives are
recognised by kernel name downstream, and ``--keep-json`` keeps the raw Kineto
JSON per rank when args are wanted.

Facts checked (torch 2.13 CPU here; torch 2.11+cu130 on H200, see docs/capture.md):
``start_ns`` is absolute (Unix epoch ns, same clock as ``time.time_ns``; a
relative base would be detected and shifted by ``trace_start_ns``);
``device_resource_id`` is the native thread id for CPU events and the stream for
GPU events; ``correlation_id`` joins a launch to its kernels (all kernels
replayed from a CUDA graph carry the ``cudaGraphLaunch``'s correlation);
``activity_type`` names the Kineto category.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import polars as pl

from tracekit import schema, settings
from tracekit.errors import ConfigError

_RELATIVE_LIMIT_NS = 10**17  # ~3 years: anything below is not a Unix-epoch time stamp


_RUNTIME_NAME_RE = re.compile(r"^cu(da)?[A-Z]")
_GPU_SYNC_RE = re.compile(r"^(Stream|Event|Context|Device) (Sync|Wait)")


def _infer_category(name: str, on_gpu: bool, user_ann: bool, ann_names: set[str]) -> str:
    """Kineto category where ``_KinetoEvent.activity_type`` is missing (torch 2.11 lacks it)."""
    if on_gpu:
        if user_ann or name in ann_names:
            return "gpu_user_annotation"
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        if _GPU_SYNC_RE.match(name):
            return "cuda_sync"
        return "kernel"
    if user_ann:
        return "user_annotation"
    if _RUNTIME_NAME_RE.match(name) or name == "INVALID":  # Kineto names CUDA API calls of unknown cbid INVALID
        return "cuda_runtime"
    return "cpu_op"


def _categories(kevents: Any, names: list[str]) -> list[str]:
    """Kineto category of every event: ``activity_type()`` where torch has it (2.13), else inferred (2.11)."""
    if not len(kevents):
        return []
    first = kevents[0]
    if hasattr(first, "activity_type"):
        return [str(ev.activity_type()).lower() for ev in kevents]
    on_gpu = [str(ev.device_type()).endswith("CUDA") for ev in kevents]
    if hasattr(first, "is_user_annotation"):
        ua = [bool(ev.is_user_annotation()) for ev in kevents]
    else:
        ua = [False] * len(names)
    # a GPU event named like a host record_function range is its projection on the stream
    ann = {n for n, g, u in zip(names, on_gpu, ua, strict=True) if u and not g}
    return [_infer_category(n, g, u, ann) for n, g, u in zip(names, on_gpu, ua, strict=True)]


def kineto_to_frame(kevents: Any, rank: int, trace_start_ns: int = 0) -> tuple[pl.DataFrame, str]:
    """Convert ``_KinetoEvent``s to an event frame (schema columns). Returns (frame, time base note).

    The events become the Kineto columns ingest reads from a trace file (``kineto_events.RAW_SCHEMA``:
    category, name, pid/tid as the JSON has them (``device_index`` / ``device_resource_id``: the
    process / thread, the device / stream for GPU events), times,
    correlation, External id) and go through the one converter, ``tracekit.ingest.kineto
    .kineto_events``. In-process events carry no args: collective sizes and communicators,
    memcpy bytes stay null (the op comes from the kernel name at finalize). Works with and
    without ``activity_type``/``external_id`` on the event objects (torch 2.13 has both, 2.11
    neither).
    """
    from tracekit.ingest.kineto_events import (
        GPU_CATEGORIES,
        RAW_SCHEMA,
        RUNTIME_CATEGORIES,
        kineto_events,
    )

    n = len(kevents)
    names = [ev.name() for ev in kevents]
    cats = _categories(kevents, names)
    gpu = [c in GPU_CATEGORIES for c in cats]
    linked = [g or c in RUNTIME_CATEGORIES for g, c in zip(gpu, cats, strict=True)]
    has_ext = bool(n) and hasattr(kevents[0], "external_id")
    starts = [ev.start_ns() for ev in kevents]
    base = "absolute"
    if starts and min(starts) < _RELATIVE_LIMIT_NS:
        starts = [s + trace_start_ns for s in starts]
        base = f"relative, shifted by trace_start_ns={trace_start_ns}"
    cols: dict[str, list[Any]] = {
        "cat": cats,
        "instant": [c == "cpu_instant_event" for c in cats],
        "name": names,
        # what Kineto writes as the JSON pid: the device of a GPU event, else the process (-1 for
        # its own overhead events)
        "pid_int": [ev.device_index() for ev in kevents],
        "tid_raw": [ev.device_resource_id() for ev in kevents],
        "start_ns": starts,
        "dur_ns": [ev.duration_ns() for ev in kevents],
        "correlation": [(ev.correlation_id() or None) if k else None for ev, k in zip(kevents, linked, strict=True)],
        "external_id": [ev.external_id() or None for ev in kevents] if has_ext else [None] * n,
    }
    raw = pl.DataFrame(
        {c: cols[c] if c in cols else [None] * n for c in RAW_SCHEMA}, schema=RAW_SCHEMA
    )
    ev = kineto_events(raw).events.drop("pid_raw")
    return schema.conform(ev.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank"))), base


def finalize(events: pl.DataFrame) -> pl.DataFrame:
    """Categorise, annotate collectives and phase membership (tracekit.finalize.pipeline.finalize_events)."""
    from tracekit.finalize.pipeline import finalize_events

    return finalize_events(events)


PROFILE_MODES = ("full", "lite", "timing")

# What each mode records, and what it cannot give (printed by capture, kept in the manifest).
# lite's note: what records the GPU activity (torch.profiler, or tracekit's CUPTI client), then the rest
LITE_REST = ("phase ranges recorded by tracekit's hooks on the host clock; no CPU ops, so no op-scope category "
             "fallback and no host-op attribution")
MODE_NOTES: dict[str, str] = {
    "full": "torch.profiler CPU + CUDA activities: CPU ops, launches, kernels, record_function phase ranges",
    "lite": f"torch.profiler CUDA activity only (launches, kernels); {LITE_REST}",
    "timing": "no profiler: phase ranges (host clock) for every cycle and CUDA events around every N-th instance "
              "of each phase (session.cuda_events_every); no kernels, so no kernel buckets",
}


# What lite switches off in CUPTI once its profiler runs (collectors/cupti.py; "lean" = every API record that is
# neither a launch nor a sync). TRACEKIT_CUPTI_TRIM overrides it: "" = nothing, else a comma list of "lean",
# "dropped" (the runtime records Kineto drops anyway) and CUPTI activity kinds (cupti.KINDS).
LITE_TRIM: tuple[str, ...] = ()  # why nothing: docs/capture.md, "Profile-mode cost"
TRIM_WORDS = ("lean", "dropped")

# Where lite's CUDA records come from on a GPU rank: "torch" (torch.profiler's CUDA activity) or a mode of
# tracekit's own CUPTI client (collectors/cupti_client.py: kernels, launch, callback, all).
# TRACEKIT_LITE_CUPTI overrides it. The client falls back to "torch" (and says why) when it cannot run.
LITE_CUPTI = "callback"  # why: docs/capture.md, "Profile-mode cost"


# Timing mode records CUDA events around every N-th instance of each phase (the others: host time only;
# why 16: docs/capture.md, "Profile-mode cost"). TRACEKIT_TIMING_EVENTS_EVERY overrides it.
TIMING_EVENTS_EVERY = 16


def timing_events_every(s: settings.Settings | None = None) -> int:
    return (s or settings.current()).timing_events_every or TIMING_EVENTS_EVERY


def lite_cupti_source(s: settings.Settings | None = None) -> str:
    from tracekit.collectors.cupti_client import MODES

    src = (s or settings.current()).lite_cupti or LITE_CUPTI
    if src != "torch" and src not in MODES:
        raise ConfigError(f"TRACEKIT_LITE_CUPTI: {src!r} is neither 'torch' nor a CUPTI client mode "
                         f"({', '.join(MODES)})")
    return src


def cupti_trim_spec(s: settings.Settings | None = None) -> tuple[str, ...]:
    trim = (s or settings.current()).cupti_trim
    return LITE_TRIM if trim is None else trim


class ProfilerSession:
    """One bounded window of one rank in a profile mode (module doc of collectors/ranges.py for lite/timing).

    ``full``: torch.profiler with CPU + CUDA activities. ``lite``: CUDA activity only (none on a CPU
    rank: no profiler runs there) plus the hooks' own phase ranges. ``timing``: no profiler; the hooks'
    phase ranges with CUDA events per phase on GPU.
    """

    def __init__(self, rank: int, cuda: bool, *, mode: str = "full", record_shapes: bool = False,
                 with_stack: bool = False, config: settings.Settings | None = None) -> None:
        if mode not in PROFILE_MODES:
            raise ConfigError(f"profile mode must be one of {PROFILE_MODES}, not {mode!r}")
        self.rank = rank
        self.cuda = cuda
        self.mode = mode
        self.settings = config or settings.current()  # the capture's (CaptureConfig.settings), else this process's
        self.record_shapes = record_shapes
        self.with_stack = with_stack
        self.prof: Any = None
        self.client: Any = None
        self.recorder: Any = None
        self.info: dict[str, Any] = {"profile_mode": mode}

    def start(self) -> None:
        from tracekit.collectors import cupti

        spec = cupti_trim_spec(self.settings) if self.mode == "lite" and self.cuda else ()
        kinds = tuple(k for k in spec if k not in TRIM_WORDS)
        if bad := [k for k in kinds if k not in cupti.KINDS]:
            raise ConfigError(f"TRACEKIT_CUPTI_TRIM: unknown word(s) {bad} "
                             f"(known: {', '.join(TRIM_WORDS)}, {', '.join(cupti.KINDS)})")
        acts: list[Any] = []
        client_mode = lite_cupti_source(self.settings) if self.mode == "lite" and self.cuda else "torch"
        if client_mode != "torch":
            from tracekit.collectors.cupti_client import Client, ClientUnavailable

            try:  # started here, so that a CUPTI that refuses (another subscriber) falls back to torch.profiler
                self.client = Client(client_mode).open()
                self.client.start()
            except ClientUnavailable as exc:
                self.info["cupti_client_error"] = str(exc)
                self.client = None
        if self.mode != "timing" and self.client is None:
            from torch.profiler import ProfilerActivity

            acts = ([ProfilerActivity.CPU] if self.mode == "full" else []) + (
                [ProfilerActivity.CUDA] if self.cuda else [])
        if self.mode != "full":
            from tracekit.collectors.hooks import start_recording
            from tracekit.collectors.ranges import RangeRecorder

            timed = self.cuda and self.mode == "timing"
            self.recorder = RangeRecorder(cuda_events=timed, events_every=timing_events_every(self.settings) if timed else 1)
            if timed:
                self.info["cuda_events_every"] = self.recorder.events_every
            start_recording(self.recorder, record_function=False)
        self.info["activities"] = [str(a).rsplit(".", 1)[-1] for a in acts]
        self.info["note"] = MODE_NOTES[self.mode] + (
            "; a CPU rank has no CUDA activity: no profiler ran, phase ranges only"
            if self.mode == "lite" and not acts and self.client is None else "")
        if self.client is not None:
            self.info["activities"] = [f"CUPTI client: {client_mode}"]
            self.info["cupti_client"] = self.client.info
            self.info["note"] = f"tracekit's CUPTI client ({self.client.info['records']}); {LITE_REST}"
        elif "cupti_client_error" in self.info:
            self.info["note"] += f"; tracekit's CUPTI client could not run ({self.info['cupti_client_error']}): " \
                                 "torch.profiler instead"
        self.info["window_start_unix_ns"] = time.time_ns()
        if acts:
            from torch.profiler import profile

            self.prof = profile(activities=acts, record_shapes=self.record_shapes, with_stack=self.with_stack)
            self.prof.__enter__()
            if spec:
                self.info["cupti_trim"] = cupti.trim(cupti.KINETO_DROPPED_RUNTIME if "dropped" in spec else None,
                                                     kinds, lean="lean" in spec)
                if "error" not in self.info["cupti_trim"]:
                    self.info["note"] += f"; CUPTI records switched off: {', '.join(spec)} (TRACEKIT_CUPTI_TRIM)"

    def stop(self) -> None:
        if self.prof is None and self.recorder is None and self.client is None:
            raise RuntimeError("profiler session was not started")
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
        if self.client is not None:
            self.client.stop()
            self.info["cupti_client"] = self.client.info
        if self.recorder is not None:
            from tracekit.collectors.hooks import stop_recording

            stop_recording()
        self.info["window_end_unix_ns"] = time.time_ns()

    def events(self) -> pl.DataFrame:
        """The recorded window as an event frame (schema columns, not finalized)."""
        parts: list[pl.DataFrame] = []
        kin = self._kineto_events() if self.prof is not None else self._client_events()
        rec = self.recorder.frame(self.rank, os.getpid()) if self.recorder is not None else None
        if kin is not None and rec is not None and self.mode == "lite" and self.prof is not None:
            # CUDA-only profiler: launches carry Kineto's thread key (the client's carry the native id)
            from tracekit.collectors.ranges import lite_thread_map, remap_threads

            tmap, how = lite_thread_map(kin, rec, self.recorder.thread_map())
            self.info["thread_keys"] = {str(k): v for k, v in tmap.items()}
            self.info["thread_map"] = how
            kin = remap_threads(kin, tmap)
        if kin is not None:
            parts.append(kin)
        if rec is not None:
            parts.append(rec)
            self.info["recorded_ranges"] = len(self.recorder)
        if not parts:
            return schema.empty_events()
        df = parts[0] if len(parts) == 1 else pl.concat(parts, how="vertical")
        self.info["events"] = df.height
        return df

    def _client_events(self) -> pl.DataFrame | None:
        if self.client is None:
            return None
        t0 = time.perf_counter_ns()
        df: pl.DataFrame = self.client.events(self.rank)
        self.info.update({"event_api": "tracekit CUPTI client", "events": df.height,
                          "convert_ns": time.perf_counter_ns() - t0, "time_base": "absolute (CLOCK_REALTIME)"})
        return df

    def _kineto_events(self) -> pl.DataFrame:
        t0 = time.perf_counter_ns()
        kr = self.prof.profiler.kineto_results
        kev = kr.events()
        t1 = time.perf_counter_ns()
        base_fn = getattr(kr, "trace_start_ns", None)
        base = int(base_fn()) if callable(base_fn) else 0
        df, note = kineto_to_frame(kev, self.rank, base)
        t2 = time.perf_counter_ns()
        self.info.update(
            {
                "event_api": "kineto_results.events()",
                "kineto_events": len(kev),
                "events": df.height,
                "events_fetch_ns": t1 - t0,
                "convert_ns": t2 - t1,
                "time_base": note,
                "activity_type_api": bool(len(kev)) and hasattr(kev[0], "activity_type"),
                "external_id_api": bool(len(kev)) and hasattr(kev[0], "external_id"),
                "trace_start_ns": base,
            }
        )
        return df

    def export_json(self, path: str | os.PathLike[str]) -> Path:
        """Write the raw Kineto Chrome-trace JSON of the window (gzipped when ``path`` ends in .gz)."""
        if self.prof is None:
            raise RuntimeError(f"profile mode {self.mode!r} on this rank ran no torch profiler: no Kineto JSON"
                               + (" (tracekit's CUPTI client recorded it)" if self.client is not None else ""))
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter_ns()
        self.prof.export_chrome_trace(str(out))
        self.info["export_json_ns"] = time.perf_counter_ns() - t0
        self.info["json_path"] = str(out)
        return out
