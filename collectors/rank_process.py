"""The body of one capture rank process (spawned by tracekit.collectors.launcher).

``rank_main`` redirects the process's output to its log, runs the rank (process group,
workload, warm-up, profiling window), writes its shard and always ends in ``os._exit``;
it reports to the launcher through a queue (beat / stage / error / done messages).
"""

from __future__ import annotations

import contextlib
import os
import time
import traceback
from pathlib import Path
from typing import Any

from tracekit.collectors.capture import (
    SAFE_ENV,
    CaptureConfig,
    log_path,
    shard_path,
    window_label,
)
from tracekit.collectors.messages import WINDOW, WINDOW_DONE, Beat, Done, Failed, Stage, Status
from tracekit.process_exit import exit_now, flush_stdio


def redirect_output(path: Path) -> None:
    """Point this process's stdout and stderr file descriptors (C++ and Python alike) at ``path``."""
    flush_stdio()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)



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


def rank_main(rank: int, world: int, kind: str, cc: CaptureConfig, port: int, shard_dir: str, q: Any,
               ctl: Any = None) -> None:
    """Body of one rank process; always ends in os._exit (NCCL threads must not keep it alive)."""
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
        q.put(Failed(rank, short_error(f"{exc.__class__.__name__}: {exc}"), coll))
        code = 1
    finally:
        try:
            q.close()
            q.join_thread()
        except Exception:
            pass
    exit_now(code)


def _rank_body(rank: int, world: int, kind: str, cc: CaptureConfig, port: int, shard_dir: Path, q: Any,
               ctl: Any = None) -> None:
    os.environ.update(SAFE_ENV)
    for k, v in cc.rank_env.get(rank, {}).items():  # None unsets: a launcher variable that never reached this rank
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    local = cc.nodes.local_index(rank)
    os.environ.update(
        {"MASTER_ADDR": cc.nodes.master_addr, "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world),
         "LOCAL_RANK": str(local)}
    )
    q.put(Beat(rank))
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from tracekit.collectors.manifest import NvmlSampler, rank_section
    from tracekit.collectors.session import ProfilerSession
    from tracekit.collectors.timing import BEFORE, REFERENCE_POOL


    cuda = kind == "cuda"
    if cuda:
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        torch.set_num_threads(1)
        device = torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo", rank=rank, world_size=world, timeout=timedelta(seconds=cc.coll_timeout_s),
        device_id=device if cuda else None,
    )
    q.put(Stage(rank, "pg", "process group up"))
    total = cc.warmup + cc.cycles
    size = total + cc.after
    wl = cc.workload.build(rank, world, device, size)  # collectors/engines.py: EngineConfig.build
    wl.capture_graphs()
    q.put(Stage(rank, "ready", f"workload ready (graphs: {','.join(sorted(wl.graphs)) or 'none'}; moe: {wl.moe_impl})"))
    skip = min(2, max(cc.warmup - 1, 0))
    for c in range(cc.warmup):
        if ctl is not None and not ctl.may_start(rank, c):
            break
        wl.timer.window = BEFORE if c >= skip else None
        wl.run_cycle(c)
        q.put(Beat(rank, c))
    wl.sync()
    wl.timer.window = None
    me = rank in cc.captured(world)
    dev_index = local if cuda else None
    start = rank_section(rank, world, dev_index, "start")
    session = ProfilerSession(rank, cuda, mode=cc.profile, config=cc.settings) if me else None
    sampler = NvmlSampler(local, rank, cc.nvml_interval_s) if (me and cuda and cc.nvml_interval_s > 0) else None
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
    q.put(Stage(rank, WINDOW, "profiling window started"))
    try:
        for c in range(cc.warmup, total):
            if ctl is not None and not ctl.may_start(rank, c):
                break  # Ctrl-C: every rank ends its window after the same cycle
            wl.run_cycle(c)
            done += 1
            q.put(Beat(rank, c))
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
    q.put(Stage(rank, WINDOW_DONE, f"window done: {done}/{cc.cycles} cycles"))
    if aborted:
        q.put(Status(rank, f"window ended early after {done}/{cc.cycles} cycles: {aborted[:200]}"))
    # the shard is written before anything that needs a peer again (the unprofiled cycles after the
    # window run collectives): a rank that dies there costs the others only their after-block
    shard = None
    if session is not None:
        shard = _Shard(rank, world, cc, wl, session, sampler, counters, start, end, done, aborted, device, shard_dir)
        shard.write(wl.timer.stats(pool=REFERENCE_POOL) if aborted is None else {})
    after_failed: str | None = None
    if aborted is None and done == cc.cycles and (ctl is None or int(ctl.stop_at.value) < 0):
        try:
            _reference_after(wl, total, cc.after)  # the same process, the next shapes, profiler stopped
        except Exception as exc:
            from tracekit.collectors.launcher import short_error

            after_failed = short_error(f"{exc.__class__.__name__}: {exc}")
            q.put(Status(rank, f"the unprofiled cycles after the window failed ({after_failed[:200]}); its shard "
                                   "keeps the window, the dilation's reference is the warm-up block alone"))
        else:
            if shard is not None and cc.after:
                shard.write(wl.timer.stats(pool=REFERENCE_POOL))  # the reference with its second block
    if shard is not None and cc.remote is not None:  # -o is a URL: the shard, whole, in one PUT
        from tracekit.collectors.remote import UploadFailed, upload

        try:
            upload(shard.path, cc.remote, "its shard")
        except UploadFailed as exc:  # this rank's data is lost, not its peers': they still pass the barrier
            shard.path.unlink(missing_ok=True)
            q.put(Failed(rank, exc.message, False))
            shard = None
    if shard is not None:
        q.put(Done(rank, shard.rows))
    if aborted is None and after_failed is None:  # every rank has written its shard before any exits (rank 0 hosts the TCPStore)
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


