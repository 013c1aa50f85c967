"""The end of a capture: why ranks failed, the merged run, which shards and logs stay."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.collectors.capture import CaptureConfig, CaptureResult, log_path, shard_path
from tracekit.collectors.progress import Watch
from tracekit.collectors.remote import Remote


def log_tail(path: Path, lines: int = 12) -> list[str]:
    """The last non-empty lines of a rank log ([] when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def _failures(cc: CaptureConfig, w: Watch, procs: dict[int, Any]) -> dict[int, Any]:
    from tracekit.collectors.launcher import Failure, exit_reason
    from tracekit.collectors.progress import STOPPED

    out: dict[int, Failure] = {}
    for r in sorted(set(w.errors) | set(w.died) | set(w.timed_out)):
        if r in w.finished and r not in w.errors:
            continue
        if r in w.timed_out:
            # when it went silent, not when it was killed: a stopped rank (SIGSTOP, a hang) is the root
            # cause of its peers' collective timeouts that come before the launcher's silence limit;
            # a silent rank that was not stopped while another was waited for that one (lost its peer)
            stopped = r in w.stopped
            what = f"{STOPPED + ', ' if stopped else ''}no progress for {w.timed_out[r]:g} s (killed)"
            coll = bool(w.stopped) and not stopped
            at = w.silent_since.get(r, w.died.get(r, time.monotonic()))
        elif r in w.errors:
            err, coll, at = w.errors[r]
            what = f"failed: {err}"
            at = min(at, w.died.get(r, at))
        else:
            what, coll, at = exit_reason(procs[r].exitcode), False, w.died[r]
        if w.stopped and r not in w.stopped and at >= min(w.silent_since.get(s, at) for s in w.stopped):
            coll = True  # failed after a peer was stopped: it waited for that one (the stopped rank is the cause)
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


def finish(cc: CaptureConfig, say: Callable[[str], None], w: Watch, procs: dict[int, Any], world: int,
            captured: list[int], out: Path, shard_dir: Path, launcher: dict[str, Any]) -> CaptureResult:
    import pyarrow.parquet as pq

    from tracekit.collectors.launcher import explain
    from tracekit.errors import TracekitError
    from tracekit.manifest import typed
    from tracekit.ranklist import format_rank_list
    from tracekit.shard_merge import merge_shards
    from tracekit.store import read_manifest

    failures = _failures(cc, w, procs)
    lines = explain(failures)
    from tracekit.collectors.launcher import exit_reason

    nodes = cc.nodes
    where = f" on node {nodes.node_rank} (host {socket.gethostname()})" if nodes.multi else ""
    missing: dict[str, str] = {}
    for f, line in lines:
        say(line)
        if f.rank in captured and not shard_path(shard_dir, f.rank).exists():
            missing[str(f.rank)] = f.what + (f" {f.stage}" if f.stage else "") + where
    for r in captured:  # no failure seen, yet no shard (should not happen): say so
        if r in procs and str(r) not in missing and not shard_path(shard_dir, r).exists():
            missing[str(r)] = f"no shard written ({exit_reason(procs[r].exitcode)})" + where
    remote = cc.remote
    logs_at = str(shard_dir) if remote is None else remote.prefix  # where kept logs stay
    if remote is not None and (lines or cc.keep_logs):
        logs_at = _upload_logs(cc, shard_dir, sorted(procs), say)
    if lines:
        root = lines[0][0]
        tail = log_tail(log_path(shard_dir, root.rank))
        if tail:
            say(f"rank {root.rank}: last lines of {log_path(shard_dir, root.rank) if remote is None else 'its log'}:")
            for line in tail:
                say(f"  | {line}")
        say(f"capture: full logs of every rank kept in {logs_at}/ (rank-00000.log ...)")
    node_extra: dict[str, Any] = {}
    remote_rows = remote_size = 0  # -o URL: the run's events and bytes, from the shards' footers and the node files
    if nodes.multi:
        from tracekit.collectors.nodes import (
            missing_from_nodes,
            node_info,
            node_wait_s,
            read_nodes,
            wait_nodes,
            write_node,
        )

        mine = [r for r in sorted(procs) if shard_path(shard_dir, r).exists()]
        # read before the end file is written: node 0 may merge and remove the shards right after it
        rows = sum(pq.ParquetFile(shard_path(shard_dir, r)).metadata.num_rows for r in mine)
        size = sum(shard_path(shard_dir, r).stat().st_size for r in mine)
        write_node(shard_dir, nodes.node_rank, "ended", node_info(nodes, shards=mine, failed=missing, rows=rows,
                                                                  bytes=size), remote)
        if nodes.node_rank != 0:
            at, run = (shard_dir, out) if remote is None else (remote.prefix, remote.run)
            then = (f"node 0 merges them into {run} (or: tracekit merge {at} -o {out if remote is None else 'run.parquet'})"
                    if remote is None or remote.merged else f"the run stays sharded under {run}")
            say(f"capture: node {nodes.node_rank}: {len(mine)} shard(s) written to {at}/; {then}")
            return CaptureResult(out=run, world=world, captured=captured, missing=missing, events=rows,
                                 size_bytes=size, manifest={}, merged_by=0, local_ranks=sorted(procs))
        wait = node_wait_s()
        ended = wait_nodes(shard_dir, nodes, wait, say, remote=remote)
        missing.update(missing_from_nodes(nodes, shard_dir, set(), wait, remote))
        node_extra["nodes"] = {str(n): {k: v for k, v in info.items() if k in ("host", "pid", "ranks", "taken_unix_ns")}
                               for n, info in sorted(read_nodes(shard_dir, "started", remote).items())}
        peers_ended = [info for n, info in ended.items() if n != nodes.node_rank]
        remote_rows = rows + sum(int(info.get("rows") or 0) for info in peers_ended)
        remote_size = size + sum(int(info.get("bytes") or 0) for info in peers_ended)
    elif remote is not None:
        mine = [r for r in sorted(procs) if shard_path(shard_dir, r).exists()]
        remote_rows = sum(pq.ParquetFile(shard_path(shard_dir, r)).metadata.num_rows for r in mine)
        remote_size = sum(shard_path(shard_dir, r).stat().st_size for r in mine)
    if len(missing) == len(captured):
        root_line = lines[0][1] if lines else "no rank wrote a shard"
        peers = [f.rank for f, _ in lines[1:] if f.collective]
        others = [ln for f, ln in lines[1:] if not f.collective]
        parts = [root_line] + ([f"{'ranks' if len(peers) > 1 else 'rank'} {format_rank_list(peers)} lost {'their' if len(peers) > 1 else 'its'} peer"] if peers else [])
        raise TracekitError("no rank produced data: " + "; ".join(parts + others) + f" (logs kept in {logs_at}/)",
                            path=str(out if remote is None else remote.run))
    extra: dict[str, Any] = {"source": "capture", "launcher": launcher, "world_size": world,
                             "capture": cc.to_dict(), "captured_ranks": captured, **node_extra}
    if missing:
        extra["missing_ranks"] = missing
    if w.stop is not None:
        extra["interrupted"] = {"signal": "SIGINT", "cycles_done": max(0, min(w.stop - cc.warmup, cc.cycles)),
                                "cycles_requested": cc.cycles,
                                "note": "Ctrl-C ended the window early; the run holds the cycles captured"}
    if remote is not None:
        return _finish_remote(cc, say, remote, extra, world, captured, missing, out, procs,
                              bool(missing or lines or cc.keep_logs), remote_rows, remote_size)
    merge_shards(shard_dir, out, extra)
    man = read_manifest(out)
    aborted = [r for r, sec in typed(man).ranks.items() if sec.aborted]
    # the merged file holds every shard: keep only the logs, whenever a rank failed (the lines above said so)
    if missing or lines or aborted or cc.keep_logs:
        for r in range(world):
            shard_path(shard_dir, r).unlink(missing_ok=True)
        say(f"rank logs (stdout/stderr of every rank process) kept in {shard_dir}/")
    else:
        shutil.rmtree(shard_dir, ignore_errors=True)
    n = pq.ParquetFile(out).metadata.num_rows
    return CaptureResult(out=out, world=world, captured=captured, missing=missing, events=n,
                         size_bytes=out.stat().st_size, manifest=man, interrupted=extra.get("interrupted"),
                         local_ranks=sorted(procs))



def _upload_logs(cc: CaptureConfig, shard_dir: Path, ranks: list[int], say: Callable[[str], None]) -> str:
    """-o URL: this node's rank logs uploaded beside the shards (each in one PUT); returns where they are."""
    from tracekit.collectors.remote import UploadFailed, upload

    assert cc.remote is not None
    for r in ranks:
        if log_path(shard_dir, r).exists():
            try:
                upload(log_path(shard_dir, r), cc.remote, f"rank {r}'s log")
            except UploadFailed as exc:
                say(f"capture: {exc.message}")
    return cc.remote.prefix


def _finish_remote(cc: CaptureConfig, say: Callable[[str], None], remote: Remote, extra: dict[str, Any], world: int,
                   captured: list[int], missing: dict[str, str], local_out: Path, procs: dict[int, Any], keep: bool,
                   rows: int, size: int) -> CaptureResult:
    """-o URL on the node that ends the capture: the shards are under ``remote.prefix`` (every node uploaded
    its own). A sharded run stays there; else they are merged (here, into ``local_out``) and the run is
    uploaded as ``remote.merged`` in one PUT, then the shards (and, when nothing failed, the logs and node
    files) are deleted from the prefix."""
    import pyarrow.parquet as pq

    from tracekit.collectors.remote import UploadFailed, upload_to
    from tracekit.shard_merge import merge_shards
    from tracekit.store import read_manifest
    from tracekit.urls import problem, remove, shard_urls

    if remote.merged is None:
        _stamp_run_fields(remote, local_out.parent, sorted(procs), extra, say)
        man = {**read_manifest(remote.prefix), **extra}
        say(f"capture: the run stays sharded under {remote.run} (tracekit merge {remote.prefix} -o run.parquet makes "
            "one file)")
        return CaptureResult(out=remote.run, world=world, captured=captured, missing=missing, events=rows,
                             size_bytes=size, manifest=man, interrupted=extra.get("interrupted"),
                             local_ranks=sorted(procs))
    merge_shards(remote.prefix, local_out, extra)
    man = read_manifest(local_out)
    try:
        upload_to(local_out, remote.merged, "the merged run")
    except UploadFailed as exc:  # the shards stay where they are: the run can be merged later
        raise UploadFailed(f"{exc.message}; the shards stay under {remote.prefix}/ (tracekit merge {remote.prefix} "
                           "-o run.parquet)", path=remote.merged) from None
    try:
        names = ["rank-*.parquet"] + ([] if keep else ["rank-*.log", "node-*.json"])
        remove([u for n in names for u in shard_urls(remote.prefix, n)])
    except Exception as exc:  # the run is written: what is left under the prefix is said, not fatal
        say(f"capture: the merged run is written, but its shards under {remote.prefix}/ could not be deleted "
            f"({problem(exc)})")
    if keep:
        say(f"rank logs (stdout/stderr of every rank process) kept in {remote.prefix}/")
    n = pq.ParquetFile(local_out).metadata.num_rows
    return CaptureResult(out=remote.merged, world=world, captured=captured, missing=missing, events=n,
                         size_bytes=local_out.stat().st_size, manifest=man, interrupted=extra.get("interrupted"),
                         local_ranks=sorted(procs))



def _stamp_run_fields(remote: Remote, shard_dir: Path, local: list[int], extra: dict[str, Any],
                      say: Callable[[str], None]) -> None:
    """A sharded run left under a prefix has no file of its own: the capture's run fields (``extra``:
    captured and missing ranks with why, nodes, launcher, interrupted) go into the manifest of node 0's
    lowest shard, uploaded again in one PUT (``store.merge_manifests`` takes a run's other keys from its
    first shard and unites ``missing_ranks``, as an ingest's shards carry the run's manifest)."""
    from tracekit.collectors.remote import UploadFailed, upload
    from tracekit.store import load_run, write_run

    have = [r for r in local if shard_path(shard_dir, r).exists()]
    if not have:
        return
    run = load_run(shard_path(shard_dir, have[0]))
    again = write_run(run.events, shard_path(shard_dir / "run-fields", have[0]), {**run.manifest, **extra}, sort=False)
    try:
        upload(again, remote, f"rank {have[0]}'s shard with the run's fields")
    except UploadFailed as exc:  # the shard uploaded first stays whole: the run reads without these fields
        say(f"capture: {exc.message}")
