#!/usr/bin/env bash
# The GPU evidence run (nvidia-h200-x2): two captures (verify eager / graphed) with raw per-rank
# Kineto JSON, the overhead benchmark, the Kineto event-API probe. Everything lands in $OUT/h200.tar.gz.
# Run from the repository root after installing tracekit into /tmp/site (see samples/h200x2-builtin/README.md).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=$PWD
W=/tmp/w; rm -rf $W; mkdir -p $W; cd $W || exit 1
{ nvidia-smi; nvidia-smi topo -m; nproc; uname -a; } > env.txt 2>&1
python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.cuda.nccl.version(),torch.cuda.device_count())' >> env.txt 2>&1
timeout 60 python3 $R/bench/kineto_probe.py > probe.txt 2>&1
# the seed's situation: an NCCL variable set in the launcher (does it reach the ranks? it does here: spawn inherits)
export NCCL_DEBUG=WARN
timeout 170 python3 -m tracekit capture --ranks all --verify-graph off --cycles 12 --warmup 6 --timeout 150 --keep-json json-eager -o eager.parquet > log-eager.txt 2>&1
echo "eager rc=$?" >> log-eager.txt
timeout 170 python3 -m tracekit capture --ranks all --verify-graph on --cycles 12 --warmup 6 --timeout 150 --keep-json json-graphed -o graphed.parquet > log-graphed.txt 2>&1
echo "graphed rc=$?" >> log-graphed.txt
timeout 150 python3 $R/bench/capture_overhead.py --json bench.json > bench.txt 2>&1
echo "bench rc=$?" >> bench.txt
tail -n 30 log-eager.txt log-graphed.txt bench.txt probe.txt
ls -la $W $W/json-*
tar czf $OUT/h200.tar.gz -C $W . && ls -la $OUT