class _Shard:
    """One rank's shard: its events finalized once, written (atomically) with the timer stats known so
    far; written again, events unchanged, when the unprofiled cycles after the window add the
    reference's second block."""

    def __init__(self, rank: int, world: int, cc: CaptureConfig, wl: Any, session: Any, sampler: Any, counters: Any,
                 start: dict[str, Any], end: dict[str, Any], done: int, aborted: str | None, device: Any,
                 shard_dir: Path) -> None:
        self.args = (rank, world, cc, wl, session, sampler, counters, start, end, done, aborted, device)
        self.path = shard_path(shard_dir, rank)
        self.events, self.finalized = _shard_events(rank, cc, session, counters)
        self.rows = self.events.height

    def write(self, stats: dict[str, Any]) -> None:
        from tracekit.finalize.pipeline import stamp
        from tracekit.store import write_run

        man = _shard_manifest(*self.args, stats)
        write_run(self.events, self.path, stamp(man) if self.finalized else man)


def _shard_events(rank: int, cc: CaptureConfig, session: Any, counters: Any) -> tuple[Any, bool]:
    """The rank's events, finalized (False with the raw events when finalizing failed: the merge
    finalizes them again; the manifest says why)."""
    import polars as pl

    from tracekit.collectors.session import finalize

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
    return events, finalized


def _shard_manifest(rank: int, world: int, cc: CaptureConfig, wl: Any, session: Any, sampler: Any, counters: Any,
                    start: dict[str, Any], end: dict[str, Any], done: int, aborted: str | None, device: Any,
                    stats: dict[str, Any]) -> dict[str, Any]:
    import torch.distributed as dist

    from tracekit.collectors.manifest import versions
    from tracekit.collectors.timing import (
        BEFORE,
        REFERENCE,
        dilation,
        reference_spread,
        split_cycle,
    )
    from tracekit.store import new_manifest

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
    if cc.nodes.multi:
        section["node"] = {"node_rank": cc.nodes.node_rank, "local_rank": cc.nodes.local_index(rank),
                           "nnodes": cc.nodes.nnodes, "master": f"{cc.nodes.master_addr}:{os.environ['MASTER_PORT']}",
                           "launcher": cc.nodes.source}
    clock = ({"align": "none", "note": "ranks share one host's system clock", "offsets_ns": {str(rank): 0}}
             if not cc.nodes.multi else
             {"align": "none", "note": "each rank on its host's own system clock (multi-host capture): the merge "
                                       "aligns hosts by their collectives", "offsets_ns": {str(rank): 0}})
    man = new_manifest(
        source="capture",
        world_size=world,
        capture=cc.to_dict(),
        ranks={str(rank): section},
        clock=clock,
    )
    return man
