#!/usr/bin/env bash
# Issue 14's three speed targets measured in one run on this box, one after another, each benchmark pinned
# to one core (taskset -c 1) and printing its own reference measured in the same run:
#
#   bash bench/targets.sh OUTDIR H200_TRACE CPU8_JSON_DIR CPU8_RUN H200_RUN
#
# H200_TRACE     one real large Kineto trace (.json.gz; samples/h200-bigtrace/README.md says how it was made)
# CPU8_JSON_DIR  the real per-rank trace files of an 8-rank capture (tracekit capture ... --keep-json DIR)
# CPU8_RUN       a real multi-rank run of ~1 M events (that capture's run.parquet)
# H200_RUN       a real one-rank GPU run of ~0.7 M events
#
# Writes OUTDIR/targets-{ingest,ingest-small,attribute,export}.txt, each starting with the command, the commit
# (and whether the tree had changes) and the time. The large inputs are not committed (tens of MB); the
# committed samples are the small real sets.
set -euo pipefail
out=${1:?usage: bench/targets.sh OUTDIR H200_TRACE CPU8_JSON_DIR CPU8_RUN H200_RUN}
invocation="bash bench/targets.sh $*"
# paths taken as given from the caller's directory (the benchmarks run from the repository root)
out=$(realpath -m "$out"); trace=$(realpath "${2:?}"); cpu8json=$(realpath "${3:?}")
cpu8run=$(realpath "${4:?}"); h200run=$(realpath "${5:?}")
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PY:-$here/.venv/bin/python}
mkdir -p "$out"
rev="$(git -C "$here" rev-parse --short HEAD)$( [ -z "$(git -C "$here" status --porcelain --untracked-files=no)" ] || echo ' (with uncommitted changes)')"
step() {  # step NAME ARGS...: one benchmark, its command line and provenance first
  local name=$1; shift
  { echo "\$ taskset -c 1 $py $*   # $rev, $(date -u +%FT%TZ), run by: $invocation"; taskset -c 1 "$py" "$@"; } 2>&1 | tee "$out/targets-$name.txt"
}
cd "$here"
step ingest bench/ingest.py --repeat 4 --stages --no-hta --real "$trace" --real "$cpu8json/*.trace.json.gz"
step ingest-small bench/ingest.py --repeat 4 --no-hta --no-replicated \
  --real 'samples/h200x2-builtin/eager-rank-*.trace.json.gz' --real 'samples/h200x2-builtin/graphed-rank-*.trace.json.gz' \
  --real 'samples/sglang-shapes-h200x2/*.trace.json.gz'
step attribute bench/attribute.py --ranks 8 --kernels 1000000 --repeat 3
step export bench/export.py --cli-run "$cpu8run" --cli-run "$h200run" --cli-run samples/h200x2-mainjob/eager.parquet --cli-repeat 5
