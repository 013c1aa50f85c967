"""Kernel-name normalisation for grouping (the full name stays in the ``name`` column).

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
def normalize_kernel_name(name: str) -> str:
    """A short, stable grouping key for a kernel name.

    >>> normalize_kernel_name("void at::native::vectorized_elementwise_kernel<4, F, A>(int, F, A)")
    'at::native::vectorized_elementwise_kernel'
    >>> normalize_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
    'ncclDevKernel_AllReduce_Sum_bf16_RING_LL'
    """
    s = _SPACE.sub(" ", name).replace("(anonymous namespace)", "anon").strip()
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


__all__ = ["MAX_LEN", "normalize_kernel_name", "normalize_names"]
