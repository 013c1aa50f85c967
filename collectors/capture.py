"""``tracekit capture``: start every rank, profile a bounded window on each, merge the shards.

``run_capture(CaptureConfig(...), progress=print) -> CaptureResult``

The launcher spawns one process per rank (``torch.multiprocessing`` spawn
context, a free TCP port, NCCL on GPU with one rank per visible GPU, gloo with
8 CPU ranks otherwise). Each rank: init the process group -> build the
reference workload -> capture CUDA graphs -> ``warmup`` cycles (the later ones
timed unprofiled) -> environment manifest -> profiler window of ``cycles``
cycles (timed again) -> manifest at window end -> convert + finalize events ->
write its shard ``<out>.d/rank-00003.parquet`` atomically -> ``os._exit``.
Each rank's stdout and stderr file descriptors go to ``<out>.d/rank-00003.log``
from its first line on (torch's C++ lines such as the profiler's USDT
``profiler_start`` notes, NCCL warnings, tracebacks); tracekit's own progress
reaches the launcher through a queue. The logs are removed with the shards when
every rank succeeded, kept (and named) when a rank failed, was killed or ended
its window early; the launcher prints the last lines of a failed rank's log.
A rank that dies, fails, or shows no progress for ``timeout_s`` (killed) loses only its own shard; the
merged manifest's ``missing_ranks`` names it and why.  Survivors of a dead peer
get an error from their next collective and still write what they recorded
(``ranks[r]["aborted"]`` says why the window ended early).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import shutil
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.workload.config import WorkloadConfig

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@dataclass
class CaptureConfig:
    out: str = "run.parquet"
    world: int | None = None  # None: every visible GPU, else 8 CPU ranks
    ranks: list[int] | None = None  # None: all ranks are captured (all ranks always run)
    cycles: int = 8
    warmup: int = 4
    after: int = 4  # unprofiled cycles timed after the window: the reference's second block (timing.REFERENCE_POOL)
    device: str = "auto"  # auto | cuda | cpu
    # WorkloadConfig (the built-in workload) or an engine config whose ``build(rank, world, device, cycles)``
    # returns an object with the built-in Workload's interface (collectors/transformers/config.py)
    workload: Any = field(default_factory=WorkloadConfig)
    keep_json: str | None = None  # directory for raw per-rank Kineto JSON (.json.gz)
    timeout_s: float = 300.0  # a rank that reports no progress for this long is killed (> coll_timeout_s)
    startup_timeout_s: float = 900.0  # the same, before a rank's first cycle (imports, NCCL init, graph capture)
    coll_timeout_s: float = 60.0  # process-group timeout (a collective waiting on a dead peer)
    nvml_interval_s: float = 0.02  # 0: no NVML counter sampling
    rank_env: dict[int, dict[str, str | None]] = field(default_factory=dict)  # per-rank env edits (None: unset)
    keep_logs: bool = False  # keep <out>.d/rank-*.log even when every rank succeeded
    profile: str = "auto"  # full | lite | timing | auto (resolve_profile: lite on GPU, full on CPU)

    def captured(self, world: int) -> list[int]:
        return list(range(world)) if self.ranks is None else sorted(set(self.ranks))

    def to_dict(self) -> dict[str, Any]:
        return {
            "world": self.world,
            "ranks": self.ranks,
            "cycles": self.cycles,
            "warmup": self.warmup,
            "after": self.after,
            "device": self.device,
            "keep_json": self.keep_json,
            "timeout_s": self.timeout_s,
            "coll_timeout_s": self.coll_timeout_s,
            "startup_timeout_s": self.startup_timeout_s,
            "nvml_interval_s": self.nvml_interval_s,
            "profile_mode": self.profile,
            "workload": getattr(self.workload, "engine", "builtin"),
        }


@dataclass
class CaptureResult:
    out: Path
    world: int
    captured: list[int]
    missing: dict[str, str]
    events: int
    size_bytes: int
    manifest: dict[str, Any]
    interrupted: dict[str, Any] | None = None  # set when a Ctrl-C ended the window early (manifest "interrupted")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def resolve_device(device: str) -> tuple[str, int]:
    """(device kind, GPU count) for ``auto``/``cuda``/``cpu``."""
    import torch

    n = torch.cuda.device_count() if device != "cpu" else 0
    if device == "cuda" and n == 0:
        raise ValueError("--device cuda asked for, but torch sees no GPU")
    return ("cuda" if n > 0 else "cpu"), n


def resolve_profile(profile: str, kind: str) -> str:
    """The profile mode a capture runs in: ``auto`` is lite on GPU (measured: docs/capture.md, "Profile
    modes"), full on CPU (a CPU rank has no CUDA activity: its CPU ops are all a profiler can show)."""
    from tracekit.collectors.session import PROFILE_MODES

    if profile == "auto":
        return "lite" if kind == "cuda" else "full"
    if profile not in PROFILE_MODES:
        raise ValueError(f"--profile must be one of auto, {', '.join(PROFILE_MODES)}, not {profile!r}")
    return profile


def window_label(mode: str) -> str:
    """The PhaseTimer window (and manifest key) of the captured window: ``timed`` when no profiler runs."""
    return "timed" if mode == "timing" else "profiled"


def shard_path(shard_dir: Path, rank: int) -> Path:
    return shard_dir / f"rank-{rank:05d}.parquet"


def log_path(shard_dir: Path, rank: int) -> Path:
    """Where a rank process's stdout and stderr go."""
    return shard_dir / f"rank-{rank:05d}.log"


def redirect_output(path: Path) -> None:
    """Point this process's stdout and stderr file descriptors (C++ and Python alike) at ``path``."""
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def log_tail(path: Path, lines: int = 12) -> list[str]:
    """The last non-empty lines of a rank log ([] when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


FAULT_ENV = "TRACEKIT_TEST_FAULT"  # "CYCLE:exit|hang|raise" in one rank's env (rank_env): the fault tests


def _fault(cycle: int) -> None:
    """The capture fault tests' failure (a rank that exits, hangs or raises at a cycle), set
    through that rank's environment; nothing in the capture configuration."""
    spec = os.environ.get(FAULT_ENV)
    if spec is None or spec.split(":")[0] != str(cycle):
        return
    kind = spec.split(":", 1)[1]
    if kind == "exit":
        os._exit(17)
    if kind == "hang":
        time.sleep(10**6)
    raise RuntimeError(f"injected failure at cycle {cycle}")


# After every rank wrote its shard, teardown gets this long before the launcher ends the process.
DONE_GRACE_S = 20.0


def _die_with_launcher() -> None:
    """Linux: this rank gets SIGKILL when the launcher dies, however it dies (no orphan ranks)."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the launcher decides
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _from_collective(exc: BaseException) -> bool:
    """True when the exception came out of torch.distributed (a collective whose peer went away)."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "torch/distributed" in frames[-1].filename.replace("\\", "/")


def _rank_main(rank: int, world: int, kind: str, cc: CaptureConfig, port: int, shard_dir: str, q: Any,
               ctl: Any = None) -> None:
    """Body of one rank process; always ends in os._exit (NCCL threads must not keep it alive)."""
    import sys

    code = 0
    _die_with_launcher()
    try:
        redirect_output(log_path(Path(shard_dir), rank))
        _rank_body(rank, world, kind, cc, port, Path(shard_dir), q, ctl)
    except BaseException as exc:
        traceback.print_exc()  # the whole traceback goes to the rank's log
        from tracekit.collectors.launcher import short_error

        coll = False
        with contextlib.suppress(Exception):
            coll = _from_collective(exc)
        q.put(("error", rank, short_error(f"{exc.__class__.__name__}: {exc}"), coll))
        code = 1
    finally:
        try:
            q.close()
            q.join_thread()
        except Exception:
            pass
        for stream in (sys.stdout, sys.stderr):  # os._exit skips Python's buffers
            with contextlib.suppress(Exception):
                stream.flush()
    os._exit(code)


def _rank_body(rank: int, world: int, kind: str, cc: CaptureConfig, port: int, shard_dir: Path, q: Any,
               ctl: Any = None) -> None:
    os.environ.update(SAFE_ENV)
    for k, v in cc.rank_env.get(rank, {}).items():  # None unsets: a launcher variable that never reached this rank
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
         "LOCAL_RANK": str(rank)}
    )
    q.put(("beat", rank, "started"))
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from tracekit.collectors.manifest import NvmlSampler, rank_section
    from tracekit.collectors.session import ProfilerSession
    from tracekit.collectors.timing import BEFORE, REFERENCE_POOL
    from tracekit.collectors.workload.runner import Workload


    cuda = kind == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=cc.coll_timeout_s),
        device_id=device if cuda else None,
    )
    q.put(("stage", rank, "pg", "process group up"))
    total = cc.warmup + cc.cycles
    size = total + cc.after
    build = getattr(cc.workload, "build", None)  # another engine (transformers) builds its own
    wl = build(rank, world, device, size) if build is not None else Workload(cc.workload, rank, world, device, size)
    wl.capture_graphs()
    q.put(("stage", rank, "ready", f"workload ready (graphs: {','.join(sorted(wl.graphs)) or 'none'}; moe: {wl.moe_impl})"))
    skip = min(2, max(cc.warmup - 1, 0))
    for c in range(cc.warmup):
        if ctl is not None and not ctl.may_start(rank, c):
            break
        _fault(c)
        wl.timer.window = BEFORE if c >= skip else None
        wl.run_cycle(c)
        q.put(("beat", rank, c))
    wl.sync()
    wl.timer.window = None
    me = rank in cc.captured(world)
    dev_index = rank if cuda else None
    start = rank_section(rank, world, dev_index, "start")
    session = ProfilerSession(rank, cuda, mode=cc.profile) if me else None
    sampler = NvmlSampler(rank, rank, cc.nvml_interval_s) if (me and cuda and cc.nvml_interval_s > 0) else None
    if sampler is not None:
        sampler.start()
    if session is not None:
        session.start()
    # Ranks start their profilers at different speeds (CUPTI activation: ~0.9 s apart on 2x H200); without
    # this barrier the first profiled collective would wait that long and pollute the window.
    dist.barrier()
    wl.sync()
    wl.timer.window = window_label(cc.profile)
    aborted: str | None = None
    done = 0
    q.put(("stage", rank, "window", "profiling window started"))
    try:
        for c in range(cc.warmup, total):
            if ctl is not None and not ctl.may_start(rank, c):
                break  # Ctrl-C: every rank ends its window after the same cycle
            _fault(c)
            wl.run_cycle(c)
            done += 1
            q.put(("beat", rank, c))
        wl.sync()
    except Exception as exc:
        from tracekit.collectors.launcher import short_error

        lost = ""
        with contextlib.suppress(Exception):
            lost = "lost its peer: " if _from_collective(exc) else ""
        aborted = lost + short_error(f"{exc.__class__.__name__}: {exc}")
    wl.timer.window = None
    if session is not None:
        session.stop()
    counters = sampler.stop() if sampler is not None else None
    end = rank_section(rank, world, dev_index, "end")
    if aborted is None and done == cc.cycles and (ctl is None or int(ctl.stop_at.value) < 0):
        _reference_after(wl, total, cc.after)  # the same process, the next shapes, profiler stopped
    stats = wl.timer.stats(pool=REFERENCE_POOL) if aborted is None else {}
    q.put(("stage", rank, "window done", f"window done: {done}/{cc.cycles} cycles"))
    if aborted:
        q.put(("status", rank, f"window ended early after {done}/{cc.cycles} cycles: {aborted[:200]}"))
    if session is not None:
        _write_shard(rank, world, cc, wl, session, sampler, counters, start, end, stats, done, aborted, device,
                     shard_dir, q)
    if aborted is None:  # every rank has written its shard before any exits (rank 0 hosts the TCPStore)
        dist.barrier()
        if dist.get_backend() != "nccl":
            dist.destroy_process_group()
        # NCCL: destroy_process_group hung for minutes on 2x H200 (torch 2.11, NCCL 2.28.9) after the
        # shards were written; the rank ends in os._exit instead (the brief's rule after NCCL work).


