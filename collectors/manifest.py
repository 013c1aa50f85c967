"""Environment manifest, taken inside each rank process (and in the launcher).

API (reused by the SGLang integration)::

    env_vars()                        # {"NCCL_P2P_LEVEL": "NVL", ...} as this process sees them
    versions()                        # torch / CUDA / NCCL / cuDNN / python / tracekit / sglang
    gpu_snapshot(device_index)        # NVML: name, clocks, power, temperature, throttle, PCIe
    rank_section(rank, world, device_index, when="start") -> dict   # one manifest["ranks"][r] part
    launcher_section() -> dict        # manifest["launcher"]
    NvmlSampler(device_index, interval_s).start() / .stop() -> counter rows (polars)

NVML comes from ``nvidia-ml-py`` (module ``pynvml``); when it is missing or
cannot initialise, the snapshot is ``{"nvml": "unavailable: <reason>"}``.
torch is imported only inside functions.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
import threading
import time
from typing import Any

import polars as pl

from tracekit import __version__, schema
from tracekit.manifest import RankManifest, rank_section_dict

ENV_PREFIXES = ("NCCL_", "CUDA_", "TORCH_", "SGLANG_", "VLLM_", "PYTORCH_", "NVSHMEM_", "TRACEKIT_", "GLOO_")
ENV_NAMES = ("OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "RANK", "WORLD_SIZE", "LD_PRELOAD")

# NVML clock event (throttle) reason bits -> names (nvml.h, nvmlClocksEventReason*)
_THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def env_vars(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Every NCCL_*, CUDA_*, TORCH_*, SGLANG_*, VLLM_*, PYTORCH_* (and a few more) variable, sorted."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0], "tracekit": __version__, "platform": platform.platform()}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            try:
                nccl = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
                out["nccl"] = ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
            except Exception as exc:
                out["nccl"] = f"unavailable: {exc!r}"
            out["cudnn"] = torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
    except ImportError:
        out["torch"] = None
    try:
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("sglang", "transformers"):
            try:
                out[dist] = version(dist)
            except PackageNotFoundError:
                out[dist] = None
    except ImportError:
        pass
    return out


class _Nvml:
    mod: Any = None
    error: str | None = None
    started = False

    @classmethod
    def get(cls) -> Any:
        if not cls.started:
            cls.started = True
            try:
                import pynvml

                pynvml.nvmlInit()
                cls.mod = pynvml
            except Exception as exc:  # no library, no driver, no GPU
                cls.error = f"{exc.__class__.__name__}: {exc}"
        return cls.mod


def _handle(nv: Any, device_index: int) -> Any:
    """NVML handle of CUDA device ``device_index`` (by UUID, so CUDA_VISIBLE_DEVICES is honoured)."""
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(device_index).uuid)
        return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except Exception:
        return nv.nvmlDeviceGetHandleByIndex(device_index)


def _try(out: dict[str, Any], key: str, fn: Any, *args: Any) -> None:
    try:
        val = fn(*args)
        out[key] = val.decode() if isinstance(val, bytes) else val
    except Exception as exc:
        out.setdefault("nvml_errors", {})[key] = exc.__class__.__name__


def gpu_snapshot(device_index: int) -> dict[str, Any]:
    """NVML facts of one GPU; ``{"nvml": "unavailable: ..."}`` without NVML."""
    nv = _Nvml.get()
    if nv is None:
        return {"nvml": f"unavailable: {_Nvml.error}"}
    try:
        h = _handle(nv, device_index)
    except Exception as exc:
        return {"nvml": f"unavailable: no handle for device {device_index}: {exc!r}"}
    out: dict[str, Any] = {"nvml": "ok", "device_index": device_index}
    _try(out, "name", nv.nvmlDeviceGetName, h)
    _try(out, "uuid", nv.nvmlDeviceGetUUID, h)
    _try(out, "pci_bus_id", lambda: nv.nvmlDeviceGetPciInfo(h).busId)
    _try(out, "driver", nv.nvmlSystemGetDriverVersion)
    _try(out, "cuda_driver", nv.nvmlSystemGetCudaDriverVersion)
    _try(out, "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
    _try(out, "mem_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
    _try(out, "max_sm_clock_mhz", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM)
    _try(out, "max_mem_clock_mhz", nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM)
    _try(out, "power_w", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
    _try(out, "power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0)
    _try(out, "temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
    _try(out, "pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    _try(out, "pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    _try(out, "pcie_max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    _try(out, "pcie_max_width", nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    _try(out, "persistence_mode", nv.nvmlDeviceGetPersistenceMode, h)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    if reasons_fn is not None:
        _try(out, "throttle_mask", reasons_fn, h)
        mask = out.get("throttle_mask")
        if isinstance(mask, int):
            out["throttle_reasons"] = [n for bit, n in _THROTTLE_BITS.items() if mask & bit]
    return out


def _host() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "ppid": os.getppid()}


def rank_section(rank: int, world: int, device_index: int | None, when: str = "start") -> dict[str, Any]:
    """One rank's manifest part at ``when`` ("start" or "end" of the window)."""
    h = _host()
    sec = rank_section_dict(
        RankManifest(rank=rank, world_size=world, host=h["host"], host_source="process", pid=h["pid"], env=env_vars()),
        ppid=h["ppid"],
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        taken_unix_ns=time.time_ns(),
        when=when,
    )
    if device_index is not None:
        sec["device_index"] = device_index
        sec["gpu"] = gpu_snapshot(device_index)
    else:
        sec["gpu"] = None
    return sec


