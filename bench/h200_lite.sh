#!/usr/bin/env bash
# Issue 16 on nvidia-h200 (one GPU): what lite costs and where (bench/profile_modes.py, every variant in its
# own process, A/B blocks against the same process unprofiled), and captures of the built-in workload with
# the reference timed before and after the window, checked against a full capture (bench/lite_membership.py).
#
# There, from the repository root, after bench/gpukit/pack.sh built the carried folder here:
#   TK_SRC=.gpu/observe source .gpu/observe/bench/gpukit/install.sh && bash .gpu/observe/bench/h200_lite.sh bench captures
# Knobs (environment): BENCH_ARGS (extra profile_modes.py arguments), BENCH_S (its time limit),
# CAPTURES: "NAME:MODE:VERIFY_GRAPH:ENV ..." (ENV: K=V[,K=V] set for that capture only, e.g.
# TRACEKIT_CUPTI_TRIM=lean or TEARDOWN_CUPTI=1),
# CYC / WARM / AFTER (cycles in the window / before it / after it), PAIRS: "FULL,LITE ..." for lite_membership.py.
# Everything lands in $OUT/lite.tar.gz; the tables are printed last.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
B=$(cd "$(dirname "$0")" && pwd)
W=/tmp/w; rm -rf $W; mkdir -p $W; cd $W || exit 1
T0=$(date +%s)
{ nvidia-smi; nproc; uname -a; cat "$B/../COMMIT" 2>/dev/null; } > env.txt 2>&1
python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.cuda.device_count())' >> env.txt 2>&1
CYC=${CYC:-12}; WARM=${WARM:-6}; AFTER=${AFTER:-6}
CAPTURES=${CAPTURES:-"full-off:full:off: lite-off:lite:off: timing-off:timing:off: full-on:full:on: lite-on:lite:on: timing-on:timing:on:"}
PAIRS=${PAIRS:-"full-off,lite-off full-on,lite-on"}
for step in "$@"; do
  case $step in
    bench)
      # shellcheck disable=SC2086
      timeout "${BENCH_S:-330}" python3 "$B/profile_modes.py" --json bench.json ${BENCH_ARGS:-} > bench.txt 2>&1
      echo "bench rc=$? at $(( $(date +%s) - T0 )) s" | tee -a bench.txt ;;
    captures)
      for spec in $CAPTURES; do
        IFS=: read -r n m g envs <<< "$spec"
        ( IFS=, read -ra kvs <<< "$envs"; for kv in "${kvs[@]}"; do export "${kv?}"; done
          timeout 150 python3 -m tracekit capture --world 1 --verify-graph "$g" --profile "$m" --cycles "$CYC" \
            --warmup "$WARM" --after "$AFTER" --timeout 120 -o "$n.parquet" > "log-$n.txt" 2>&1 )
        echo "capture $n (env '${envs}') rc=$? at $(( $(date +%s) - T0 )) s" | tee -a "log-$n.txt"
        COLUMNS=140 timeout 60 python3 -m tracekit attribute "$n.parquet" > "attribute-$n.txt" 2>&1
      done
      for p in $PAIRS; do
        IFS=, read -r f l <<< "$p"
        timeout 90 python3 "$B/lite_membership.py" "$f.parquet" "$l.parquet" > "membership-$l.txt" 2>&1
        timeout 90 python3 "$B/estimate_check.py" "$f.parquet" "$l.parquet" --json "estimate-$l.json" > "estimate-$l.txt" 2>&1
      done ;;
  esac
done
for f in log-*.txt; do echo "== $f"; grep -v "^rank 0: \(beat\|status\)" "$f" | tail -n 9; done
for f in membership-*.txt; do echo "== $f"; head -n 14 "$f"; done
cat bench.txt 2>/dev/null | cut -c1-200
ls -la
tar czf "$OUT/lite.tar.gz" -C $W . && ls -la "$OUT"
