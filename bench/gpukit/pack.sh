#!/usr/bin/env bash
# Here (no GPU): build the folder a device run carries, from this checkout.
#
#   bench/gpukit/pack.sh DEST        e.g. bench/gpukit/pack.sh /work/main/.gpu/observe
#
# DEST gets: src/tracekit (the package with collectors/ and analyzers/ copied in, no symlinks, no
# build outputs), bench/, setup.py, and deps.tar.xz: the Python packages tracekit needs that the
# GPU machine's image lacks (polars from this venv, abi3; msgspec as a CPython 3.12 manylinux wheel,
# the machine's Python; itanium_demangler, pure Python). The device tool sends only the main
# checkout: DEST must sit in an ignored folder of it (.gpu/ is in its .git/info/exclude) and be
# named in the run's `carry`. There, bench/gpukit/install.sh unpacks it into /tmp/site.
set -euo pipefail
DEST=${1:?usage: bench/gpukit/pack.sh DEST}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$ROOT/.venv/bin/python}
MSGSPEC=${MSGSPEC:-$($PY -c 'import importlib.metadata as m; print(m.version("msgspec"))')}
SITE=$($PY -c 'import os, polars; print(os.path.dirname(os.path.dirname(polars.__file__)))')
STAMP="polars $($PY -c 'import polars; print(polars.__version__)') msgspec $MSGSPEC"
KEEP=$(mktemp -d)
trap 'rm -rf "$KEEP"' EXIT
# deps.tar.xz takes minutes to compress: kept from the last pack when the same versions went in
if [ -f "$DEST/deps.tar.xz" ] && [ "$(cat "$DEST/deps.txt" 2>/dev/null)" = "$STAMP" ]; then
  mv "$DEST/deps.tar.xz" "$DEST/deps.txt" "$KEEP/"
fi
rm -rf "$DEST"
mkdir -p "$DEST/src"
cp -rL "$ROOT/tracekit" "$DEST/src/tracekit"
find "$DEST/src" \( -name __pycache__ -o -name '*.so' \) -prune -exec rm -rf {} +
cp -r "$ROOT/bench" "$DEST/bench"
rm -rf "$DEST/bench/results" "$DEST/bench/gpukit/__pycache__"
find "$DEST/bench" -name __pycache__ -prune -exec rm -rf {} +
cp "$ROOT/setup.py" "$DEST/"
if [ -f "$KEEP/deps.tar.xz" ]; then
  mv "$KEEP/deps.tar.xz" "$KEEP/deps.txt" "$DEST/"
else
STAGE=$(mktemp -d)
# polars (abi3) and the pure-Python demangler as installed here; whatever polars' own runtime package is
for p in polars itanium_demangler; do cp -r "$SITE/$p" "$STAGE/"; done
for p in "$SITE"/_polars_runtime* "$SITE"/polars_runtime*; do [ -e "$p" ] && cp -r "$p" "$STAGE/"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$STAGE/whl" "msgspec==$MSGSPEC"
(cd "$STAGE" && for w in whl/*.whl; do $PY -m zipfile -e "$w" .; done && rm -rf whl)
find "$STAGE" -name __pycache__ -prune -exec rm -rf {} +
tar cJf "$DEST/deps.tar.xz" -C "$STAGE" .
rm -rf "$STAGE"
echo "$STAMP" > "$DEST/deps.txt"
fi
git -C "$ROOT" rev-parse HEAD > "$DEST/COMMIT"
git -C "$ROOT" status --porcelain --untracked-files=no | sed 's/^/dirty: /' >> "$DEST/COMMIT"
du -sh "$DEST" "$DEST/deps.tar.xz"
