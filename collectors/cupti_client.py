"""tracekit's own CUPTI activity client: profile mode ``lite`` without torch.profiler.

torch.profiler's CUDA activity has Kineto enable six CUPTI activity kinds (MEMCPY, MEMSET,
CONCURRENT_KERNEL, RUNTIME, DRIVER, OVERHEAD) and record every runtime and driver API call; which
ones cannot be chosen (collectors/cupti.py trims them afterwards). This client enables only what
attribution needs, in a small C library (``cupti_client.c``, no Python API) loaded with ctypes:

- ``kernels``: CONCURRENT_KERNEL + MEMCPY + MEMSET records, no API records (no launches);
- ``launch``: those, plus RUNTIME / DRIVER records of the launch and sync calls only (the kinds
  enabled, then every callback id but ``cupti_cbids.RUNTIME_KEEP`` / ``DRIVER_KEEP`` switched off
  through ``cuptiActivityEnableRuntimeApi`` / ``...DriverApi``, as ``cupti.lean_ids`` lists them);
- ``callback``: kernels and copies as records, launches and syncs through a CUPTI callback
  (callback API) that writes one row per call;
- ``all``: kernels, copies and the RUNTIME + DRIVER kinds whole (what Kineto records, less OVERHEAD).

Rows come back as Kineto's columns (``tracekit.ingest.kineto_events.RAW_SCHEMA``: category, name,
device / stream of GPU rows, process / thread of API rows, times, correlation) and go through the
one Kineto -> events converter, ``kineto_events``, as the profiler's in-process events do
(``collectors/session.py``). Time stamps are CLOCK_REALTIME ns (a CUPTI timestamp callback), the
clock of ``time.time_ns()`` and of Kineto's events; API rows carry the native thread id
(``cuptiSetThreadIdType(SYSTEM)``), the id the phase ranges carry, so no thread map is needed.

The library is built on the machine that runs it, against the CUPTI headers found there
(``build``; ``python -m tracekit.collectors.cupti_client build``), into a cache keyed by the
source's hash; it dlopens the libcupti the process already mapped (torch's), so one CUPTI serves
the process. ``Client.open`` raises ``ClientUnavailable`` with the reason when any of that fails.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import polars as pl

from tracekit import settings
from tracekit.errors import ConfigError

SOURCE: Final = Path(__file__).with_name("cupti_client.c")
FLAGS: Final = {"kernels": 1, "copies": 2, "api_some": 4, "api_all": 8, "api_cb": 16}
MODES: Final[dict[str, int]] = {
    "kernels": FLAGS["kernels"] | FLAGS["copies"],
    "launch": FLAGS["kernels"] | FLAGS["copies"] | FLAGS["api_some"],
    "callback": FLAGS["kernels"] | FLAGS["copies"] | FLAGS["api_cb"],
    "all": FLAGS["kernels"] | FLAGS["copies"] | FLAGS["api_all"],
}
MODE_NOTES: Final = {
    "kernels": "kernels and copies only (no launch rows: no launch overhead, no phase membership by launch)",
    "launch": "kernels, copies, and API records of the launch and sync calls only",
    "callback": "kernels and copies; launches and syncs from a CUPTI callback",
    "all": "kernels, copies, every runtime and driver API record",
}
# Kineto category of each row category of the C library (enum order in cupti_client.c)
CATEGORIES: Final = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")
_DOMAIN: Final = {3: 2, 4: 1}  # runtime rows: CUPTI_CB_DOMAIN_RUNTIME_API, driver rows: ..._DRIVER_API
ROW_DTYPE: Final = [("start", "<i8"), ("end", "<i8"), ("corr", "<u4"), ("cat", "<u4"), ("device", "<u4"),
                     ("stream", "<u4"), ("name", "<u4"), ("pid", "<u4")]
_NO_DEVICE: Final = 0xFFFFFFFF


class ClientUnavailable(RuntimeError):
    """The client cannot run here (no headers, no compiler, no libcupti in the process, CUPTI refused)."""


def _site_dirs() -> list[str]:
    return [p for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path} if p]


def find_headers() -> Path | None:
    """A folder holding ``cupti.h``: ``TRACEKIT_CUPTI_INCLUDE``, the CUDA toolkit's, or a pip nvidia package's."""
    cands = [settings.current().cupti_include or "", "/usr/local/cuda/include",
             "/usr/local/cuda/extras/CUPTI/include", *sorted(glob.glob("/usr/local/cuda-*/include"), reverse=True),
             *sorted(glob.glob("/usr/local/cuda-*/extras/CUPTI/include"), reverse=True)]
    for site in _site_dirs():
        cands += sorted(glob.glob(f"{site}/nvidia/*/include")) + sorted(glob.glob(f"{site}/nvidia/*/*/include"))
    for c in cands:
        if c and (Path(c) / "cupti.h").is_file() and (Path(c) / "cuda.h").is_file():
            return Path(c)
    return None


def find_libcupti() -> str | None:
    """The libcupti to use: the one mapped into this process (torch's), else a pip nvidia package's."""
    from tracekit.collectors.cupti import loaded_cupti

    path = loaded_cupti()
    if path is not None:
        return path
    for site in _site_dirs():
        hits = sorted(glob.glob(f"{site}/nvidia/*/lib/libcupti.so*")) + sorted(
            glob.glob(f"{site}/nvidia/*/*/lib/libcupti.so*"))
        if hits:
            return hits[0]
    return None


def library_path() -> Path:
    """Where the built library lives: ``TRACEKIT_CUPTI_CLIENT``, else a cache file named by the hash of the
    source and of the CUPTI headers it would be built against (the record layouts it reads come from
    them: another toolkit, or another ``TRACEKIT_CUPTI_INCLUDE``, gets its own build)."""
    env = settings.current().cupti_client
    if env:
        return Path(env)
    h = hashlib.sha256(SOURCE.read_bytes())
    inc = find_headers()
    if inc is not None:
        h.update(str(inc.resolve()).encode())
        for name in ("cupti_activity.h", "cupti.h"):
            if (inc / name).is_file():
                h.update((inc / name).read_bytes())
    digest = h.hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tracekit"
    return cache / f"cupti_client-{digest}.so"


def build(dest: Path | None = None) -> Path:
    """Compile ``cupti_client.c`` (once: an existing file is kept). Raises ClientUnavailable with the reason."""
    out = dest or library_path()
    if out.is_file():
        return out
    inc = find_headers()
    if inc is None:
        raise ClientUnavailable("no CUPTI headers (cupti.h) found: set TRACEKIT_CUPTI_INCLUDE")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    cmd = [cc, "-shared", "-fPIC", "-O2", "-std=gnu99", f"-I{inc}", str(SOURCE), "-o", str(tmp), "-ldl",
           "-lpthread", "-lstdc++"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise ClientUnavailable(f"no C compiler ({cc}): {exc}") from exc
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise ClientUnavailable(f"building {SOURCE.name} failed: {res.stderr.strip()[-400:]}")
    os.replace(tmp, out)  # atomic: ranks building at once each rename a complete file
    return out


def _lib(path: Path) -> Any:
    lib = ctypes.CDLL(str(path))
    u32p = ctypes.POINTER(ctypes.c_uint32)
    for name, res, args in (
        ("tk_open", ctypes.c_int, [ctypes.c_char_p]), ("tk_error", ctypes.c_char_p, []),
        ("tk_start", ctypes.c_int, [ctypes.c_int, u32p, ctypes.c_int, u32p, ctypes.c_int]),
        ("tk_stop", ctypes.c_int, []),
        ("tk_count", ctypes.c_size_t, []), ("tk_rows", ctypes.c_void_p, []), ("tk_row_size", ctypes.c_size_t, []),
        ("tk_name_count", ctypes.c_size_t, []), ("tk_name", ctypes.c_char_p, [ctypes.c_size_t]),
        ("tk_dropped", ctypes.c_uint64, []), ("tk_other", ctypes.c_uint64, []), ("tk_now", ctypes.c_int64, []),
        ("tk_api_name", ctypes.c_char_p, [ctypes.c_int, ctypes.c_uint32]), ("tk_clear", None, []),
    ):
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


def _ids(ids: list[int]) -> Any:
    return (ctypes.c_uint32 * len(ids))(*ids)


class Client:
    """One process's client: ``open()`` once, then ``start(mode)`` / ``stop()`` per window, ``raw()`` / ``events()``."""

    def __init__(self, mode: str = "launch") -> None:
        if mode not in MODES:
            raise ConfigError(f"CUPTI client mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self.lib: Any = None
        self.libcupti: str | None = None
        self.info: dict[str, Any] = {}

    def open(self) -> Client:
        from tracekit.collectors.cupti import lean_ids
        from tracekit.collectors.cupti_cbids import DRIVER_KEEP, RUNTIME_KEEP

        try:  # a missing source, an unwritable cache, a library that does not load: say so, never crash the window
            path = build()
            cupti = find_libcupti()
            if cupti is None:
                raise ClientUnavailable("no libcupti in this process or in a pip nvidia package")
            self.lib = _lib(path)
        except OSError as exc:
            raise ClientUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if self.lib.tk_open(cupti.encode()) != 0:
            raise ClientUnavailable(self.lib.tk_error().decode())
        self.libcupti = cupti
        # launch: the ids switched off; callback: the ids traced
        self._rt, self._dr = lean_ids() if self.mode == "launch" else (sorted(RUNTIME_KEEP), sorted(DRIVER_KEEP))
        self.info = {"client": str(path), "libcupti": cupti, "mode": self.mode, "records": MODE_NOTES[self.mode]}
        return self

    def start(self) -> None:
        self.lib.tk_clear()
        rc = self.lib.tk_start(MODES[self.mode], _ids(self._rt), len(self._rt), _ids(self._dr), len(self._dr))
        if rc != 0:
            raise ClientUnavailable(f"CUPTI client start ({self.mode}): {self.lib.tk_error().decode()}")

    def stop(self) -> None:
        rc = self.lib.tk_stop()
        if rc != 0:
            raise ClientUnavailable(f"CUPTI client stop: {self.lib.tk_error().decode()}")
        self.info["dropped_records"] = int(self.lib.tk_dropped())
        self.info["other_records"] = int(self.lib.tk_other())

    def raw(self) -> pl.DataFrame:
        """The rows of the last window in Kineto's raw columns (``kineto_events.RAW_SCHEMA``)."""
        import numpy as np

        n = int(self.lib.tk_count())
        size = int(self.lib.tk_row_size())
        if size != np.dtype(ROW_DTYPE).itemsize:
            raise ClientUnavailable(f"row size {size} != {np.dtype(ROW_DTYPE).itemsize}: library and module disagree")
        buf = ctypes.string_at(self.lib.tk_rows(), n * size) if n else b""
        names = [(self.lib.tk_name(i) or b"").decode("utf-8", "replace") for i in range(int(self.lib.tk_name_count()))]
        return raw_frame(np.frombuffer(buf, dtype=ROW_DTYPE), names,
                         lambda dom, cbid: (self.lib.tk_api_name(dom, cbid) or b"INVALID").decode())

    def events(self, rank: int) -> pl.DataFrame:
        """The last window as an event frame (schema columns, not finalized), through the one converter."""
        from tracekit import schema
        from tracekit.ingest.kineto_events import kineto_events

        ev = kineto_events(self.raw()).events.drop("pid_raw")
        return schema.conform(ev.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")))


def raw_frame(a: Any, names: list[str], cupti_name: Callable[[int, int], str]) -> pl.DataFrame:
    """The C library's rows (a numpy array of ``ROW_DTYPE``) in Kineto's raw columns (``RAW_SCHEMA``).

    ``names``: the interned names (kernels demangled, copies as Kineto spells them); an API row's name is
    its callback id's, from ``cupti_cbids`` or ``cupti_name(domain, cbid)``, without version suffix.
    """
    import numpy as np

    from tracekit.ingest.kineto_events import RAW_SCHEMA

    n = len(a)
    cat = a["cat"].astype(np.int64)
    host = cat >= 3
    name_col = np.empty(n, dtype=object)
    if names:
        name_col[~host] = np.asarray(names, dtype=object)[a["name"][~host]]
    name_col[host] = _api_names(cupti_name, a["cat"][host], a["name"][host])
    cols = pl.DataFrame({
        "cat": pl.Series(np.asarray(CATEGORIES, dtype=object)[cat], dtype=pl.String),
        "name": pl.Series(name_col, dtype=pl.String),
        # Kineto's pid / tid: device / stream of a GPU row, process / thread of an API row
        "pid_int": np.where(host, a["pid"].astype(np.int64), a["device"].astype(np.int64)),
        "tid_raw": a["stream"].astype(np.int64),
        "start_ns": a["start"].astype(np.int64),
        "dur_ns": (a["end"] - a["start"]).astype(np.int64),
        "correlation": a["corr"].astype(np.int64),
    }).with_columns(pl.lit(False).alias("instant"),
                    pl.when(pl.col("correlation") != 0).then(pl.col("correlation")).alias("correlation"))
    return cols.select([pl.col(c).cast(t) if c in cols.columns else pl.lit(None, dtype=t).alias(c)
                        for c, t in RAW_SCHEMA.items()])


def _api_names(cupti_name: Callable[[int, int], str], cats: Any, cbids: Any) -> list[str]:
    """Kineto's name of each API row (``cupti.api_name`` of CUPTI's callback name)."""
    from tracekit.collectors.cupti import api_name
    from tracekit.collectors.cupti_cbids import DRIVER_KEEP, RUNTIME_KEEP

    memo: dict[tuple[int, int], str] = {}
    out = []
    for c, i in zip(cats.tolist(), cbids.tolist(), strict=True):
        key = (c, i)
        if key not in memo:
            known = (RUNTIME_KEEP if c == 3 else DRIVER_KEEP).get(i)
            raw = known or cupti_name(_DOMAIN[c], i)
            memo[key] = api_name(raw)
        out.append(memo[key])
    return out


def main(argv: list[str]) -> int:
    """``python -m tracekit.collectors.cupti_client build``: compile the library, print its path."""
    if argv[:1] != ["build"]:
        print("usage: python -m tracekit.collectors.cupti_client build", file=sys.stderr)
        return 2
    try:
        print(build())
    except ClientUnavailable as exc:
        print(f"tracekit: error: CUPTI client: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
