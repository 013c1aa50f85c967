#!/usr/bin/env bash
# transformers' assisted generation captured by tracekit, then analysed: the sample script
# (samples/h200-transformers/ on one H200, samples/cpu-transformers/ on the CPU box).
#   bench/transformers_run.sh OUTDIR [extra capture args...]
# Captures the DeepSeek-V3 preset (deepseek-v3-small on GPU, -tiny on CPU) with its default
# assistant (early-exit:1) in full and in lite profile mode, and without an assistant (plain
# decode, full mode); then attribute, gap (verify vs decode), spec, info, export + validate-trace. Every command's output goes to OUTDIR/<name>.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 COLUMNS=140
W=${1:?usage: transformers_run.sh OUTDIR [capture args]}; shift
mkdir -p "$W"; W=$(cd "$W" && pwd); cd "$W" || exit 1  # not the source tree: python -m tracekit must import the installed copy
PY=${PYTHON:-python3}
tk() { timeout 300 "$PY" -m tracekit "$@"; }
run() { local name=$1; shift; { echo "\$ tracekit $*"; tk "$@"; echo "rc=$?"; } > "$W/$name.txt" 2>&1; }
{ "$PY" -c 'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__); print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")'; } > "$W/env.txt" 2>&1
CAP=(capture --engine transformers --ranks all --cycles 3 --warmup 2 --new-tokens 24 "$@")
run capture-spec "${CAP[@]}" --profile full -o "$W/spec.parquet"
run capture-spec-lite "${CAP[@]}" --profile lite -o "$W/spec-lite.parquet"
run capture-base "${CAP[@]}" --profile full --no-assistant -o "$W/base.parquet"
run attribute-spec-lite attribute "$W/spec-lite.parquet"
run attribute-spec attribute "$W/spec.parquet"
run attribute-base attribute "$W/base.parquet" --phase decode
run gap-verify-vs-decode gap "$W/spec.parquet" --a verify --b decode --b-run "$W/base.parquet"
run spec spec "$W/spec.parquet" --baseline "$W/base.parquet" --draft-tokens 3
tk spec "$W/spec.parquet" --baseline "$W/base.parquet" --draft-tokens 3 --json > "$W/spec.json" 2>>"$W/spec.txt"
run info-spec info "$W/spec.parquet"
run export-spec export "$W/spec.parquet" -o "$W/spec.pftrace"
run validate-spec validate-trace "$W/spec.pftrace"
rm -f "$W/spec.pftrace"
tail -n 4 "$W"/*.txt
