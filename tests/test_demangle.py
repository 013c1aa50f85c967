"""C++ demangling: tables and exports show the demangled kernel; the run keeps the raw name."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.export.layout import display_names
from tracekit.finalize.names import demangle, normalize_kernel_name
from tracekit.store import read_run

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "h200x2-mainjob" / "eager.parquet"


def _cutlass() -> str:
    names = read_run(SAMPLE).filter(pl.col("name").str.starts_with("_ZN7cutlass"))["name"].unique()
    assert names.len() == 1  # the grouped GEMM of the H200 capture, as CUPTI named it
    return str(names[0])


def test_demangle() -> None:
    assert demangle("_ZN5flash16flash_fwd_kernelEv") == "flash::flash_fwd_kernel()"
    assert demangle("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    assert demangle("_Zgarbage") == "_Zgarbage"  # not parseable: unchanged


def test_the_real_cutlass_grouped_gemm_is_demangled_everywhere() -> None:
    raw = _cutlass()
    full = demangle(raw)
    assert full.startswith("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<")
    assert normalize_kernel_name(raw) == "cutlass::gemm::kernel::GemmUniversal"
    assert display_names([raw]) == {raw: "cutlass::gemm::kernel::GemmUniversal"}  # export slice name