def launcher_section(argv: list[str] | None = None) -> dict[str, Any]:
    return {**_host(), "argv": list(sys.argv if argv is None else argv), "env": env_vars(), "versions": versions()}


COUNTERS = ("gpu.sm_clock_mhz", "gpu.mem_clock_mhz", "gpu.power_w", "gpu.temperature_c", "gpu.util_pct")


class NvmlSampler:
    """Samples NVML clocks, power, temperature and utilisation on a thread -> ``counter`` rows."""

    def __init__(self, device_index: int, rank: int, interval_s: float = 0.01) -> None:
        self.device_index = device_index
        self.rank = rank
        self.interval_s = interval_s
        self.rows: list[tuple[str, int, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> bool:
        nv = _Nvml.get()
        if nv is None:
            self.error = f"NVML unavailable: {_Nvml.error}"
            return False
        try:
            h = _handle(nv, self.device_index)
        except Exception as exc:
            self.error = repr(exc)
            return False

        def loop() -> None:
            while not self._stop.is_set():
                t = time.time_ns()
                try:
                    self.rows.append((COUNTERS[0], t, float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))))
                    self.rows.append((COUNTERS[1], t, float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))))
                    self.rows.append((COUNTERS[2], t, nv.nvmlDeviceGetPowerUsage(h) / 1000.0))
                    self.rows.append((COUNTERS[3], t, float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))))
                    self.rows.append((COUNTERS[4], t, float(nv.nvmlDeviceGetUtilizationRates(h).gpu)))
                except Exception as exc:
                    self.error = repr(exc)
                    return
                self._stop.wait(self.interval_s)

        self._thread = threading.Thread(target=loop, name="tracekit-nvml", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> pl.DataFrame:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        n = len(self.rows)
        df = pl.DataFrame(
            {
                "rank": pl.Series([self.rank] * n, dtype=pl.Int32),
                "kind": pl.Series([schema.COUNTER] * n, dtype=pl.String),
                "name": pl.Series([r[0] for r in self.rows], dtype=pl.String),
                "device": pl.Series([self.device_index] * n, dtype=pl.Int16),
                "pid": pl.Series([os.getpid()] * n, dtype=pl.Int64),
                "start_ns": pl.Series([r[1] for r in self.rows], dtype=pl.Int64),
                "dur_ns": pl.Series([0] * n, dtype=pl.Int64),
                "value": pl.Series([r[2] for r in self.rows], dtype=pl.Float64),
            }
        )
        return schema.conform(df)
