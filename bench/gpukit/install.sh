#!/usr/bin/env bash
# There (the GPU machine, from the repository root): install the folder bench/gpukit/pack.sh built.
#
#   TK_SRC=.gpu/observe source .gpu/observe/bench/gpukit/install.sh
#
# Unpacks deps.tar.xz and copies src/tracekit into /tmp/site, builds tracekit's C extensions in
# place there (optional: without a compiler the numpy paths run), builds the CUPTI client, and exports PYTHONPATH=/tmp/site
# and the NVLink-multicast switches (KINDS.md). `python3 -m tracekit` then runs the carried code.
TK_SRC=${TK_SRC:?set TK_SRC to the carried folder (bench/gpukit/pack.sh DEST)}
TK_SRC=$(cd "$TK_SRC" && pwd)
rm -rf /tmp/site && mkdir -p /tmp/site
tar xJf "$TK_SRC/deps.tar.xz" -C /tmp/site || return 1 2>/dev/null || exit 1
cp -r "$TK_SRC/src/tracekit" /tmp/site/
# the extensions setup.py lists (one list: the carried setup.py), built in place
(cd /tmp/site && python3 "$TK_SRC/setup.py" -q build_ext --inplace
) > /tmp/site/build.log 2>&1 || echo "install.sh: C extensions not built (numpy paths run): /tmp/site/build.log"
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# tracekit's CUPTI client (profile mode lite): built once against the CUPTI headers there, cached in ~/.cache/tracekit
(cd /tmp && python3 -m tracekit.collectors.cupti_client build) || echo "install.sh: CUPTI client not built (lite falls back to torch.profiler)"
(cd /tmp && python3 -c 'import tracekit, polars, msgspec, sys; from tracekit import _native as n; print("install.sh: tracekit from", tracekit.__file__, "polars", polars.__version__, "python", sys.version.split()[0], "compiled:", [m for m in ("core", "kineto", "walk") if getattr(n, m) is not None])')