def _reference_after(wl: Any, first: int, n: int) -> None:
    """``n`` unprofiled cycles after the window, timed as the reference's second block (``timing.AFTER``)."""
    from tracekit.collectors.timing import AFTER

    wl.sync()
    wl.timer.window = AFTER
    for c in range(first, first + n):
        wl.run_cycle(c)
    wl.sync()
    wl.timer.window = None


def _write_shard(rank: int, world: int, cc: CaptureConfig, wl: Any, session: Any, sampler: Any, counters: Any,
                 start: dict[str, Any], end: dict[str, Any], stats: dict[str, Any], done: int,
                 aborted: str | None, device: Any, shard_dir: Path, q: Any) -> None:
    import polars as pl
    import torch.distributed as dist

    from tracekit.collectors.manifest import versions
    from tracekit.collectors.session import finalize
    from tracekit.collectors.timing import (
        BEFORE,
        REFERENCE,
        dilation,
        reference_spread,
        split_cycle,
    )
    from tracekit.finalize.pipeline import stamp
    from tracekit.store import new_manifest, write_run

    events = session.events()
    if (keep := cc.keep_json) and session.prof is not None:
        session.export_json(Path(keep) / f"rank-{rank:05d}.trace.json.gz")
    if counters is not None and counters.height:
        events = pl.concat([events, counters], how="vertical_relaxed")
    t0 = time.perf_counter_ns()
    finalized = False
    try:
        events = finalize(events)
        finalized = True
    except Exception as exc:  # keep the raw events: the merge refinalizes them; say why in the manifest
        session.info["finalize_error"] = f"{exc.__class__.__name__}: {str(exc)[:300]}"
    session.info["finalize_ns"] = time.perf_counter_ns() - t0
    label = window_label(cc.profile)
    # the reference: unprofiled cycles before and after the window pooled (before alone when none ran after)
    unprof, cyc_u = split_cycle(stats.get(REFERENCE) or stats.get(BEFORE, {}))
    prof, cyc_p = split_cycle(stats.get(label, {}))
    section = {
        **start,
        "end": {"taken_unix_ns": end["taken_unix_ns"], "env": end["env"], "gpu": end["gpu"]},
        "versions": versions(),
        "device": str(device),
        "backend": dist.get_backend(),
        "window": {"first_cycle": cc.warmup, "cycles": done, "requested": cc.cycles},
        "profile_mode": cc.profile,
        "profile_note": session.info.get("note", ""),
        "unprofiled": unprof,
        label: prof,
        "cycle_time": {k: v for k, v in (("unprofiled", cyc_u), (label, cyc_p)) if v is not None},
        "dilation": dilation(unprof, prof),
        # the two blocks of the reference, per phase: medians and instance counts (the ratio's spread)
        "reference": reference_spread(stats),
        "aborted": aborted,
        "session": session.info,
        "counters": {"nvml": "off" if sampler is None else (sampler.error or "ok"),
                     "rows": 0 if counters is None else counters.height},
        "workload": wl.describe(),
    }
    man = new_manifest(
        source="capture",
        world_size=world,
        capture=cc.to_dict(),
        ranks={str(rank): section},
        clock={"align": "none", "note": "ranks share one host's system clock", "offsets_ns": {str(rank): 0}},
    )
    write_run(events, shard_path(shard_dir, rank), stamp(man) if finalized else man)
    q.put(("done", rank, events.height))


