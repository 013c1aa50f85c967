"""Benchmark of the Perfetto export: layout and encoder against their references, end to end and
the CLI on real multi-rank runs, and .pftrace size vs Kineto JSON.

Plain script (not a test). Builds a multi-rank run (the synthetic EAGLE-3 shape of
``tests/export_synth.py``, replicated in time to the requested size, finalized as
``tracekit ingest`` writes runs) or reads ``--run``, and measures in the same run:

- the layout (tracks, lanes, arg sets, flows): the compiled path (``fastlayout``) and the
  reference (``layout_reference.build_layout_reference``, polars frames), same Layout checked;
- the encoder: ``tracekit._core`` and the pb2 reference writer (one
  ``perfetto_trace_pb2.TracePacket`` object per packet, as Perfetto's
  ``StreamingTraceProtoBuilder`` does), both from one layout;
- ``export_run`` end to end (read + attribution buckets + layout + encode + write), in child
  processes, with the compiled core and with ``TRACEKIT_PURE=1`` (the reference paths), the
  files compared byte for byte; CPU of export_run itself (imports excluded) and of the process;
- the CLI (``tracekit export``, a child process: start-up and imports included) on real
  multi-rank runs, both ways, files compared: ``--cli-run`` (default the 2-rank H200 main job
  and the 8-rank CPU capture in samples/) and the main job replicated to ``--replicate`` x 2 ranks
  (each copy the same real events under new rank numbers, phase ids made unique);
- the Kineto-style JSON the events would come from, to compare sizes.

CPU seconds include polars' worker threads (the per-core rate of issue 14's target). The bench
exports a copy of each run rewritten once (finalized again first if it is of an older finalize
version, as ``tracekit upgrade`` does).

    python bench/export.py                     # ~1M events, 8 ranks
    python bench/export.py --events 200000 --no-pb2
    python bench/export.py --run samples/x/run.parquet --kineto samples/x/traces

Prints the load average before and after (the box may be shared).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit.export import export_run
from tracekit.export.layout import build_layout
from tracekit.export.layout_reference import build_layout_reference
from tracekit.export.perfetto import records, write_perfetto
from tracekit.finalize.pipeline import finalize_events, stamp
from tracekit.schema import GPU_KINDS
from tracekit.store import Run, load_run, write_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # test support, not in the wheel
from children import Usage, child_env, imports_only, measure, warm_bytecode
from export_data import layout_differences
from export_synth import make_events, make_manifest
from perfetto_reference import write_reference


class _Count(io.RawIOBase):
    """A sink that only counts bytes (so timings measure encoding, not the disk)."""

    def __init__(self) -> None:
        self.n = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.n += len(b)
        return len(b)


def replicated(ranks: int, target: int) -> pl.DataFrame:
    base = make_events(ranks, 10, 40, seed=1)
    span = int(base["start_ns"].max() - base["start_ns"].min()) + 1_000_000  # type: ignore[operator]
    k = max(1, -(-target // base.height))
    pid_max = int(base["phase_id"].max()) + 1  # type: ignore[arg-type]
    corr_max = int(base["correlation"].max()) + 1  # type: ignore[arg-type]
    seq_max = int(base["coll_seq"].max()) + 1  # type: ignore[arg-type]
    parts = [
        base.with_columns(
            pl.col("start_ns") + i * span,
            pl.col("phase_id") + i * pid_max,
            pl.col("cycle") + i * 10,
            pl.col("correlation") + i * corr_max,
            pl.col("coll_seq") + i * seq_max,
        )
        for i in range(k)
    ]
    return pl.concat(parts)


def kineto_json(events: pl.DataFrame, rank: int) -> bytes:
    """One rank's events the way torch.profiler's export_chrome_trace writes them (layout and args)."""
    ev = events.filter(pl.col("rank") == rank)
    base = int(events["start_ns"].min())  # type: ignore[arg-type]
    out = io.StringIO()
    head = {"schemaVersion": 1, "deviceProperties": [{"id": rank, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 8}, "baseTimeNanoseconds": base,
            "cuda_driver_version": 13000, "trace_id": "0" * 32}
    out.write(json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n')
    cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset", "launch": "cuda_runtime", "runtime": "cuda_runtime",
           "sync": "cuda_sync", "range": "user_annotation", "op": "cpu_op", "gpu_range": "gpu_user_annotation"}
    rows = []
    for r in ev.iter_rows(named=True):
        if r["kind"] == "counter":
            continue
        rel = r["start_ns"] - base
        ts = f"{rel // 1000}.{rel % 1000:03d}"
        dur = f"{r['dur_ns'] // 1000}.{r['dur_ns'] % 1000:03d}"
        gpu = r["kind"] in GPU_KINDS
        pid = r["device"] if gpu else r["pid"]
        tid = r["stream"] if gpu else r["tid"]
        if gpu:
            args = (f'\n      "External id": {r["correlation"] or 0},\n      "queued": 0, "device": {r["device"]}, "context": 1,\n'
                    f'      "stream": {r["stream"]}, "correlation": {r["correlation"] or 0},\n'
                    '      "registers per thread": 128,\n      "shared memory": 0,\n      "blocks per SM": 0.5,\n'
                    '      "warps per SM": 2.0,\n      "grid": [132, 1, 1],\n      "block": [128, 1, 1],\n'
                    '      "est. achieved occupancy %": 3\n    ')
        elif r["kind"] == "launch":
            args = f'\n      "External id": {r["correlation"] or 0},\n      "cbid": 211, "correlation": {r["correlation"] or 0}\n    '
        else:
            args = f'\n      "External id": {r["external_id"] or 0},\n      "Record function id": 0, "Ev Idx": 0\n    '
        rows.append(f'  {{\n    "ph": "X", "cat": "{cat.get(r["kind"], "cpu_op")}", "name": {json.dumps(r["name"])}, '
                    f'"pid": {pid}, "tid": {tid},\n    "ts": {ts}, "dur": {dur},\n    "args": {{{args}}}\n  }}')
    out.write(",\n".join(rows))
    out.write('\n  ],\n  "traceName": "rank.pt.trace.json"\n}\n')
    return out.getvalue().encode()


def finalized_copy(src: Path, dest: Path) -> int:
    """``src`` rewritten as the current tracekit writes runs (finalized, manifest stamped); its row count."""
    r = load_run(src)
    if r.outdated is not None:
        r = Run(finalize_events(r.events), stamp(r.manifest))
    write_run(r.events, dest, r.manifest)
    return r.events.height


def replicate_run(src: Path, copies: int, dest: Path) -> int:
    """A larger real run: ``copies`` copies of ``src``'s events side by side, copy k's ranks
    renumbered r + k * world, phase ids made unique; the rank sections of the manifest copied."""
    r = load_run(src)
    ev, man = r.events, dict(r.manifest)
    world = int(ev["rank"].max()) + 1  # type: ignore[arg-type]
    pid_span = int(ev["phase_id"].max()) + 1  # type: ignore[arg-type]
    parts = [ev.with_columns(pl.col("rank") + k * world, pl.col("phase_id") + k * pid_span) for k in range(copies)]
    ranks = man.get("ranks", {})
    man["ranks"] = {str(int(q) + k * world): v for k in range(copies) for q, v in ranks.items()}
    man["world_size"] = world * copies
    man["captured_ranks"] = list(range(world * copies))
    out = pl.concat(parts)
    write_run(out, dest, stamp(man))
    return out.height


def child_cpu(cmd: list[str], env: dict[str, str]) -> Usage:
    """Run a child (``children.measure``, stdout kept); exits with the child's error if it failed."""
    u = measure(cmd, env, keep_stdout=True)
    if u.failed:
        raise SystemExit(f"{' '.join(cmd)}: {u.failed}")
    return u


