#!/usr/bin/env bash
# Re-print this directory's outputs with the current code (they read only committed files): bash samples/sol/reprint.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
S=samples/sol
K=$S/kimi-k2.5.config.json
tracekit sol --model $K --gpu "RTX PRO 6000 Blackwell" --tp 8 --tokens 1 --tokens 3 --seq-len 2048 --allreduce-us 24 > $S/seed-what-if.txt
tracekit sol --model $K --draft-model $S/kimi-k2.5-eagle3-draft.config.json --gpu "RTX PRO 6000 Blackwell" --tp 8 \
  --tokens 3 --seq-len 2048 --allreduce-us 24 > $S/seed-cycle-what-if.txt
tracekit sol --model $K --gpu H200 --tp 8 --tokens 1 --tokens 4 --seq-len 32768 > $S/h200-32k-what-if.txt
for r in graphed eager; do tracekit sol samples/h200x2-mainjob/$r.parquet > $S/h200x2-mainjob-$r-sol.txt 2>/dev/null; done
