"""``tracekit sol --calibrate``: achievable HBM bandwidth and GEMM rate of the local GPU, as a spec file.

Datasheet peaks are not achievable peaks: this measures them. On the GPU, with CUDA events around
``reps`` repetitions after ``warmup`` ones:
- bandwidth: a device-to-device copy of ``copy_bytes`` (``dst.copy_(src)``: every byte read once
  and written once, so 2 x bytes move per copy);
- bf16 GEMM: ``torch.matmul`` of two ``gemm_n`` x ``gemm_n`` bf16 matrices (2 n^3 FLOPs);
- fp8 GEMM where ``torch._scaled_mm`` runs on the device (e4m3 inputs, unit scales), else the
  table's fp8 rate is kept and the file says so.
The spec keeps the link, int8 rate and sources of the table entry the device name matches; its
``achievable`` is 1.0 (the numbers are already achieved rates). Everything here imports torch:
call it only from the command, never from ``import tracekit``.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracekit.analyzers.sol.gpus import GpuSpec
from tracekit.errors import TracekitError


class NoCudaError(TracekitError):
    """--calibrate on a machine without a CUDA device."""


@dataclass(frozen=True)
class Calibration:
    device: str
    copy_bytes: int
    copy_ns: float  # median per copy
    gemm_n: int
    gemm_ns: float  # median per bf16 GEMM
    fp8_ns: float | None  # median per fp8 GEMM; None: not measured
    fp8_why: str
    reps: int

    @property
    def hbm_Bps(self) -> float:
        """Bytes moved per second: a copy reads and writes every byte."""
        return 2 * self.copy_bytes / self.copy_ns * 1e9

    @property
    def bf16_flops(self) -> float:
        return 2 * self.gemm_n ** 3 / self.gemm_ns * 1e9

    @property
    def fp8_flops(self) -> float | None:
        return None if self.fp8_ns is None else 2 * self.gemm_n ** 3 / self.fp8_ns * 1e9


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


def timed(fn: Callable[[], Any], reps: int, warmup: int, timer: Callable[[Callable[[], Any]], float]) -> float:
    """Median of ``reps`` timings of ``fn`` (ns) after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    return _median([timer(fn) for _ in range(reps)])


def cuda_event_timer(fn: Callable[[], Any]) -> float:
    import torch

    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e6  # ms -> ns


def _copy_ns(device: Any, nbytes: int, reps: int, warmup: int, timer: Callable[[Callable[[], Any]], float]) -> float:
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).fill_(1)
    dst = torch.empty_like(src)
    return timed(lambda: dst.copy_(src), reps, warmup, timer)


def measure(device: Any, *, copy_bytes: int = 1 << 30, gemm_n: int = 8192, reps: int = 20, warmup: int = 3,
            timer: Callable[[Callable[[], Any]], float] = cuda_event_timer) -> Calibration:
    """Measure on ``device`` (module doc). ``timer`` times one call in ns (CUDA events on the GPU)."""
    import torch

    copy_ns = _copy_ns(device, copy_bytes, reps, warmup, timer)  # its buffers are freed before the GEMM's
    a = torch.randn(gemm_n, gemm_n, device=device, dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn(gemm_n, gemm_n, device=device, dtype=torch.float32).to(torch.bfloat16)
    gemm_ns = timed(lambda: torch.matmul(a, b), reps, warmup, timer)
    fp8_ns: float | None = None
    why = "measured with torch._scaled_mm (e4m3, unit scales)"
    try:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
        one = torch.ones((), device=device, dtype=torch.float32)
        fp8_ns = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
                       reps, warmup, timer)
    except Exception as exc:  # no fp8 GEMM on this device / build: keep the table's rate, and say why
        why = f"not measured ({exc.__class__.__name__}: {str(exc)[:120]}): the table's rate"
    name = torch.cuda.get_device_name(device) if getattr(device, "type", "") == "cuda" else str(device)
    return Calibration(name, copy_bytes, copy_ns, gemm_n, gemm_ns, fp8_ns, why, reps)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def spec_toml(cal: Calibration, base: GpuSpec | None) -> str:
    """A ``--gpu SPEC.toml`` file of the measured rates (link and int8 from ``base``, the table entry)."""
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    fp8 = cal.fp8_flops if cal.fp8_flops is not None else (base.flops["fp8"] if base else 0.0)
    lines = [
        f"# tracekit sol --calibrate on {cal.device}, {when}: median of {cal.reps} timings (CUDA events)",
        f"# copy of {cal.copy_bytes:,} B device to device: {cal.copy_ns:.0f} ns -> 2 x bytes / time",
        f"# bf16 GEMM {cal.gemm_n}^3: {cal.gemm_ns:.0f} ns -> 2 n^3 / time; fp8: {cal.fp8_why}",
        "[[gpu]]",
        f"name = {_q(cal.device + ' (calibrated)')}",
        f"match = {_q(cal.device)}",
        f"hbm_gbps = {cal.hbm_Bps / 1e9:.1f}",
        f"bf16_tflops = {cal.bf16_flops / 1e12:.1f}",
        f"fp8_tflops = {fp8 / 1e12:.1f}",
        f"int8_tops = {(base.flops['int8'] if base else 0.0) / 1e12:.1f}",
        f"link = {_q(base.link if base else 'pcie')}",
        f"link_gbps = {(base.link_Bps if base else 64e9) / 1e9:g}",
        f"allreduce_alpha_us = {(base.alpha_ns if base else 1700.0) / 1000:g}",
        "achievable = 1.0",
        f"source = {_q(f'measured by tracekit sol --calibrate on {cal.device} ({when}); int8, link: ' + (base.source if base else 'defaults (no table entry matched)'))}",
    ]
    return "\n".join(lines) + "\n"


def calibrate_local(**kwargs: Any) -> Calibration:
    """``measure`` on the current CUDA device; ``NoCudaError`` (one line, exit 1) without one."""
    try:
        import torch
    except ImportError:
        raise NoCudaError("--calibrate needs torch with CUDA (pip install 'tracekit[capture]'); torch is not installed"
                          ) from None
    if not torch.cuda.is_available():
        raise NoCudaError("--calibrate measures a CUDA GPU, and this machine has none (torch.cuda.is_available() is "
                          "False)")
    return measure(torch.device("cuda", torch.cuda.current_device()), **kwargs)
