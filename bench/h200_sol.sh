#!/usr/bin/env bash
# Issue 25's GPU checks, for a machine with one H200 (run 2026-12-05: samples/h200-sol/, whose README
# gives the device command). From the repository root, with tracekit installed there
# ('.[capture,transformers]' and a CUDA torch):
#   bash bench/h200_sol.sh OUTDIR
# 1. tracekit sol --calibrate: measured copy bandwidth and bf16 / fp8 GEMM rates -> OUTDIR/h200.toml
#    (compare with the datasheet's 4.8 TB/s and 989 TFLOP/s dense bf16, printed beside them);
# 2. captures of the built-in workload (kimi-k2-tiny, verify eager and graphed) and of the transformers
#    engine (deepseek-v3-small), each with `tracekit sol --json` on the table's H200 and on the calibrated spec;
# 3. a summary: per run and spec, every phase's % of SOL and whether any floor was beaten (it must not be).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${1:?usage: bash bench/h200_sol.sh OUTDIR}
mkdir -p "$OUT" || exit 1
{ nvidia-smi; python3 -c 'import torch,sys;print(sys.version);print(torch.__version__,torch.version.cuda)'; } > "$OUT/env.txt" 2>&1
tracekit sol --calibrate -o "$OUT/h200.toml" 2>&1 | tee "$OUT/calibrate.txt"
tracekit capture --ranks all --preset kimi-k2-tiny --verify-graph off --cycles 10 --warmup 4 -o "$OUT/eager.parquet" > "$OUT/capture-eager.txt" 2>&1
tracekit capture --ranks all --preset kimi-k2-tiny --verify-graph on --cycles 10 --warmup 4 -o "$OUT/graphed.parquet" > "$OUT/capture-graphed.txt" 2>&1
tracekit capture --engine transformers --ranks all --model deepseek-v3-small -o "$OUT/transformers.parquet" > "$OUT/capture-transformers.txt" 2>&1
for run in eager graphed transformers; do
  [ -f "$OUT/$run.parquet" ] || { echo "$run: no run (see $OUT/capture-$run.txt)"; continue; }
  COLUMNS=140 tracekit sol "$OUT/$run.parquet" > "$OUT/sol-$run.txt" 2>&1
  tracekit sol "$OUT/$run.parquet" --json > "$OUT/sol-$run.json" 2>/dev/null
  [ -f "$OUT/h200.toml" ] && tracekit sol "$OUT/$run.parquet" --gpu "$OUT/h200.toml" --json > "$OUT/sol-$run-calibrated.json" 2>/dev/null
done
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for f in sorted(out.glob("sol-*.json")):
    try:
        doc = json.loads(f.read_text())
    except ValueError:
        print(f"{f.name}: no document"); continue
    phases = ", ".join(f"{p['phase']} {p['pct_of_sol']:.0f}%" for p in doc["phases"] if p["pct_of_sol"] is not None)
    print(f"{f.name}: {doc['gpu']['name']}: {phases}; floor beaten: {doc['floor_beaten']}")
PY