def _fresh_shard_dir(shard_dir: Path) -> None:
    """Make an empty shard directory; refuse to delete shards an earlier capture never merged."""
    from tracekit.errors import OutputError

    if shard_dir.exists():
        if any(shard_dir.glob("rank-*.parquet")):
            raise OutputError("holds the shards of an earlier capture that were never merged: merge them "
                              f"(tracekit merge {shard_dir} -o other.parquet) or remove the directory", path=str(shard_dir))
        shutil.rmtree(shard_dir)  # only the logs of an earlier capture
    shard_dir.mkdir(parents=True)


def _stop_all(procs: dict[int, Any]) -> None:
    for p in procs.values():
        if p.is_alive():
            p.kill()
    for p in procs.values():
        p.join(timeout=10)


def run_capture(cc: CaptureConfig, progress: Callable[[str], None] | None = None, *, live: bool = False) -> CaptureResult:
    """Run the capture described by ``cc``; see the module docstring. Raises TracekitError if no rank
    produced data, OutputLockedError when another capture writes the same output, InterruptedCapture on
    a second Ctrl-C (or Ctrl-C before the window). ``live``: a terminal, print every rank's cycles every
    few seconds."""
    from tracekit.outputs import OutputLock, sidecar

    say = progress or (lambda _m: None)
    kind, ngpu = resolve_device(cc.device)
    world = cc.world or (ngpu if kind == "cuda" else 8)
    if kind == "cuda" and world > ngpu:
        raise ValueError(f"--world {world} needs {world} GPUs, torch sees {ngpu}")
    captured = cc.captured(world)
    if any(r < 0 or r >= world for r in captured):
        raise ValueError(f"--ranks {captured} outside 0..{world - 1}")
    cc.workload.validate(world)
    cc = dataclasses.replace(cc, profile=resolve_profile(cc.profile, kind))
    out = Path(cc.out)
    lock = OutputLock(out).acquire()  # before anything is deleted: two captures to one -o
    try:
        if lock.stale is not None:
            say(f"capture: replaced a stale lock {lock.path} (pid {lock.stale} no longer runs)")
        shard_dir = sidecar(out, ".d")
        _fresh_shard_dir(shard_dir)
        return _launch(cc, say, live, kind, world, captured, out, shard_dir)
    finally:
        lock.release()


