"""Issue 29's scale bench: ingest of 64 / 256 / 1,024-rank sets, in one process and through executors.

    python bench/scale.py SETS_DIR 64 256 [1024] [--modes file,dir,dask-local:2] [--out results.txt]

SETS_DIR holds the sets of ``bench/scale_gen.py`` (``SETS_DIR/64/rank-00000.trace.json.gz`` ...).
Each (size, mode) is one ``tracekit ingest`` child process:

- ``file``: ``-o run.parquet`` with ``--executor local``: whole in process or rank by rank as
  ``tracekit.ingest.plan`` decides (the inputs' JSON against ``TRACEKIT_INGEST_WHOLE_MB``); the reference;
- ``file-whole`` / ``file-bounded``: the same, the rule forced (``TRACEKIT_INGEST_WHOLE_MB`` huge / 0);
- ``file-dask-local:N``: ``-o run.parquet --executor dask-local:N`` (always rank by rank);
- ``dir``: ``-o run/``, a sharded run through the local executor (one file or rank in flight);
- ``dask-local:N``: ``-o run/ --executor dask-local:N`` (a Dask LocalCluster of N worker processes).

Printed per row: events, CPU s (user + system of the command and every process it waited for, from
wait4: the Dask workers included), wall s, peak RSS of the driver (the command's process) and of
each other process of its tree (sampled every 0.1 s with psutil: the workers), events per CPU s and
per wall s. Then the issue's targets, each as a ratio:

- cost linear in events: CPU per event at the largest size / at the smallest (target <= 1.2);
- worker RSS bounded by the largest rank's working set: the largest worker peak at the largest size /
  at the smallest (not growing with rank count: target <= 1.2);
- driver RSS under 1 GB at 1,024 ranks (ratio: peak / 1 GB);
- every command's peak RSS under 1.5 GB on the 256-rank set with ``--executor local`` (here: ingest;
  ratio: peak / 1.5 GB).

On the smallest size the sharded runs' tables are compared with the in-process run's (identical, or
the bench fails).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from children import child_env

GB = 1 << 30


@dataclass
class Row:
    size: int
    mode: str
    events: int
    cpu_s: float
    wall_s: float
    driver_rss: int
    others_rss: dict[int, int] = field(default_factory=dict)  # pid -> peak RSS (workers, nannies)
    failed: str | None = None

    @property
    def worker_peak(self) -> int:
        return max(self.others_rss.values(), default=0)


def _sample(root: int, peaks: dict[int, int], stop: threading.Event) -> None:
    try:
        proc = psutil.Process(root)
    except psutil.NoSuchProcess:
        return
    while not stop.is_set():
        try:
            tree = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        for p in tree:
            try:
                rss = p.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            peaks[p.pid] = max(peaks.get(p.pid, 0), rss)
        stop.wait(0.1)


def run_one(sets: Path, size: int, mode: str, work: Path) -> tuple[Row, Path]:
    to_file = mode.startswith("file")
    out = work / (f"{size}-{mode.replace(':', '')}" + (".parquet" if to_file else ""))
    cmd = [sys.executable, "-m", "tracekit", "ingest", str(sets / str(size)), "-q",
           "-o", str(out) + ("" if to_file else os.sep)]
    executor = mode.removeprefix("file-")
    if executor.startswith("dask"):
        cmd += ["--executor", executor]
    extra = {"file-whole": {"TRACEKIT_INGEST_WHOLE_MB": str(1 << 30)}, "file-bounded": {"TRACEKIT_INGEST_WHOLE_MB": "0"}}
    t0 = time.perf_counter()
    err = open(work / f"{size}-{mode.replace(':', '')}.stderr", "w+b")  # noqa: SIM115
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env(**extra.get(mode, {})))
    peaks: dict[int, int] = {}
    stop = threading.Event()
    th = threading.Thread(target=_sample, args=(p.pid, peaks, stop), daemon=True)
    th.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    th.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    failed = None
    if p.returncode != 0:
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        failed = f"exit {p.returncode}: {lines[-1] if lines else ''}"
    err.close()
    from tracekit.store import read_manifest

    events = 0
    if failed is None:
        import pyarrow.parquet as pq

        files = [out] if to_file else sorted(out.glob("rank-*.parquet"))
        events = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        read_manifest(out)
    driver = max(peaks.get(p.pid, 0), ru.ru_maxrss * 1024 if not peaks else 0)
    return Row(size, mode, events, ru.ru_utime + ru.ru_stime, wall, driver,
               {pid: v for pid, v in peaks.items() if pid != p.pid}, failed), out


def _mb(b: int) -> str:
    return f"{b / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", type=Path)
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--modes", default="file,dir,dask-local:2")
    ap.add_argument("--skip", default="", help="SIZE:MODE pairs not to run, comma separated (e.g. 1024:file)")
    a = ap.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    skip = {tuple(s.split(":", 1)) for s in a.skip.split(",") if s}
    print(f"# bench/scale.py {' '.join(sys.argv[1:])}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print(f"{'ranks':>6} {'mode':<13} {'events':>11} {'CPU s':>7} {'wall s':>7} {'driver MB':>9} "
          f"{'workers MB (peak each)':<28} {'ev/CPU s':>9} {'ev/wall s':>9}")
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="tk-scale-"))
    try:
        for size in a.sizes:
            ref: Path | None = None
            for mode in modes:
                if (str(size), mode) in skip:
                    continue
                row, out = run_one(a.sets, size, mode, work)
                rows.append(row)
                workers = ",".join(_mb(v) for v in sorted(row.others_rss.values(), reverse=True)[:4]) or "-"
                if row.failed:
                    print(f"{size:>6} {mode:<13} FAILED {row.failed}")
                    continue
                print(f"{size:>6} {mode:<13} {row.events:>11,} {row.cpu_s:>7.1f} {row.wall_s:>7.1f} "
                      f"{_mb(row.driver_rss):>9} {workers:<28} {row.events / row.cpu_s:>9,.0f} "
                      f"{row.events / row.wall_s:>9,.0f}", flush=True)
                if size == min(a.sizes):
                    if ref is None and mode.startswith("file"):
                        ref = out
                    elif ref is not None:
                        from polars.testing import assert_frame_equal

                        from tracekit.store import load_run

                        assert_frame_equal(load_run(ref).events, load_run(out).events)
                        print(f"{'':>6} {mode:<13} table identical to the in-process run's ({ref.name})")
                if ref != out:
                    shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
            if ref is not None:
                ref.unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = [r for r in rows if not r.failed]
    print(f"CPU s and driver peak RSS against the first mode ({modes[0]}) at the same size:")
    for size in a.sizes:
        base = next((r for r in ok if r.size == size and r.mode == modes[0]), None)
        for r in (x for x in ok if x.size == size and base is not None and x is not base):
            assert base is not None
            print(f"  {size} ranks: {r.mode}: CPU {r.cpu_s / base.cpu_s:.2f}x, driver peak RSS "
                  f"{r.driver_rss / base.driver_rss:.2f}x, largest process {max(r.driver_rss, r.worker_peak) / max(base.driver_rss, base.worker_peak):.2f}x")
    print("targets (ratio; <= 1 meets it):")
    lo, hi = min(a.sizes), max(a.sizes)
    for mode in modes:
        small = next((r for r in ok if r.size == lo and r.mode == mode), None)
        big = next((r for r in ok if r.size == hi and r.mode == mode), None)
        if small and big and big is not small:
            lin = (big.cpu_s / big.events) / (small.cpu_s / small.events)
            print(f"  {mode}: CPU per event at {hi} ranks / at {lo}: {lin:.2f} (target <= 1.2: {lin / 1.2:.2f})")
            if mode != "file" and small.worker_peak and big.worker_peak:
                g = big.worker_peak / small.worker_peak
                print(f"  {mode}: largest worker peak RSS at {hi} / at {lo}: {g:.2f} (not growing: target <= 1.2: "
                      f"{g / 1.2:.2f})")
            d = big.driver_rss / small.driver_rss
            print(f"  {mode}: driver peak RSS at {hi} / at {lo}: {d:.2f}")
        for r in (x for x in ok if x.mode == mode and x.size >= 1024):
            print(f"  {mode}: driver peak RSS at {r.size} ranks: {_mb(r.driver_rss)} MB = {r.driver_rss / GB:.2f} "
                  "x the 1 GB target")
        for r in (x for x in ok if x.mode == mode and x.size == 256):
            peak = max(r.driver_rss, r.worker_peak)
            print(f"  {mode}: largest process peak RSS at 256 ranks: {_mb(peak)} MB = {peak / (1.5 * GB):.2f} x the "
                  "1.5 GB target")
    return 1 if any(r.failed for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
