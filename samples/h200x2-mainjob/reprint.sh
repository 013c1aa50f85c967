#!/usr/bin/env bash
# Re-print the analyses of the committed run files with the current tracekit (no GPU needed: every
# analysis reads only eager.parquet / graphed.parquet, captured on the GPU machine; see README.md).
# capture-*.txt, export-*.txt and rerun-*.txt stay as printed on the GPU machine.
#   bash samples/h200x2-mainjob/reprint.sh
set -euo pipefail
cd "$(dirname "$0")"
TK=${TK:-tracekit}
export COLUMNS=140
for w in eager graphed; do $TK attribute $w.parquet > attribute-$w.txt; done
$TK gap eager.parquet --a verify --b decode > gap-eager-verify-vs-decode.txt
$TK gap eager.parquet --a verify --b verify --b-run graphed.parquet > gap-eager-vs-graphed-verify.txt
$TK diff graphed.parquet eager.parquet --phase verify > diff-graphed-to-eager.txt
$TK info eager.parquet > info-eager.txt
$TK ranks eager.parquet > ranks-eager.txt
$TK spec eager.parquet > spec-eager.txt