def _launch(cc: CaptureConfig, say: Callable[[str], None], live: bool, kind: str, world: int, captured: list[int],
            out: Path, shard_dir: Path) -> CaptureResult:
    import multiprocessing as mp

    from tracekit.collectors.launcher import Control, Interrupts, Progress, sigint_ignored
    from tracekit.collectors.manifest import launcher_section
    from tracekit.errors import InterruptedCapture

    launcher = launcher_section()
    for k, v in SAFE_ENV.items():
        os.environ.setdefault(k, v)
    # spawn, not fork/forkserver: a rank must see the launcher's environment as it is now (inheritance at
    # spawn is how NCCL_* reach ranks; a forkserver started earlier would hand out a stale environment)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ctl = Control(ctx, world)
    port = free_port()
    say(f"capture: {world} ranks ({'NCCL on GPU' if kind == 'cuda' else 'gloo on CPU'}), capturing {captured}, "
        f"{cc.warmup} warm-up + {cc.cycles} cycles in profile mode {cc.profile}")
    procs = {r: ctx.Process(target=_rank_main, args=(r, world, kind, cc, port, str(shard_dir), q, ctl),
                            name=f"tracekit-rank{r}") for r in range(world)}
    intr = Interrupts()
    with sigint_ignored():
        for p in procs.values():
            p.start()
    intr.install()
    try:
        say("capture: rank processes started (pid per rank: "
            + ", ".join(f"{r}: {p.pid}" for r, p in procs.items()) + f"); logs in {shard_dir}/")
        prog = Progress(say, world, cc.warmup + cc.cycles, live=live)
        watch = _watch(cc, procs, q, ctl, intr, prog, say)
        if watch.stop is not None and watch.stop <= cc.warmup:
            _stop_all(procs)
            shutil.rmtree(shard_dir, ignore_errors=True)
            raise InterruptedCapture("interrupted before the profiling window: nothing was captured", path=str(out))
        return _finish(cc, say, watch, procs, world, captured, out, shard_dir, launcher)
    except KeyboardInterrupt:
        _stop_all(procs)
        shards = sorted(shard_dir.glob("rank-*.parquet"))
        if not shards:
            shutil.rmtree(shard_dir, ignore_errors=True)
            raise InterruptedCapture(f"aborted ({intr.name or 'SIGINT'} twice): nothing was captured",
                                     path=str(out)) from None
        raise InterruptedCapture(f"aborted ({intr.name or 'SIGINT'} twice): {len(shards)} rank shard(s) kept in "
                                 f"{shard_dir}; merge them with `tracekit merge {shard_dir} -o {out}`",
                                 path=str(out)) from None
    finally:
        intr.restore()


