"""Kernel-name normalisation for grouping (the full name stays in the ``name`` column).

``demangle`` turns an Itanium-mangled C++ name (``_ZN7cutlass13device_kernel...``, as CUPTI
reports CUTLASS grouped GEMMs) into its C++ spelling with ``itanium-demangler`` (pure Python; GNU
c++filt fails on the longest CUTLASS names); ``normalize_kernel_name`` demangles first, so every
table and export that shows kernel families shows the demangled name. The run keeps the raw name.

``normalize_kernel_name`` is a stable public helper used by the analyzers (gap,
diff) and the exporters: it drops the return type, template arguments and the
parameter list, and looks through generic launch wrappers
(``cutlass::device_kernel<flash::FlashAttnFwdSm90<...>>`` -> ``flash::FlashAttnFwdSm90``).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

import polars as pl

# Wrappers whose first template argument is the real kernel.
_WRAPPERS: Final = frozenset({
    "cutlass::device_kernel",
    "cutlass::Kernel",
    "cutlass::Kernel2",
    "flash::enable_sm80_to_sm89",
    "flash::enable_sm90_or_later",
    "flash::enable_sm90",
    "cute::device_kernel",
    "cutlass::device_kernel_with_params",
    "at::cuda::detail::enable_3x_kernel_for_sm9x",
    "at::cuda::detail::enable_3x_kernel_for_sm10x",
})
_SPACE = re.compile(r"\s+")
_LEADING = re.compile(r"^(?:void|__global__|static|inline|\s)+\s")
MAX_LEN: Final = 200


def _split_template(s: str) -> tuple[str, str | None, str]:
    """``base<args>rest`` -> (base, args or None, rest); brackets balanced, '(' ends the base."""
    lt = -1
    for i, ch in enumerate(s):
        if ch == "<":
            lt = i
            break
        if ch == "(":
            return s[:i], None, s[i:]
    if lt < 0:
        return s, None, ""
    depth = 0
    for j in range(lt, len(s)):
        ch = s[j]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return s[:lt], s[lt + 1:j], s[j + 1:]
    return s[:lt], s[lt + 1:], ""  # unbalanced (truncated name): keep what we have


def _first_arg(args: str) -> str:
    depth = 0
    for i, ch in enumerate(args):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            return args[:i]
    return args


@lru_cache(maxsize=1 << 16)
def demangle(name: str) -> str:
    """``name`` demangled when it is an Itanium C++ mangled name, else ``name`` unchanged (also
    when the demangler cannot parse it).

    >>> demangle("_ZN2at6native13reduce_kernelILi512ELi1EEEvi")
    'void at::native::reduce_kernel<(int)512, (int)1>(int)'
    """
    if not name.startswith("_Z"):
        return name
    from itanium_demangler import parse

    try:
        node = parse(name)
    except Exception:  # the demangler's own parse errors (it raises more than one type)
        return name
    return name if node is None else str(node)


MAX_PARSED_NAME = 1 << 16  # longer names are not demangled or parsed (real kernel names: a few KB at most)


@lru_cache(maxsize=1 << 16)
def normalize_kernel_name(name: str) -> str:
    """A short, stable grouping key for a kernel name.

    >>> normalize_kernel_name("void at::native::vectorized_elementwise_kernel<4, F, A>(int, F, A)")
    'at::native::vectorized_elementwise_kernel'
    >>> normalize_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'
    """
    if len(name) > MAX_PARSED_NAME:  # parsing is per character: a 256 MiB name took minutes and GBs (issue 30)
        return name.strip()[:MAX_LEN]
    s = _SPACE.sub(" ", demangle(name)).replace("(anonymous namespace)", "anon").strip()
    for _ in range(4):  # wrappers nest at most a few levels
        s = _LEADING.sub("", s).strip()
        base, args, _rest = _split_template(s)
        base = base.strip()
        if base in _WRAPPERS and args:
            s = _first_arg(args).strip()
            continue
        s = base
        break
    paren = s.find("(")
    if paren > 0:
        s = s[:paren]
    s = s.strip() or name.strip()[:MAX_LEN]
    return s[:MAX_LEN]


def normalize_names(names: pl.Series) -> pl.Series:
    """Vectorised over unique values: ``normalize_kernel_name`` for a Series of names."""
    uniq = names.unique().drop_nulls()
    mapping = {n: normalize_kernel_name(n) for n in uniq.to_list()}
    return names.replace_strict(mapping, default=None, return_dtype=pl.String)


__all__ = ["MAX_LEN", "MAX_PARSED_NAME", "demangle", "normalize_kernel_name", "normalize_names"]
