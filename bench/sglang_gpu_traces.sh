#!/usr/bin/env bash
# GPU check of the SGLang integration without SGLang (none is installed on the GPU host):
# two simulated ranks (tests/sglang_shapes.py, SGLang call shapes, forwards on cuda:r) with
# tracekit's hooks installed through the launcher code path, profiled with CPU+CUDA activities,
# written with SGLang's /start_profile file names into $OUT/sglang-gpu/. Ingest and attribute
# them on any machine:  tracekit ingest <dir> -o run.parquet && tracekit attribute run.parquet
set -euo pipefail
mkdir -p "$OUT/sglang-gpu"
export TK_SHAPES_DEVICE=cuda TRACEKIT_SGLANG_DIR="$OUT/sglang-gpu/manifests" PYTHONPATH="${PYTHONPATH:-}:$PWD/tests"
for r in 0 1; do
  python3 tests/sglang_rank.py "$OUT/sglang-gpu/1764470000.1234567-TP-$r.trace.json.gz" "$r" "${STYLE:-0.5.23}" "${STEPS:-6}" 1 2>&1 | grep -v USDT || true
done
ls -la "$OUT/sglang-gpu"