@dataclass
class _Watch:
    finished: dict[int, float] = field(default_factory=dict)  # ranks whose shard is written -> when
    errors: dict[int, tuple[str, bool, float]] = field(default_factory=dict)  # rank -> (error, collective, when)
    died: dict[int, float] = field(default_factory=dict)  # rank -> when its process was seen dead, unfinished
    timed_out: dict[int, float] = field(default_factory=dict)
    last_cycle: dict[int, int] = field(default_factory=dict)
    window_done: set[int] = field(default_factory=set)
    window_started: set[int] = field(default_factory=set)
    stop: int | None = None  # Ctrl-C: cycles with a lower index run on every rank


def _watch(cc: CaptureConfig, procs: dict[int, Any], q: Any, ctl: Any, intr: Any, prog: Any,
           say: Callable[[str], None]) -> _Watch:
    """Follow the ranks until every process has ended; kill silent ones; end the window on Ctrl-C."""
    w = _Watch()
    last = dict.fromkeys(procs, time.monotonic())  # last progress report per rank
    cycling: set[int] = set()  # ranks past start-up (first cycle done)
    while any(p.is_alive() for p in procs.values()):
        now = time.monotonic()
        if intr.count and w.stop is None:
            w.stop = ctl.stop()
            if w.stop <= cc.warmup:
                return w
            n = min(w.stop - cc.warmup, cc.cycles)
            say(f"capture: Ctrl-C: every rank ends its window after {n} of {cc.cycles} cycles and writes what it "
                "captured (Ctrl-C again to abort)")
        for r, p in procs.items():
            if not p.is_alive() and r not in w.finished and r not in w.died:
                w.died[r] = now
                prog.rank_gone(r)
            if r in w.finished:  # its data is safe: only teardown is left; do not wait minutes for it
                if p.is_alive() and now - w.finished[r] > DONE_GRACE_S and all(
                        q_r in w.finished or not procs[q_r].is_alive() for q_r in procs):
                    p.kill()
                continue
            limit = cc.timeout_s if r in cycling else max(cc.timeout_s, cc.startup_timeout_s)
            if p.is_alive() and r not in w.timed_out and now - last[r] > limit:
                p.kill()
                w.timed_out[r] = limit
                say(f"rank {r}: no progress for {limit:g} s: killed")
        prog.tick()
        try:
            msg = q.get(timeout=0.2)
        except queue.Empty:
            continue
        _take(msg, w, prog, say)
        last[msg[1]] = time.monotonic()
        if msg[0] == "beat" and isinstance(msg[2], int):
            cycling.add(msg[1])
    for p in procs.values():
        p.join(timeout=10)
    while True:  # late messages
        try:
            msg = q.get_nowait()
        except (queue.Empty, OSError, ValueError):
            break
        _take(msg, w, prog, say)
    return w


