"""tracekit logs on a 1 GB server log: lines/s and peak RSS, against grep -c of the same file.

    python bench/logs.py [--mb 1024] [--keep]

The log is made (once, cached under bench/data/, git-ignored) by repeating the real lines of
samples/logs/ (SGLang 0.4.6 / 0.5.9 scheduler lines, vLLM V1 engine and spec lines, the seed's
user-instrumentation lines) with one HTTP access line as an unmatched line, until it holds
``--mb`` MB. Both tools run as whole processes on the same file, one after the other, timed
through wait4 (bench/children.py):

1. ``python -m tracekit logs LOG -o OUT -q --pattern 'Target verify: {verify_ms:f} ms/cyc'``
   (the CLI as a user runs it: streaming read, rows to Parquet parts, the final streaming sink);
2. reference: ``grep -c -E 'Decode batch|Prefill batch|Engine [0-9]+:|SpecDecoding metrics|Target verify'``
   on the same file (counting the lines tracekit reads into rows, nothing parsed).

Prints lines, wall and CPU seconds, lines/s (per wall second and per CPU second), peak RSS of
each and the ratio tracekit / grep, plus the load average (the box is shared).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from children import child_env, measure

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "bench" / "data"
SAMPLES = REPO / "samples" / "logs"
SOURCES = ("sglang-0.5.9.log", "sglang-0.4.6.post5.log", "vllm-v1.log", "seed-target-verify.log")
UNMATCHED = '[2025-09-01 10:00:05] INFO:     127.0.0.1:38328 - "POST /generate HTTP/1.1" 200 OK'
PATTERN = "Target verify: {verify_ms:f} ms/cyc"
GREP = "Decode batch|Prefill batch|Engine [0-9]+:|SpecDecoding metrics|Target verify"


def make_log(mb: int) -> tuple[Path, int]:
    path = DATA / f"logs-{mb}mb.log"
    lines = []
    for name in SOURCES:
        lines += [ln for ln in (SAMPLES / name).read_text().splitlines() if "server_args=" not in ln]
    lines.append(UNMATCHED)
    blob = ("\n".join(lines) + "\n").encode()
    reps = -(-(mb << 20) // len(blob))
    if not path.exists() or path.stat().st_size != reps * len(blob):
        DATA.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            for _ in range(reps):
                fh.write(blob)
        tmp.replace(path)
    return path, reps * len(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true", help="keep the output run")
    args = ap.parse_args()
    log, n_lines = make_log(args.mb)
    out = DATA / "logs-bench.parquet"
    print(f"log: {log} ({log.stat().st_size / 1e6:,.0f} MB, {n_lines:,} lines); load average {os.getloadavg()}")
    tk = measure([sys.executable, "-m", "tracekit", "logs", str(log), "-o", str(out), "-q", "--pattern", PATTERN],
                 env=child_env(POLARS_MAX_THREADS="1"))
    gr = measure(["grep", "-c", "-E", GREP, str(log)], keep_stdout=True)
    if tk.failed or gr.failed:
        raise SystemExit(f"tracekit: {tk.failed}; grep: {gr.failed}")
    rows = int(gr.stdout.strip())
    print(f"grep -c matched {rows:,} lines")
    for name, u in (("tracekit logs", tk), ("grep -c", gr)):
        print(f"{name:14s} wall {u.wall:8.1f} s  cpu {u.cpu:8.1f} s  {n_lines / u.wall:12,.0f} lines/s wall  "
              f"{n_lines / max(u.cpu, 1e-9):12,.0f} lines/s cpu  peak RSS {u.rss_mb:8.1f} MB")
    print(f"ratio tracekit / grep: {gr.wall / tk.wall:.4f} of grep's lines/s (wall), "
          f"{gr.cpu / max(tk.cpu, 1e-9):.4f} (cpu); peak RSS {tk.rss_mb / max(gr.rss_mb, 1e-9):.1f}x grep's, "
          f"{tk.rss_mb:.0f} MB for a {log.stat().st_size / 1e6:,.0f} MB log")
    print(f"output: {out.stat().st_size / 1e6:,.1f} MB; load average after {os.getloadavg()}")
    if not args.keep:
        out.unlink()


if __name__ == "__main__":
    main()
