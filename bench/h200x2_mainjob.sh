#!/usr/bin/env bash
# The main job on nvidia-h200-x2 (issue 8 without x8): capture the built-in workload on every
# GPU (verify eager, then verify graphed), then attribute, gap, ranks, spec, diff, info, export
# and validate-trace on what came back. Run from a source tree after the wheels in .whl/ are
# installed into /tmp/site. Everything lands in $OUT/mainjob.tar.gz.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
SRC=${1:-$PWD}
rm -rf /tmp/site/tracekit && cp -r "$SRC/tracekit" /tmp/site/tracekit && rm -rf /tmp/site/tracekit/collectors /tmp/site/tracekit/analyzers \
  && cp -r "$SRC/collectors" /tmp/site/tracekit/collectors && cp -r "$SRC/analyzers" /tmp/site/tracekit/analyzers || exit 1
W=/tmp/mj; rm -rf $W; mkdir -p $W; cd $W || exit 1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,pcie.link.gen.current,pcie.link.width.current --format=csv; nvidia-smi topo -m; } > env.txt 2>&1
python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda,torch.cuda.nccl.version(),torch.cuda.device_count())' >> env.txt 2>&1
tk() { timeout 200 python3 -m tracekit "$@"; }
# an NCCL variable set in the launcher: info shows whether it reached the ranks
export NCCL_DEBUG=WARN
tk capture --ranks all --verify-graph off --cycles 10 --warmup 4 --timeout 150 -o eager.parquet > capture-eager.txt 2>&1; echo "rc=$?" >> capture-eager.txt
tk capture --ranks all --verify-graph on --cycles 10 --warmup 4 --timeout 150 -o graphed.parquet > capture-graphed.txt 2>&1; echo "rc=$?" >> capture-graphed.txt
export COLUMNS=140
for r in eager graphed; do
  tk attribute $r.parquet > attribute-$r.txt 2>&1; echo "rc=$?" >> attribute-$r.txt
  tk attribute $r.parquet --json > attribute-$r.json 2>>attribute-$r.txt
  tk info $r.parquet > info-$r.txt 2>&1
  tk ranks $r.parquet > ranks-$r.txt 2>&1
  tk spec $r.parquet > spec-$r.txt 2>&1
  tk export $r.parquet -o $r.pftrace > export-$r.txt 2>&1; echo "rc=$?" >> export-$r.txt
  tk validate-trace $r.pftrace >> export-$r.txt 2>&1; echo "rc=$?" >> export-$r.txt
done
tk gap eager.parquet --a verify --b decode > gap-eager-verify-vs-decode.txt 2>&1
tk gap eager.parquet --a verify --b verify --b-run graphed.parquet > gap-eager-vs-graphed-verify.txt 2>&1
tk diff graphed.parquet eager.parquet --phase verify > diff-graphed-to-eager.txt 2>&1
rm -f *.pftrace
tail -n 25 capture-*.txt attribute-eager.txt export-*.txt
tar czf $OUT/mainjob.tar.gz -C $W . && ls -la $OUT