def _take(msg: tuple[Any, ...], w: _Watch, prog: Any, say: Callable[[str], None]) -> None:
    r = msg[1]
    if msg[0] == "beat":
        if isinstance(msg[2], int):
            w.last_cycle[r] = msg[2]
            prog.cycle(r, msg[2])
    elif msg[0] == "stage":
        if msg[2] == "window done":
            w.window_done.add(r)
        if msg[2] == "window":
            w.window_started.add(r)
        prog.stage(r, msg[2], msg[3])
    elif msg[0] == "error":
        w.errors.setdefault(r, (msg[2], bool(msg[3]), time.monotonic()))
    elif msg[0] == "done":
        w.finished[r] = time.monotonic()
        prog.stage(r, "done", "shards written")
    else:
        say(f"rank {r}: {msg[2]}")


def _failures(cc: CaptureConfig, w: _Watch, procs: dict[int, Any]) -> dict[int, Any]:
    from tracekit.collectors.launcher import Failure, exit_reason

    out: dict[int, Failure] = {}
    for r in sorted(set(w.errors) | set(w.died) | set(w.timed_out)):
        if r in w.finished and r not in w.errors:
            continue
        if r in w.timed_out:
            what, coll, at = f"no progress for {w.timed_out[r]:g} s (killed)", False, w.died.get(r, time.monotonic())
        elif r in w.errors:
            err, coll, at = w.errors[r]
            what = f"failed: {err}"
            at = min(at, w.died.get(r, at))
        else:
            what, coll, at = exit_reason(procs[r].exitcode), False, w.died[r]
        c = w.last_cycle.get(r)
        if r in w.window_done:
            stage = "after its profiling window"
        elif r not in w.window_started:
            stage = "before the profiling window"
        else:
            done = 0 if c is None or c < cc.warmup else c - cc.warmup + 1
            stage = f"in the profiling window after {done} of {cc.cycles} cycles"
        out[r] = Failure(rank=r, at=at, what=what, collective=coll, stage=stage)
    return out


