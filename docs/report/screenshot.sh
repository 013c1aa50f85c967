#!/usr/bin/env bash
# The README's screenshot of `tracekit report`: the main job's report command on the committed
# 2x H200 capture, then headless Chromium (offline, fresh profile) at the verify plot.
# Run from the repository root: bash docs/report/screenshot.sh > docs/report/screenshot.txt 2>&1
set -euo pipefail
out=$(mktemp -d)
echo "$ tracekit report samples/h200x2-mainjob/eager.parquet -o $out/report.html"
.venv/bin/tracekit report samples/h200x2-mainjob/eager.parquet -o "$out/report.html"
chromium --headless --no-sandbox --disable-gpu --disable-background-networking --hide-scrollbars \
  --user-data-dir="$out/profile" --window-size=1280,700 --virtual-time-budget=30000 \
  --screenshot="$out/shot.png" "file://$out/report.html" 2>/dev/null
# palette PNG: the same pixels in a fraction of the bytes
.venv/bin/python -c "import sys; from PIL import Image; Image.open(sys.argv[1]).convert('RGB').quantize(256).save(sys.argv[2], optimize=True)" \
  "$out/shot.png" docs/report/screenshot.png
ls -l docs/report/screenshot.png | awk '{print "docs/report/screenshot.png", $5, "bytes"}'
rm -rf "$out"
