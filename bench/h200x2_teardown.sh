#!/usr/bin/env bash
# Short GPU check of capture's rank teardown (nvidia-h200-x2): two captures, wall time each,
# then attribute. Run from a source tree after the wheels in .whl/ are installed into /tmp/site.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=140
SRC=${1:-$PWD}
rm -rf /tmp/site/tracekit && cp -r "$SRC/tracekit" /tmp/site/tracekit && rm -rf /tmp/site/tracekit/collectors /tmp/site/tracekit/analyzers \
  && cp -r "$SRC/collectors" /tmp/site/tracekit/collectors && cp -r "$SRC/analyzers" /tmp/site/tracekit/analyzers || exit 1
W=/tmp/td; rm -rf $W; mkdir -p $W; cd $W || exit 1
for mode in off on; do
  s=$(date +%s.%N)
  timeout 130 python3 -m tracekit capture --ranks all --verify-graph $mode --cycles 8 --warmup 4 --timeout 100 -o verify-$mode.parquet > capture-$mode.txt 2>&1
  echo "rc=$? wall_s=$(echo "$(date +%s.%N) - $s" | bc)" >> capture-$mode.txt
done
timeout 60 python3 -m tracekit attribute verify-off.parquet --phase verify > attribute-verify-off.txt 2>&1
tail -n 14 capture-*.txt; head -30 attribute-verify-off.txt
tar czf $OUT/teardown.tar.gz -C $W . && ls -la $OUT