def _finish(cc: CaptureConfig, say: Callable[[str], None], w: _Watch, procs: dict[int, Any], world: int,
            captured: list[int], out: Path, shard_dir: Path, launcher: dict[str, Any]) -> CaptureResult:
    from tracekit.collectors.launcher import explain, rank_ranges
    from tracekit.errors import TracekitError
    from tracekit.store import merge_shards, read_manifest

    failures = _failures(cc, w, procs)
    lines = explain(failures)
    from tracekit.collectors.launcher import exit_reason

    missing: dict[str, str] = {}
    for f, line in lines:
        say(line)
        if f.rank in captured and not shard_path(shard_dir, f.rank).exists():
            missing[str(f.rank)] = f.what + (f" {f.stage}" if f.stage else "")
    for r in captured:  # no failure seen, yet no shard (should not happen): say so
        if str(r) not in missing and not shard_path(shard_dir, r).exists():
            missing[str(r)] = f"no shard written ({exit_reason(procs[r].exitcode)})"
    if lines:
        root = lines[0][0]
        tail = log_tail(log_path(shard_dir, root.rank))
        if tail:
            say(f"rank {root.rank}: last lines of {log_path(shard_dir, root.rank)}:")
            for line in tail:
                say(f"  | {line}")
        say(f"capture: full logs of every rank kept in {shard_dir}/ (rank-00000.log ...)")
    if len(missing) == len(captured):
        root_line = lines[0][1] if lines else "no rank wrote a shard"
        peers = [f.rank for f, _ in lines[1:] if f.collective]
        others = [ln for f, ln in lines[1:] if not f.collective]
        parts = [root_line] + ([f"{'ranks' if len(peers) > 1 else 'rank'} {rank_ranges(peers)} lost {'their' if len(peers) > 1 else 'its'} peer"] if peers else [])
        raise TracekitError("no rank produced data: " + "; ".join(parts + others) + f" (logs kept in {shard_dir}/)",
                            path=str(out))
    extra: dict[str, Any] = {"source": "capture", "launcher": launcher, "world_size": world,
                             "capture": cc.to_dict(), "captured_ranks": captured}
    if missing:
        extra["missing_ranks"] = missing
    if w.stop is not None:
        extra["interrupted"] = {"signal": "SIGINT", "cycles_done": max(0, min(w.stop - cc.warmup, cc.cycles)),
                                "cycles_requested": cc.cycles,
                                "note": "Ctrl-C ended the window early; the run holds the cycles captured"}
    merge_shards(shard_dir, out, extra)
    man = read_manifest(out)
    aborted = [r for r, sec in man.get("ranks", {}).items() if isinstance(sec, dict) and sec.get("aborted")]
    if missing or w.errors or aborted or cc.keep_logs:  # the merged file holds every shard: keep only the logs
        for r in range(world):
            shard_path(shard_dir, r).unlink(missing_ok=True)
        say(f"rank logs (stdout/stderr of every rank process) kept in {shard_dir}/")
    else:
        shutil.rmtree(shard_dir, ignore_errors=True)
    import pyarrow.parquet as pq

    n = pq.ParquetFile(out).metadata.num_rows
    return CaptureResult(out=out, world=world, captured=captured, missing=missing, events=n,
                         size_bytes=out.stat().st_size, manifest=man, interrupted=extra.get("interrupted"))