def envs() -> tuple[dict[str, str], dict[str, str]]:
    fast = child_env()  # bytecode cached, as for an installed tracekit (bench/children.py)
    fast.pop("TRACEKIT_PURE", None)
    import tracekit

    warm_bytecode(Path(tracekit.__file__).resolve().parent.parent)  # the tracekit the children import
    return fast, {**fast, "TRACEKIT_PURE": "1"}


def same_file(a: Path, b: Path) -> str:
    return "byte-identical" if a.read_bytes() == b.read_bytes() else "DIFFERENT"


def child_export(run: str, out: str) -> int:
    """--child-export: export_run once, print its CPU (all threads) and wall seconds."""
    t, c = time.perf_counter(), time.process_time()
    export_run(run, out)
    print(f"{time.process_time() - c:.4f} {time.perf_counter() - t:.4f}")
    return 0


BUDGET: Final = {"read": 0.15, "buckets (attribution)": 0.30, "layout": 0.35, "encode": 0.20}  # cpu-s per 1 M events


def stages(run_file: Path) -> None:
    """Where export_run's CPU goes (compiled paths, in this process): each stage 3 times, the least CPU,
    per 1 M run events against the budget of docs/export.md (1.0 cpu-s per 1 M events in all)."""
    from tracekit.analyzers.attribution import attribute_instances
    from tracekit.export import attribution_buckets
    from tracekit.export.select import Selection, select_events

    got: dict[str, float] = {}

    def step(label: str, fn: Any) -> Any:
        best, out = float("inf"), None
        for _ in range(3):
            c = time.process_time()
            out = fn()
            best = min(best, time.process_time() - c)
        got[label] = best
        return out

    r = step("read", lambda: load_run(run_file))
    n = r.events.height
    picked = step("select", lambda: select_events(r.events, Selection()))
    bk = step("buckets (attribution)", lambda: attribution_buckets(r.events, []))
    step("of which attribute_instances (analyzers/)", lambda: attribute_instances(r.events))
    lay = step("layout", lambda: build_layout(picked, r.manifest, buckets=bk))
    step("encode", lambda: write_perfetto(lay, _Count()))  # type: ignore[arg-type]
    total = sum(v for k, v in got.items() if not k.startswith("of which"))
    print(f"export_run stages, compiled, least cpu-s of 3 ({n} events): " + ", ".join(f"{k} {v:.3f}" for k, v in got.items())
          + f"; sum {total:.3f} = {n / total / 1e6:.2f} M run events/s per core")
    print("  per 1 M run events (budget): " + ", ".join(
        f"{k} {v * 1e6 / n:.3f}" + (f" ({BUDGET[k]:.2f})" if k in BUDGET else "") for k, v in got.items())
        + f"; sum {total * 1e6 / n:.3f} (1.00)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="run rows for the synthetic run")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--run", type=Path, help="use this run.parquet instead of a synthetic one")
    ap.add_argument("--kineto", type=Path, help="directory of the Kineto JSON files the run was ingested from")
    samples = Path(__file__).resolve().parent.parent / "samples"
    ap.add_argument("--cli-run", type=Path, action="append",
                    help="real run exported with the CLI in a child process (repeatable) "
                         "[default: samples/h200x2-mainjob/eager.parquet, samples/cpu8-builtin/run.parquet]")
    ap.add_argument("--replicate", type=int, default=8, help="copies of the main job for the large real run (0: none)")
    ap.add_argument("--no-pb2", action="store_true", help="skip the pb2 reference writer (slow)")
    ap.add_argument("--cli-repeat", type=int, default=3,
                    help="rounds of each export_run and CLI row, in fresh processes (best and median printed)")
    ap.add_argument("--write-runs", type=Path, metavar="DIR",
                    help="write the synthetic run (synthetic.parquet) and the replicated main job (mainjob-x<N>.parquet) to DIR and stop")
    ap.add_argument("--stages-only", action="store_true",
                    help="only the stages of export_run on --run (with PYTHONPATH=<another checkout>: that code's stages)")
    ap.add_argument("--child-export", nargs=2, metavar=("RUN", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cli_repeat < 1:
        ap.error("--cli-repeat needs at least 1 round")
    if a.child_export:
        return child_export(*a.child_export)
    if a.write_runs:
        a.write_runs.mkdir(parents=True, exist_ok=True)
        write_run(finalize_events(replicated(a.ranks, a.events)), a.write_runs / "synthetic.parquet", stamp(make_manifest(a.ranks)))
        main_job = samples / "h200x2-mainjob" / "eager.parquet"
        n = replicate_run(main_job, a.replicate, a.write_runs / f"mainjob-x{a.replicate}.parquet")
        print(f"wrote {a.write_runs}/synthetic.parquet and mainjob-x{a.replicate}.parquet ({n} events)")
        return 0
    if a.stages_only:
        if not a.run:
            ap.error("--stages-only needs --run")
        import tracekit

        print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) + f"; tracekit from {Path(tracekit.__file__).parent}")
        stages(a.run)
        return 0
    cli_runs = a.cli_run or [samples / "h200x2-mainjob" / "eager.parquet", samples / "cpu8-builtin" / "run.parquet"]
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    fast_env, pure_env = envs()
    exe = Path(sys.executable).with_name("tracekit")

    if a.run:
        r = load_run(a.run)
        events, manifest = r.events, r.manifest
    else:
        events, manifest = finalize_events(replicated(a.ranks, a.events)), stamp(make_manifest(a.ranks))
    n_rows = events.height
    print(f"run: {n_rows} events, {events['rank'].n_unique()} ranks")

    res: dict[str, float] = {}
    for label, fn in (("reference (polars frames)", build_layout_reference), ("compiled (fastlayout)", build_layout)):
        t, c = time.perf_counter(), time.process_time()
        lay = fn(events, manifest, flows=("launches",))
        res[label] = time.process_time() - c
        print(f"layout, {label}: {res[label]:.2f} cpu-s ({time.perf_counter() - t:.2f} s wall) = "
              f"{n_rows / res[label] / 1e6:.2f} M run events/s per core")
    diff = layout_differences(lay, build_layout_reference(events, manifest, flows=("launches",)))
    print(f"ratio layout reference / compiled: {res['reference (polars frames)'] / res['compiled (fastlayout)']:.1f}x (cpu); "
          f"same layout: {not diff} {diff or ''}")
    n_packets = int(records(lay)[0].size)
    print(f"layout: {lay.n_slices} slices, {lay.n_counters} counter values, {lay.flow_id.size} flows, "
          f"{n_packets} event packets, {len(lay.tracks)} tracks")

    best = best_wall = float("inf")
    size = 0
    for _ in range(3):
        sink = _Count()
        t, c = time.perf_counter(), time.process_time()
        write_perfetto(lay, sink)  # type: ignore[arg-type]
        best = min(best, time.process_time() - c)
        best_wall = min(best_wall, time.perf_counter() - t)
        size = sink.n
    print(f"encoder (tracekit._core): {best:.2f} cpu-s ({best_wall:.2f} s wall) = {n_rows / best / 1e6:.2f} M run events/s, "
          f"{n_packets / best / 1e6:.2f} M trace events (packets)/s per core, {size / 1e6:.1f} MB")
    if not a.no_pb2:
        sink = _Count()
        t, c = time.perf_counter(), time.process_time()
        write_reference(lay, sink)  # type: ignore[arg-type]
        t_ref, t_ref_wall = time.process_time() - c, time.perf_counter() - t
        print(f"reference (pb2 objects):  {t_ref:.2f} cpu-s ({t_ref_wall:.2f} s wall) = {n_rows / t_ref / 1e6:.2f} M run events/s, "
              f"{n_packets / t_ref / 1e6:.3f} M trace events (packets)/s per core, {sink.n / 1e6:.1f} MB")
        print(f"ratio encoder / pb2 reference speed: {t_ref / best:.1f}x (cpu), {t_ref_wall / best_wall:.1f}x (wall)")

    with tempfile.TemporaryDirectory() as tmp:
        td = Path(tmp)
        run_file = a.run if a.run else write_run(events, td / "run.parquet", manifest)
        bench = str(Path(__file__).resolve())
        got: dict[str, tuple[float, float, float]] = {}
        tries: dict[str, list[tuple[float, float, float, float, float]]] = {"compiled": [], "reference (TRACEKIT_PURE=1)": []}
        for _ in range(a.cli_repeat):  # fresh child processes, the two alternating
            for label, env in (("compiled", fast_env), ("reference (TRACEKIT_PURE=1)", pure_env)):
                out = td / f"{label[:4]}.pftrace"
                u = child_cpu([sys.executable, bench, "--child-export", str(run_file), str(out)], env)
                c_in, w_in = (float(x) for x in u.stdout.split())
                tries[label].append((c_in, w_in, u.cpu, u.system, u.faults))
        for label, rows in tries.items():
            c_in, w_in, cpu, sys_s, faults = min(rows)
            got[label] = (c_in, w_in, cpu)
            med = statistics.median(r[0] for r in rows)
            print(f"export_run (read + buckets + layout + encode + write), {label}, best of {len(rows)} fresh processes: "
                  f"{c_in:.2f} cpu-s ({w_in:.2f} s wall) = {n_rows / c_in / 1e6:.2f} M run events/s per core (median "
                  f"{n_rows / med / 1e6:.2f}); that process whole {cpu:.2f} cpu-s (system {sys_s:.2f}, {faults:.0f} minor faults) = "
                  f"{n_rows / cpu / 1e6:.2f} M/s (target >= 1)")
        print(f"ratio export_run reference / compiled: {got['reference (TRACEKIT_PURE=1)'][0] / got['compiled'][0]:.1f}x (cpu, best of each); "
              f"files {same_file(td / 'comp.pftrace', td / 'refe.pftrace')}")
        stages(run_file)
        pf_size = os.path.getsize(td / "comp.pftrace")

        real: list[tuple[str, Path, int]] = []
        for p in cli_runs:
            if p.exists():
                dest = td / f"{p.parent.name}-{p.stem}.parquet"
                real.append((f"{p.parent.name}/{p.name}", dest, finalized_copy(p, dest)))
        main_job = samples / "h200x2-mainjob" / "eager.parquet"
        if a.replicate > 0 and main_job.exists():
            dest = td / "mainjob-replicated.parquet"
            n = replicate_run(main_job, a.replicate, dest)
            real.append((f"h200x2-mainjob/eager.parquet x{a.replicate} ({2 * a.replicate} ranks)", dest, n))
        for name, path, n in real:
            runs: dict[str, list[tuple[float, float, float, float]]] = {"compiled": [], "TRACEKIT_PURE=1": []}
            for _ in range(a.cli_repeat):  # the two alternate: a change in the box's load falls on both
                for label, env in (("compiled", fast_env), ("TRACEKIT_PURE=1", pure_env)):
                    u = child_cpu([str(exe), "export", str(path), "-o", str(td / f"cli-{label[:4]}.pftrace")], env)
                    runs[label].append((u.cpu, u.wall, u.system, u.faults))
            for label, cli_rows in runs.items():
                cpu, wall, sys_s, faults = min(cli_rows)
                med = statistics.median(r[0] for r in cli_rows)
                print(f"CLI `tracekit export` {name} ({n} events, child process, start-up included), {label}: "
                      f"best of {len(cli_rows)} {cpu:.2f} cpu-s (system {sys_s:.2f}, {faults:.0f} minor faults; {wall:.2f} s wall) = "
                      f"{n / cpu / 1e6:.2f} M run events/s per core, median {med:.2f} cpu-s = {n / med / 1e6:.2f} M/s (target >= 1)")
            print(f"  ratio reference / compiled: {min(runs['TRACEKIT_PURE=1'])[0] / min(runs['compiled'])[0]:.2f}x (cpu, best of each); files "
                  f"{same_file(td / 'cli-comp.pftrace', td / 'cli-TRAC.pftrace')}")
        u = child_cpu([sys.executable, "-c", imports_only("import polars, numpy")], fast_env)
        print(f"start-up floor: `python -c 'import polars, numpy'` (ending as the CLI does, no teardown) {u.cpu:.2f} cpu-s ({u.wall:.2f} s wall)")
        u = child_cpu([str(exe), "--help"], fast_env)
        print(f"`tracekit --help` {u.cpu:.2f} cpu-s ({u.wall:.2f} s wall)")

    if a.kineto:
        files = sorted(p for p in a.kineto.rglob("*.json*") if p.is_file())
        raw = sum(len(gzip.decompress(p.read_bytes())) if p.suffix == ".gz" else p.stat().st_size for p in files)
        src = f"{len(files)} Kineto files in {a.kineto}"
    else:
        raw = sum(len(kineto_json(events, r)) for r in sorted(events["rank"].unique().to_list()))
        src = "Kineto-style JSON of the same events"
    print(f"size: .pftrace {pf_size / 1e6:.1f} MB vs {src} {raw / 1e6:.1f} MB (uncompressed): "
          f"ratio {pf_size / raw:.3f} (target <= 0.333)")
    print("load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
