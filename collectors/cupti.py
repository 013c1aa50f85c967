"""Trim what CUPTI records while a torch profiler runs (profile mode ``lite``).

torch.profiler's CUDA activity has Kineto enable the CUPTI activity kinds
MEMCPY, MEMSET, CONCURRENT_KERNEL, RUNTIME, DRIVER and OVERHEAD; which kinds
cannot be chosen through torch. CUPTI's state is per process, so after the
profiler has started, tracekit can switch records off at the source through
the libcupti that Kineto loaded (ctypes; found in ``/proc/self/maps``):

- ``KINETO_DROPPED_RUNTIME``: runtime API calls whose records Kineto throws
  away when it builds the trace (libkineto ``isBlockListedRuntimeCbid``:
  cudaGetDevice, cudaSetDevice, cudaGetLastError, cudaEventCreate,
  cudaEventCreateWithFlags, cudaEventDestroy). Recording them costs time per
  call and gives nothing: torch checks ``cudaGetLastError`` after every kernel
  launch. ``cuptiActivityEnableRuntimeApi(cbid, 0)`` (CUPTI 12.5+) stops them.
- ``lean``: every runtime and driver API record that is neither a launch nor a
  sync (``cupti_cbids``: the ids tracekit's Kineto converter would file as
  ``runtime`` rows, which no analyzer reads: cudaStreamIsCapturing,
  cudaOccupancy..., cudaFuncSetAttribute, cudaGetLastError, ...), through
  ``cuptiActivityEnableRuntimeApi`` / ``cuptiActivityEnableDriverApi``.
  Launches (kernels, copies, memsets, graphs) and syncs keep their records.
- activity kinds by name (``KINDS``), ``cuptiActivityDisable``.

Callback ids are CUDA 13's ``cupti_runtime_cbid.h`` (stable across versions:
CUPTI appends, never renumbers). Every call's CUPTI return code is reported;
nothing raises: a process without libcupti, or an old CUPTI, records as before.
"""

from __future__ import annotations

import ctypes
import re
from typing import Final

_SUFFIX = re.compile(r"(_v\d+)?$")

KINETO_DROPPED_RUNTIME: Final = {
    "cudaGetLastError": 10,
    "cudaSetDevice": 16,
    "cudaGetDevice": 17,
    "cudaEventCreate": 133,
    "cudaEventCreateWithFlags": 134,
    "cudaEventDestroy": 136,
}
KINDS: Final = {"memcpy": 1, "memset": 2, "driver": 4, "runtime": 5, "concurrent_kernel": 10, "overhead": 17}


def api_name(cbid_name: str) -> str:
    """The API's name as Kineto prints it, from a callback id's (``cudaLaunchKernel_ptsz_v7000`` -> ``cudaLaunchKernel``)."""
    return re.sub(r"_(ptsz|ptds)$", "", _SUFFIX.sub("", cbid_name))


def lean_ids() -> tuple[list[int], list[int]]:
    """(runtime ids, driver ids) that ``lean`` switches off: every id below the table's size but the kept ones."""
    from tracekit.collectors.cupti_cbids import DRIVER_KEEP, DRIVER_SIZE, RUNTIME_KEEP, RUNTIME_SIZE

    return ([i for i in range(1, RUNTIME_SIZE) if i not in RUNTIME_KEEP],
            [i for i in range(1, DRIVER_SIZE) if i not in DRIVER_KEEP])


def loaded_cupti() -> str | None:
    """Path of the libcupti mapped into this process (None before a profiler loaded it, or off Linux)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(" ", 1)[-1].strip()
                if "libcupti" in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        return None
    return None


def trim(runtime_off: dict[str, int] | None = None, kinds_off: tuple[str, ...] = (),
         lean: bool = False) -> dict[str, int | str]:
    """Switch the given runtime-API records, activity kinds, and with ``lean`` every non-launch, non-sync API
    record off in the loaded CUPTI.

    Returns what was done: name -> CUPTI return code (0 = CUPTI_SUCCESS; for ``lean`` the number of ids
    switched off and of failures), or ``{"error": why}``.
    """
    path = loaded_cupti()
    if path is None:
        return {"error": "no libcupti loaded in this process"}
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        return {"error": f"{path}: {exc}"}
    done: dict[str, int | str] = {"libcupti": path}
    if runtime_off:
        fn = getattr(lib, "cuptiActivityEnableRuntimeApi", None)
        if fn is None:
            done["error"] = "cuptiActivityEnableRuntimeApi missing (CUPTI older than 12.5)"
        else:
            fn.argtypes = [ctypes.c_uint32, ctypes.c_uint8]
            fn.restype = ctypes.c_int
            for name, cbid in runtime_off.items():
                done[name] = int(fn(cbid, 0))
    if lean:
        rt_ids, dr_ids = lean_ids()
        for label, fname, ids in (("lean_runtime", "cuptiActivityEnableRuntimeApi", rt_ids),
                                  ("lean_driver", "cuptiActivityEnableDriverApi", dr_ids)):
            fn = getattr(lib, fname, None)
            if fn is None:
                done[label] = f"{fname} missing (CUPTI older than 12.5)"
                continue
            fn.argtypes = [ctypes.c_uint32, ctypes.c_uint8]
            fn.restype = ctypes.c_int
            codes = [int(fn(i, 0)) for i in ids]
            done[label] = f"{codes.count(0)} ids off, {len(codes) - codes.count(0)} refused"
    if kinds_off:
        dis = lib.cuptiActivityDisable
        dis.argtypes = [ctypes.c_int]
        dis.restype = ctypes.c_int
        for kind in kinds_off:
            done[f"kind:{kind}"] = int(dis(KINDS[kind]))
    return done
