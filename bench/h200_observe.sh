#!/usr/bin/env bash
# Issue 16's GPU run (nvidia-h200, one GPU): the built-in workload captured in each profile mode
# (full / lite / timing) with verify eager and graphed, attribute / spec / gap on each, the
# estimate check (full vs lite), the profile-mode benchmark, the lite-membership check.
# Everything lands in $OUT/observe.tar.gz. Run from the repository root after
# `TK_SRC=<copy> source <copy>/bench/gpukit/install.sh` (samples/h200-lite/README.md has the exact command;
# bench/h200_lite.sh is its successor, with the reference timed before and after the window).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
B=$(cd "$(dirname "$0")" && pwd)
W=/tmp/w; rm -rf $W; mkdir -p $W; cd $W || exit 1
T0=$(date +%s)
{ nvidia-smi; nproc; uname -a; } > env.txt 2>&1
python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.cuda.device_count())' >> env.txt 2>&1
CYC=${CYC:-12}; WARM=${WARM:-6}
for g in off on; do
  for m in full lite timing; do
    n=$m-$g
    timeout 150 python3 -m tracekit capture --world 1 --verify-graph $g --profile $m --cycles $CYC --warmup $WARM \
      --timeout 120 -o $n.parquet > log-$n.txt 2>&1
    echo "capture $n rc=$? at $(( $(date +%s) - T0 )) s" | tee -a log-$n.txt
    timeout 60 python3 -m tracekit attribute $n.parquet > attr-$n.txt 2>&1
    timeout 60 python3 -m tracekit attribute $n.parquet --json > attr-$n.json 2>&1
    timeout 60 python3 -m tracekit spec $n.parquet --json > spec-$n.json 2>&1
    [ $m != timing ] && timeout 60 python3 -m tracekit gap $n.parquet --json > gap-$n.json 2>&1
  done
done
timeout 90 python3 $B/estimate_check.py full-off.parquet lite-off.parquet --json estimate-off.json > estimate-off.txt 2>&1
timeout 90 python3 $B/estimate_check.py full-on.parquet lite-on.parquet --json estimate-on.json > estimate-on.txt 2>&1
timeout 90 python3 $B/lite_membership.py full-off.parquet lite-off.parquet > membership-off.txt 2>&1
timeout 90 python3 $B/lite_membership.py full-on.parquet lite-on.parquet > membership-on.txt 2>&1
timeout 60 python3 -m tracekit diff full-on.parquet full-off.parquet --json > diff-full.json 2>&1
echo "analyses done at $(( $(date +%s) - T0 )) s"
timeout 200 python3 $B/profile_modes.py --json bench.json > bench.txt 2>&1
echo "bench rc=$? at $(( $(date +%s) - T0 )) s" | tee -a bench.txt
for f in log-*.txt; do echo "== $f"; grep -v "^rank 0: \(beat\|status\)" $f | tail -n 12; done
cat estimate-off.txt membership-off.txt membership-on.txt bench.txt | cut -c1-400
ls -la
tar czf $OUT/observe.tar.gz -C $W . && ls -la $OUT
