#!/bin/bash
# Stages of export_run (bench/export.py --stages-only) for another checkout's code and this one, alternating,
# on the bench's two large runs (written by bench/export.py --write-runs). Usage:
#   bash bench/export_ab.sh /work/main /tmp/runs [rounds]
other=$1; runs=$2; rounds=${3:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
[ -f "$runs/synthetic.parquet" ] || taskset -c 1 "$here/.venv/bin/python" "$here/bench/export.py" --write-runs "$runs"
echo "other: $other at $(git -C "$other" rev-parse --short HEAD); this: $here at $(git -C "$here" rev-parse --short HEAD); $(uptime)"
for run in synthetic.parquet mainjob-x8.parquet; do
  for i in $(seq "$rounds"); do
    for tree in "$other" "$here"; do
      echo "== $run, round $i, code of $tree"
      PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$tree" taskset -c 1 "$here/.venv/bin/python" "$here/bench/export.py" --stages-only --run "$runs/$run"
    done
  done
done
uptime
