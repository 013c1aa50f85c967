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

    python bench/scale.py RUNS_DIR 256 --analyses attribute,ranks,gap,diff,report,sol [--modes whole,file,dir,dask-local:2]

The analysis commands (``--json``) on runs ingested once: ``RUNS_DIR/run256.parquet`` (one file) and
``RUNS_DIR/run256/`` (its shards). Each (command, mode) is one child process: ``whole`` the one file
read whole (the CLI's whole-run path, ``TRACEKIT_ANALYSIS_WHOLE_MB`` huge: the reference, measured in the
same run), ``file`` the same file rank by rank (``TRACEKIT_ANALYSIS_WHOLE_MB=0``), ``dir`` the shards rank by rank (``--executor local``), ``dask-local:N`` the shards on a
Dask LocalCluster (``diff``: the run against itself, two runs read; ``report``: the page written, its
plots and embedded documents compared; ``sol``: the built-in workload's config and an H200, which the sets'
manifests do not record). Printed: CPU s, wall s, peak RSS of the driver and the workers, the largest peak
and the CPU as ratios to the reference's, whether the document equals the reference's byte for byte
(the bench fails otherwise), and at 256 ranks the largest peak against the 1.5 GB target.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def _child(cmd: list[str], tag: Path, stdout: Path | None = None,
           env: dict[str, str] | None = None) -> tuple[float, float, int, dict[int, int], str | None]:
    """One child process: (CPU s of it and every process it waited for, wall s, driver peak RSS, the other
    processes' peaks, why it failed or None); stderr to ``tag.stderr``, stdout to ``stdout`` or discarded;
    ``env``: set in its environment."""
    t0 = time.perf_counter()
    err = open(tag.with_suffix(".stderr"), "w+b")  # noqa: SIM115
    out = open(stdout, "wb") if stdout is not None else None  # noqa: SIM115
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if out is None else out, stderr=err,
                         env=child_env(**(env or {})))
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
    if out is not None:
        out.close()
    driver = max(peaks.get(p.pid, 0), ru.ru_maxrss * 1024 if not peaks else 0)
    return ru.ru_utime + ru.ru_stime, wall, driver, {pid: v for pid, v in peaks.items() if pid != p.pid}, failed


def _events(run: Path) -> int:
    import pyarrow.parquet as pq

    files = [run] if run.is_file() else sorted(run.glob("rank-*.parquet"))
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def run_one(sets: Path, size: int, mode: str, work: Path) -> tuple[Row, Path]:
    to_file = mode.startswith("file")
    out = work / (f"{size}-{mode.replace(':', '')}" + (".parquet" if to_file else ""))
    cmd = [sys.executable, "-m", "tracekit", "ingest", str(sets / str(size)), "-q",
           "-o", str(out) + ("" if to_file else os.sep)]
    executor = mode.removeprefix("file-")
    if executor.startswith("dask"):
        cmd += ["--executor", executor]
    extra = {"file-whole": {"TRACEKIT_INGEST_WHOLE_MB": str(1 << 30)}, "file-bounded": {"TRACEKIT_INGEST_WHOLE_MB": "0"}}
    cpu, wall, driver, others, failed = _child(cmd, work / f"{size}-{mode.replace(':', '')}", env=extra.get(mode))
    from tracekit.store import read_manifest

    events = 0
    if failed is None:
        events = _events(out)
        read_manifest(out)
    return Row(size, mode, events, cpu, wall, driver, others, failed), out


# --- the analysis commands (attribute, ranks, gap) ------------------------------------------------

# the size rule for one-file runs moved: ``whole`` (the reference) reads the file in one table, ``file``
# rank by rank, whatever its size
RULE = {"whole": {"TRACEKIT_ANALYSIS_WHOLE_MB": str(1 << 30)}, "file": {"TRACEKIT_ANALYSIS_WHOLE_MB": "0"}}
ANALYSIS_MODES = ("whole", "file", "dir", "dask-local:2")


def run_analysis(runs: Path, size: int, command: str, mode: str, work: Path) -> tuple[Row, Path]:
    """``tracekit COMMAND --json`` on ``runs/runN.parquet`` (modes ``whole``: read whole, the reference;
    ``file``: the same file rank by rank) or the sharded ``runs/runN/`` (``dir``: local executor;
    ``dask-local:N``)."""
    run = runs / (f"run{size}.parquet" if mode in ("whole", "file") else f"run{size}")
    tag = work / f"{command}-{size}-{mode.replace(':', '')}"
    if command == "report":  # the page, then its plots and embedded documents compared (_report_doc)
        args = [command, str(run), "-o", str(tag.with_suffix(".html"))]
    else:
        args = [command, str(run), *([str(run)] if command == "diff" else []), "--json"]  # diff: the run against itself
    if command == "sol":  # the sets record no model: the built-in workload's (their source captures'), on an H200
        args += ["--model", str(_workload_config(work)), "--gpu", "H200", "--engine", "workload"]
    if mode.startswith("dask"):
        args += ["--executor", mode]
    cmd = [sys.executable, "-m", "tracekit", *args]
    out = tag.with_suffix(".json")
    cpu, wall, driver, others, failed = _child(cmd, tag, out, env=RULE.get(mode))
    if command == "report" and failed is None:
        _report_doc(tag.with_suffix(".html"), out)
    return Row(size, f"{command} {mode}", _events(run) if failed is None else 0, cpu, wall, driver, others,
               failed), out


