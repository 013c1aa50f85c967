"""Ingest speed and memory: tracekit ingest vs gunzip+orjson.loads vs Holistic Trace Analysis.

    python bench/ingest.py [--mb 120] [--ranks 8] [--repeat 2] [--source TRACE]
                           [--real 'samples/h200x2-builtin/eager-rank-*.trace.json.gz' ...] [--no-replicated]

The large input is ONE real trace replicated: (once, cached under bench/data/, git-ignored) a
real trace (``--source``, else the first raw trace under samples/, else a torch CPU-profiler
trace made here) is copied into ``--ranks`` rank files (``distributedInfo.rank`` set) and
into windows inside each file (timestamps shifted exactly, in decimal text) until there are
at least ``--mb`` MB of uncompressed Kineto JSON. Files are .json.gz like SGLang's. With
``--real GLOB`` (repeatable) the same tools also run on each set of real files, as they are.

Each tool runs in a fresh subprocess on the same files (so peak RSS is its own), with
POLARS_MAX_THREADS=1:

1. tracekit: ``ingest_traces`` + ``write_run`` (the whole `tracekit ingest`; rank files are
   read, gunzipped and scanned in threads, one per core: its CPU seconds add up the threads),
   with the allocator setting the CLI process has (tracekit/_alloc.py); tracekit-1t: the same
   with ``TRACEKIT_INGEST_THREADS=1`` (its wall clock against tracekit's: what the threads
   give); tracekit-lib: without the allocator setting (a process that loaded polars first);
2. tracekit-ref: ``TRACEKIT_PURE=1 TRACEKIT_INGEST_THREADS=1``: the msgspec decoder path,
   files one after another (the implementation before the compiled scanner);
3. floors: gunzip alone; gunzip + msgspec typed decode (tracekit's decoder, ts kept as text);
4. reference: gunzip + ``orjson.loads`` of every file (JSON to Python objects, nothing else);
5. HTA 0.5 (``/root/hta-venv`` or $HTA_PYTHON; pip install holistictraceanalysis==0.5.* 'pandas<3'):
   ``Trace(trace_dir).load_traces(use_multiprocessing=False)``; skipped, and said, if absent.

Imports (tracekit's modules, orjson) happen before each process's clock starts (in-process figures;
peak RSS is also shown above the RSS the process had after its imports). The CLI figures run whole
processes as a user would, start-up included: ``python -m tracekit ingest -q DIR -o run.parquet``
against a ``python -c`` one-liner doing gunzip + orjson.loads of the same files.
Prints CPU and wall seconds, MB/s of uncompressed JSON per core (CPU seconds), peak RSS,
run.parquet size, the load average, and the ratios against the targets (>= 150 MB/s,
>= 12x HTA, >= 1.5x orjson, RSS <= 2x JSON, parquet <= JSON/20).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from children import child_env, imports_only, warm_bytecode
from children import measure as measure_child

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / "data"
_TS = re.compile(rb'"(ts|dur)": ?(-?\d+(?:\.\d+)?)')


def _cpu_trace(path: Path) -> None:
    """A real torch CPU-profiler trace with profiler steps, record_function ranges and many ops."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(64, 64)
    w = [torch.randn(64, 64) for _ in range(8)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for step in range(6):
            with record_function(f"tracekit:verify|cycle={step}|bs=4"):
                h = x
                for layer in range(8):
                    h = torch.nn.functional.silu(h @ w[layer]) + h
                    h = torch.nn.functional.layer_norm(h, (64,))
                torch.softmax(h, dim=-1).argmax(dim=-1)
            prof.step()
    prof.export_chrome_trace(str(path))


def _find_source() -> Path | None:
    for pat in ("**/*.trace.json.gz", "**/*.trace.json", "**/*.pt.trace.json*", "**/*.json.gz"):
        for p in sorted((REPO / "samples").glob(pat)):
            if "merged" not in p.name:
                return p
    return None


def _load_text(path: Path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _shift(text: bytes, delta_ns: int) -> bytes:
    """Shift every "ts" literal by delta_ns, exactly, and print ts/dur the way Kineto does (3 decimals)."""

    def repl(m: re.Match[bytes]) -> bytes:
        ns = int(Decimal(m.group(2).decode()) * 1000) + (delta_ns if m.group(1) == b"ts" else 0)
        sign = b"-" if ns < 0 else b""
        return b'"%s": %s%d.%03d' % (m.group(1), sign, abs(ns) // 1000, abs(ns) % 1000)

    return _TS.sub(repl, text)


def build(mb: int, ranks: int, source: Path | None) -> tuple[Path, int, str]:
    src = source or _find_source()
    label = str(src) if src else "torch CPU-profiler trace (made here)"
    tag = f"{(src.stem if src else 'cpu')}-{mb}mb-{ranks}r"
    out = DATA / tag
    done = out / "DONE"
    if done.exists():
        return out, int(done.read_text()), label
    out.mkdir(parents=True, exist_ok=True)
    if src is None:
        src = out / "source.json"
        _cpu_trace(src)
    text = _load_text(src)
    doc = json.loads(text)
    events = doc["traceEvents"]
    ts = [Decimal(str(e["ts"])) for e in events if "ts" in e]
    window_ns = int((max(ts) - min(ts)) * 1000) + 1_000_000
    body = json.dumps(events, indent=1).encode()  # Kineto-like: pretty-printed, one key per line
    per_rank = mb * 1_000_000 // ranks
    windows = max(1, -(-per_rank // max(1, len(body))))  # ceil: at least --mb in total
    total = 0
    for r in range(ranks):
        head = {k: v for k, v in doc.items() if k != "traceEvents"}
        head["distributedInfo"] = {**(doc.get("distributedInfo") or {"backend": "nccl"}), "rank": r, "world_size": ranks}
        parts = [_shift(body, k * window_ns)[1:-1] for k in range(windows)]
        blob = json.dumps(head, indent=1).encode()[:-2] + b',\n "traceEvents": [' + b",".join(parts) + b"]\n}"
        total += len(blob)
        (out / f"bench-TP-{r}.trace.json.gz").write_bytes(gzip.compress(blob, compresslevel=1))
    if src.parent == out:
        src.unlink()
    done.write_text(str(total))
    return out, total, label


def _rss_mb(key: str = "VmHWM") -> float:
    """Peak RSS of this process (VmHWM: unlike ru_maxrss it does not carry over the parent's peak across
    exec); ``key="VmRSS"``: the RSS now."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# Per-stage CPU seconds (--stages): (module, function, label); a stage's time includes the
# stages nested in it. Private names: if one is renamed, the breakdown says so and skips it.
_STAGES = (
    ("tracekit.ingest", "_load", "read + gunzip + scanner pass"),
    ("tracekit.ingest", "read_trace_bytes", "  read + gunzip"),
    ("tracekit.ingest.fastscan", "scan_raw", "  compiled scanner pass"),
    ("tracekit.ingest", "parse_kineto", "columns (parse_kineto after the pass)"),
    ("tracekit.ingest.fastscan", "columns", "  scanner result -> columns frame"),
    ("tracekit.ingest.kineto", "_decode", "  msgspec decode (files the scanner declines)"),
    ("tracekit.ingest.kineto", "_columns", "  msgspec columns (incl. the two below)"),
    ("tracekit.ingest.kineto", "_transpose", "    transpose Structs -> lists"),
    ("tracekit.ingest.kineto", "us_text_to_ns", "    ts/dur text -> int64 ns"),
    ("tracekit.ingest.kineto_events", "_to_events", "  kinds / graph / collectives"),
    ("tracekit.ingest", "_sort_part", "per-rank sort"),
    ("tracekit.finalize.pipeline", "categorize", "finalize: categorize"),
    ("tracekit.finalize.pipeline", "annotate_collectives", "finalize: annotate_collectives"),
    ("tracekit.finalize.pipeline", "annotate_phases", "finalize: annotate_phases"),
)


def _stage_breakdown(data: Path, out: Path) -> dict[str, Any]:
    """CPU seconds per stage of two runs in one process: the first (what a fresh process pays:
    lazy imports, first use of polars' code paths, fresh pages) and the same again."""
    import importlib

    spent: dict[str, float] = {}
    missing = []
    for mod_name, attr, label in _STAGES:
        mod = importlib.import_module(mod_name)
        fn = getattr(mod, attr, None)
        if fn is None:
            missing.append(f"{mod_name}.{attr}")
            continue

        def timed(*a: Any, _fn: Any = fn, _label: str = label, **k: Any) -> Any:
            c = time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] = spent.get(_label, 0.0) + time.process_time() - c

        setattr(mod, attr, timed)
    from tracekit.ingest import ingest_traces
    from tracekit.store import write_run

    order = [label for _, _, label in _STAGES] + ["ingest_traces (all of the above)", "write_run", "total"]
    runs = []
    for _ in range(2):
        spent.clear()
        c0 = time.process_time()
        run = ingest_traces([data])
        spent["ingest_traces (all of the above)"] = time.process_time() - c0
        c = time.process_time()
        write_run(run.events, out, run.manifest)
        spent["write_run"] = time.process_time() - c
        spent["total"] = time.process_time() - c0
        del run
        runs.append({k: spent[k] for k in order if k in spent})
    return {"stages": runs[0], "again": runs[1], "missing": missing, "rss_mb": _rss_mb()}


def worker(kind: str, data: Path, out: Path) -> dict[str, Any]:
    if kind == "stages":
        return _stage_breakdown(data, out)
    files = sorted(data.glob("*.json*"))
    t0 = time.perf_counter()
    c0 = time.process_time()
    if kind in ("tracekit", "tracekit-1t", "tracekit-lib", "tracekit-ref"):
        # the modules it runs are imported before the clock starts, as orjson is (start-up
        # is bench/startup.py's): ingest_traces imports the finalize chain on its first call
        import tracekit.finalize.pipeline  # noqa: F401
        from tracekit.ingest import ingest_traces
        from tracekit.store import write_run

        base_mb = _rss_mb("VmRSS")
        t0, c0 = time.perf_counter(), time.process_time()
        run = ingest_traces([data])
        write_run(run.events, out, run.manifest)
        extra = {"events": run.events.height, "parquet_bytes": out.stat().st_size}
    elif kind == "gunzip":
        from tracekit.ingest.discover import read_trace_bytes

        base_mb = _rss_mb("VmRSS")
        t0, c0 = time.perf_counter(), time.process_time()
        n = sum(len(read_trace_bytes(f)[0]) for f in files)
        extra = {"events": 0, "bytes": n}
    elif kind == "typed":
        from tracekit.ingest.discover import read_trace_bytes
        from tracekit.ingest.kineto import _decode

        base_mb = _rss_mb("VmRSS")
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        for f in files:
            n += len(_decode(read_trace_bytes(f)[0], str(f))[1])
        extra = {"events": n}
    elif kind == "orjson":
        import orjson

        base_mb = _rss_mb("VmRSS")
        t0, c0 = time.perf_counter(), time.process_time()
        n = 0
        for f in files:
            n += len(orjson.loads(gzip.decompress(f.read_bytes()))["traceEvents"])
        extra = {"events": n}
    else:
        raise SystemExit(f"unknown worker {kind}")
    return {"wall": time.perf_counter() - t0, "seconds": time.process_time() - c0, "rss_mb": _rss_mb(),
            "rss_base_mb": base_mb, **extra}


_HTA = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
from hta.common.trace import Trace
t0, c0 = time.perf_counter(), time.process_time()
t = Trace(trace_dir=sys.argv[1])
t.load_traces(use_multiprocessing=False)
n = sum(len(df) for df in t.traces.values())
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"wall": time.perf_counter() - t0, "seconds": time.process_time() - c0, "rss_mb": int(hwm) / 1024.0, "events": n}))
"""


def run_one(kind: str, data: Path, tmp: Path) -> dict[str, Any] | str:
    env = child_env(POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1")
    if kind in ("tracekit", "tracekit-1t", "stages"):  # the allocator setting of the `tracekit` CLI process
        from tracekit._alloc import return_freed_memory

        return_freed_memory(env)
    if kind == "tracekit-ref":
        env.update(TRACEKIT_PURE="1", TRACEKIT_INGEST_THREADS="1")
    if kind in ("stages", "tracekit-1t"):  # one thread (stages: CPU seconds per stage)
        env.update(TRACEKIT_INGEST_THREADS="1")
    if kind == "hta":
        py = os.environ.get("HTA_PYTHON", "/root/hta-venv/bin/python")
        if not Path(py).exists():
            return f"not run: no HTA environment at {py} (set HTA_PYTHON)"
        cmd = [py, "-c", _HTA, str(data)]
    else:
        cmd = [sys.executable, __file__, "--worker", kind, str(data), str(tmp / "run.parquet")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# Whole processes, as a user runs them: interpreter start, imports and the work. The reference is a
# Python one-liner doing gunzip + orjson.loads of every file (its start-up counted the same way).
_ORJSON_CLI = ("import gzip, pathlib, sys, orjson\n"
               "for p in sorted(pathlib.Path(sys.argv[1]).glob('*.json*')):\n"
               "    orjson.loads(gzip.decompress(p.read_bytes()))['traceEvents']\n")
# what `tracekit ingest` imports before it reads a file (its start-up without the work)
# (with -q: no rich; the other commands' modules are not imported, tests/test_cli_startup.py)
_CLI_IMPORTS = ("import tracekit.cli, tracekit.cli.ingest, tracekit.ingest, tracekit.finalize.pipeline, tracekit.store, "
                "tracekit.analyzers.align, tracekit.resolution, tracekit.render.run_state")
CLI_TOOLS = ("cli-tracekit", "cli-imports", "cli-orjson", "cli-python")
CLI_LABELS = {"cli-tracekit": "`tracekit ingest DIR -o run.parquet -q`",
              "cli-imports": "  its start-up: interpreter + imports only, no teardown (as the CLI)",
              "cli-orjson": "`python -c` gunzip + orjson.loads",
              "cli-python": "`python -c pass` (interpreter start)"}


def run_cli(kind: str, data: Path, tmp: Path) -> dict[str, Any] | str:
    """CPU seconds (user + system, from wait4) and peak RSS of one whole process.

    The process is started by a small helper process (this script, ``--spawn``), not by this one:
    Linux carries the peak RSS of the process that vforks over into the child's ``ru_maxrss``
    (subprocess uses vfork), so children of this process, large after reading the traces, would
    all report at least its peak."""
    env = child_env(POLARS_MAX_THREADS="1", OMP_NUM_THREADS="1")
    if kind == "cli-tracekit":
        cmd = [sys.executable, "-m", "tracekit", "ingest", "-q", str(data), "-o", str(tmp / "cli.parquet")]
    elif kind == "cli-orjson":
        cmd = [sys.executable, "-c", _ORJSON_CLI, str(data)]
    elif kind == "cli-imports":
        cmd = [sys.executable, "-c", imports_only(_CLI_IMPORTS)]
    else:
        cmd = [sys.executable, "-c", "pass"]
    proc = subprocess.run([sys.executable, "-S", __file__, "--spawn", json.dumps(cmd)], capture_output=True, text=True,
                          env=env, cwd=str(REPO))
    if proc.returncode != 0:
        return f"failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if "failed" in result:
        return str(result["failed"])
    return result


def _spawn(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` (stdout discarded) and measure it: what ``run_cli``'s helper process does."""
    u = measure_child(cmd)
    if u.failed:
        return {"failed": u.failed}
    return {"wall": u.wall, "seconds": u.cpu, "rss_mb": u.rss_mb}


def _rounds(run: Callable[[str], dict[str, Any] | str], kinds: tuple[str, ...], repeat: int
            ) -> tuple[dict[str, dict[str, Any] | str], dict[str, list[float]]]:
    """Every tool once per round, ``repeat`` rounds one after another (a change in the shared
    machine's load then falls on every tool alike): the run of least CPU of each tool (or its
    failure's line) and the CPU seconds of each round."""
    best: dict[str, dict[str, Any] | str] = {k: "not run" for k in kinds}
    secs: dict[str, list[float]] = {k: [] for k in kinds}
    failed: set[str] = set()
    for _ in range(repeat):
        for k in kinds:
            if k in failed:
                continue
            r = run(k)
            if isinstance(r, str):
                best[k] = r
                failed.add(k)
                continue
            secs[k].append(r["seconds"])
            b = best[k]
            if isinstance(b, str) or r["seconds"] < b["seconds"]:
                best[k] = r
    return best, secs


def _per_round(secs: dict[str, list[float]], ref: str, tool: str) -> str:
    """``ref``/``tool`` CPU ratio of each round (runs back to back): median and range."""
    pairs = sorted(a / b for a, b in zip(secs[ref], secs[tool], strict=False) if b > 0)
    if not pairs:
        return ""
    mid = pairs[len(pairs) // 2] if len(pairs) % 2 else (pairs[len(pairs) // 2 - 1] + pairs[len(pairs) // 2]) / 2
    return f"; per round (back to back) median {mid:.2f}x, {pairs[0]:.2f}-{pairs[-1]:.2f}x over {len(pairs)}"


def measure_cli(data: Path, mb: float, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        best, secs = _rounds(lambda k: run_cli(k, data, Path(tmp)), CLI_TOOLS, repeat)
    for kind in CLI_TOOLS:
        b = best[kind]
        if isinstance(b, str):
            print(f"  {CLI_LABELS[kind]:44s} {b}")
        else:
            print(f"  {CLI_LABELS[kind]:44s} cpu {b['seconds']:6.2f} s (wall {b['wall']:6.2f} s)  peak RSS {b['rss_mb']:6.0f} MB")
    tk, ref = best["cli-tracekit"], best["cli-orjson"]
    if isinstance(tk, dict) and isinstance(ref, dict):
        print(f"  CLI: tracekit vs gunzip+orjson.loads, whole processes: {ref['seconds'] / tk['seconds']:.2f}x cpu "
              f"(target >= 1.5x){_per_round(secs, 'cli-orjson', 'cli-tracekit')}; {ref['wall'] / tk['wall']:.2f}x wall; "
              f"{mb / tk['seconds']:.1f} MB/s per core; peak RSS {tk['rss_mb'] / mb:.2f}x the JSON")


def _cores() -> int:
    from tracekit.cores import usable_cores

    return usable_cores()


def _load() -> str:
    return "load average (1, 5, 15 min): {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


TOOLS = ("tracekit", "tracekit-1t", "tracekit-lib", "tracekit-ref", "gunzip", "typed", "orjson")
LABELS = {"tracekit": "tracekit (as the CLI runs it)", "tracekit-1t": "tracekit, one thread",
          "tracekit-lib": "tracekit, jemalloc's default decay",
          "tracekit-ref": "tracekit, msgspec path, sequential (before)",
          "gunzip": "floor: gunzip", "typed": "floor: gunzip + msgspec typed decode", "orjson": "gunzip + orjson.loads",
          "hta": "HTA 0.5 load_traces"}


def measure(data: Path, mb: float, repeat: int, hta: bool) -> dict[str, dict[str, Any] | str]:
    with tempfile.TemporaryDirectory() as tmp:
        results, secs = _rounds(lambda k: run_one(k, data, Path(tmp)), TOOLS, repeat)
        if hta:
            results["hta"] = run_one("hta", data, Path(tmp))
    for kind in (*TOOLS, *(("hta",) if hta else ())):
        best = results[kind]
        if isinstance(best, str):
            print(f"  {LABELS[kind]:44s} {best}")
        else:
            print(f"  {LABELS[kind]:44s} cpu {best['seconds']:6.2f} s (wall {best['wall']:6.2f} s)  {mb / best['seconds']:6.1f} MB/s"
                  f"  peak RSS {best['rss_mb']:6.0f} MB  events {best.get('events', 0):,}")
    tk, ref = results["tracekit"], results["orjson"]
    if isinstance(tk, dict):
        print(f"  tracekit: {mb / tk['seconds']:.1f} MB/s per core (target >= 150); cpu/wall {tk['seconds'] / tk['wall']:.2f}")
        if isinstance(ref, dict):
            print(f"  tracekit vs gunzip+orjson.loads: {ref['seconds'] / tk['seconds']:.2f}x cpu, best of each (target "
                  f">= 1.5x){_per_round(secs, 'orjson', 'tracekit')}; {ref['wall'] / tk['wall']:.2f}x wall")
        old = results["tracekit-ref"]
        if isinstance(old, dict):
            print(f"  tracekit vs its msgspec path (before): {old['seconds'] / tk['seconds']:.2f}x cpu, {old['wall'] / tk['wall']:.2f}x wall")
        for floor in ("gunzip", "typed"):
            f = results[floor]
            if isinstance(f, dict):
                print(f"  tracekit / {LABELS[floor]}: {tk['seconds'] / f['seconds']:.2f}x cpu")
        print(f"  peak RSS {tk['rss_mb']:.0f} MB = {tk['rss_mb'] / mb:.2f}x the JSON (target <= 2x); above the "
              f"process's RSS after its imports ({tk['rss_base_mb']:.0f} MB): {(tk['rss_mb'] - tk['rss_base_mb']) / mb:.2f}x")
        one = results["tracekit-1t"]
        if isinstance(one, dict):
            print(f"  wall clock, one thread / one thread per core ({_cores()} cores): {one['wall'] / tk['wall']:.2f}x "
                  f"(CPU {one['seconds'] / tk['seconds']:.2f}x; the load of a shared box moves wall clock most)")
        lib = results["tracekit-lib"]
        if isinstance(lib, dict):
            print(f"  with jemalloc's default decay (library use in a process that loaded polars first): peak RSS "
                  f"{lib['rss_mb']:.0f} MB = {lib['rss_mb'] / mb:.2f}x the JSON, {lib['seconds'] / tk['seconds']:.2f}x the CPU")
        pq_mb = tk["parquet_bytes"] / 1e6
        print(f"  run.parquet {pq_mb:.2f} MB = JSON/{mb / pq_mb:.0f} (target <= JSON/20)")
    h = results.get("hta")
    if isinstance(h, dict) and isinstance(tk, dict):
        print(f"  vs HTA 0.5 load_traces: {h['seconds'] / tk['seconds']:.1f}x (target >= 12x); HTA {mb / h['seconds']:.1f} MB/s")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=120, help="uncompressed JSON to build (MB)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2, help="runs per tool; the best is kept")
    ap.add_argument("--source", type=Path, help="trace to replicate (default: samples/, else a CPU trace)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-replicated", action="store_true", help="skip the replicated large set (only --real sets)")
    ap.add_argument("--stages", action="store_true", help="also print tracekit's CPU seconds per stage (one more run)")
    ap.add_argument("--real", action="append", default=[],
                    help="glob of real trace files to measure too, as they are (repeatable: one set each)")
    ap.add_argument("--worker", nargs=3, metavar=("KIND", "DATA", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--spawn", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.spawn:
        print(json.dumps(_spawn(json.loads(a.spawn))))
        return
    if a.worker:
        print(json.dumps(worker(a.worker[0], Path(a.worker[1]), Path(a.worker[2]))))
        return
    warm_bytecode(REPO)  # the children run with bytecode cached, as an installed tracekit does (bench/children.py)
    print(_load())
    print("in-process: each tool one process, imports before its clock starts; CLI: whole processes (interpreter "
          "start, imports, work), CPU from wait4")
    if not a.no_replicated:
        data, json_bytes, label = build(a.mb, a.ranks, a.source)
        mb = json_bytes / 1e6
        gz = sum(f.stat().st_size for f in data.glob("*.json.gz")) / 1e6
        print(f"trace set: {data} ({a.ranks} files, {mb:.1f} MB JSON, {gz:.1f} MB gzip): ONE real trace replicated, from {label}")
        print("each tool: one process, POLARS_MAX_THREADS=1, best of", a.repeat, "rounds (each round runs every tool "
              "once); MB/s and ratios use CPU seconds of that process (wall clock shown too: the machine may be shared)")
        measure(data, mb, a.repeat, not a.no_hta)
        print("  CLI, whole processes:")
        measure_cli(data, mb, a.repeat)
        if a.stages:
            _print_stages(data)
    import glob

    for pattern in a.real:
        real = sorted(Path(p) for p in glob.glob(pattern))
        if not real:
            raise SystemExit(f"--real {pattern}: no files")
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp) / "real"
            d.mkdir()
            for p in real:
                (d / p.name).symlink_to(p.resolve())
            rmb = sum(len(_load_text(p)) for p in real) / 1e6
            print(f"real set: {len(real)} files from {pattern}, {rmb:.1f} MB JSON (as captured, not replicated)")
            measure(d, rmb, a.repeat, not a.no_hta)
            print("  CLI, whole processes:")
            measure_cli(d, rmb, a.repeat)
            if a.stages:
                _print_stages(d)
    print(_load())


def _print_stages(data: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        st = run_one("stages", data, Path(tmp))
    if isinstance(st, str):
        print(f"stage breakdown {st}")
        return
    print("tracekit CPU seconds per stage (indented stages are part of the line above them); first run of a fresh "
          "process, then the same again in that process:")
    for lab, sec in st["stages"].items():
        print(f"  {lab:38s} {sec:6.3f} s   again {st['again'].get(lab, float('nan')):6.3f} s")
    if st["missing"]:
        print(f"  (not timed, renamed?: {', '.join(st['missing'])})")


if __name__ == "__main__":
    main()