def _workload_config(work: Path) -> Path:
    """``sol --model``: the config the sets' source capture records (samples/h200x2-builtin)."""
    from tracekit.analyzers.sol.run import workload_config
    from tracekit.store import read_manifest

    cfg = work / "workload.config.json"
    if not cfg.exists():
        src = Path(__file__).resolve().parent.parent / "samples" / "h200x2-builtin" / "eager.parquet"
        cfg.write_text(json.dumps(workload_config(dict(read_manifest(src)))), encoding="utf-8")
    return cfg


def _report_doc(html: Path, out: Path) -> None:
    """``tracekit report``'s comparable output into ``out`` (its stdout): the plots drawn and those not
    shown (the lines it prints, the page's path and size aside), then the documents the page embeds."""
    lines = out.read_text(encoding="utf-8").splitlines()
    head = re.sub(r"^wrote .*?: (\d+ plots),.*$", r"\1", lines[0]) if lines else ""
    docs = html.read_text(encoding="utf-8").split('id="tk-documents">', 1)[1].split("</script>", 1)[0]
    out.write_text("\n".join([head, *lines[1:], docs]), encoding="utf-8")
    html.unlink()


def _doc(out: Path, runs: Path) -> bytes:
    """A command's document with the run's path (a file or its shard directory) as ``RUN``."""
    text = out.read_text(encoding="utf-8")
    for size in re.findall(r"run(\d+)", text):
        for p in (runs / f"run{size}.parquet", runs / f"run{size}"):
            text = text.replace(json.dumps(str(p))[1:-1], "RUN")
    return text.encode()


def analyses(runs: Path, sizes: list[int], commands: list[str], modes: list[str]) -> int:
    """The analysis commands on the ingested runs (``runs/runN.parquet`` and ``runs/runN/``), each mode's
    peak RSS and CPU against the whole-run read of the same command measured in this run, its
    document compared with the reference's, the run's path aside (identical, or the bench fails)."""
    print(f"# bench/scale.py {' '.join(sys.argv[1:])}; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    print(f"{'ranks':>6} {'command mode':<24} {'events':>11} {'CPU s':>7} {'wall s':>7} {'driver MB':>9} "
          f"{'workers MB (peak each)':<24} {'RSS x ref':>9} {'CPU x ref':>9}  output")
    work = Path(tempfile.mkdtemp(prefix="tk-scale-an-"))
    bad = 0
    try:
        for size in sizes:
            for command in commands:
                ref: tuple[Row, Path] | None = None
                for mode in ("whole", *[m for m in modes if m != "whole"]):
                    row, out = run_analysis(runs, size, command, mode, work)
                    if row.failed:
                        print(f"{size:>6} {row.mode:<24} FAILED {row.failed}")
                        bad += 1
                        continue
                    if ref is None:
                        ref = row, out
                    peak = max(row.driver_rss, row.worker_peak)
                    same = _doc(out, runs) == _doc(ref[1], runs)
                    bad += not same
                    workers = ",".join(_mb(v) for v in sorted(row.others_rss.values(), reverse=True)[:4]) or "-"
                    print(f"{size:>6} {row.mode:<24} {row.events:>11,} {row.cpu_s:>7.1f} {row.wall_s:>7.1f} "
                          f"{_mb(row.driver_rss):>9} {workers:<24} {peak / max(ref[0].driver_rss, 1):>9.2f} "
                          f"{row.cpu_s / ref[0].cpu_s:>9.2f}  "
                          f"{'reference' if mode == 'whole' else ('identical' if same else 'DIFFERS')}", flush=True)
                    if size == 256 and mode != "whole":
                        print(f"{'':>6} {row.mode:<24} largest process peak RSS {_mb(peak)} MB = "
                              f"{peak / (1.5 * GB):.2f} x the 1.5 GB target")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


def _mb(b: int) -> str:
    return f"{b / 1e6:,.0f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sets", type=Path)
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--modes", default="file,dir,dask-local:2")
    ap.add_argument("--skip", default="", help="SIZE:MODE pairs not to run, comma separated (e.g. 1024:file)")
    ap.add_argument("--analyses", default="", metavar="COMMANDS",
                    help="instead of ingest: these analysis commands (e.g. attribute,ranks,gap) on the runs "
                         "SETS/runN.parquet and SETS/runN/ (modes: whole, file, dir, dask-local:N)")
    a = ap.parse_args(argv)
    if a.analyses:
        modes = a.modes.split(",") if a.modes != ap.get_default("modes") else list(ANALYSIS_MODES)
        return analyses(a.sets, a.sizes, a.analyses.split(","), modes)
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
