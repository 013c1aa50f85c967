"""The exporter registry: one entry per export format, chosen by ``--format NAME`` or the output's suffix.

Each entry names its writer, its size estimate and its checker by ``"module:function"``
(imported only when used), so ``export_events``, the CLI's ``--format`` choice and
``validate_trace`` never name a format. To add a format, write its module (a writer
``(layout, binary file, WriteContext) -> bytes written`` and an ``estimate_size(layout)``) and
add one ``ExportFormat`` to ``FORMATS`` below.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from tracekit.export.layout import Layout
    from tracekit.export.validate import TraceCheck


@dataclass(frozen=True)
class WriteContext:
    """What a writer may need besides the layout: the destination and where it came from."""

    path: str
    selection: str
    source: str


@dataclass(frozen=True)
class ExportFormat:
    name: str  # --format value, ExportResult.format
    title: str  # for help texts
    suffixes: tuple[str, ...]  # lower-case; the first is the one help texts show
    writer: str  # "module:function" (Layout, IO[bytes], WriteContext) -> int
    estimator: str  # "module:function" (Layout) -> int bytes
    checker: str  # "module:function" (path, *, collect) -> TraceCheck
    magic: tuple[bytes, ...]  # first bytes of a file in this format (validate-trace sniffs them)

    def write(self, lay: Layout, out: IO[bytes], ctx: WriteContext) -> int:
        fn: Callable[[Layout, IO[bytes], WriteContext], int] = _load(self.writer)
        return fn(lay, out, ctx)

    def estimate_size(self, lay: Layout) -> int:
        fn: Callable[[Layout], int] = _load(self.estimator)
        return fn(lay)

    def check(self, path: str | os.PathLike[str], *, collect: bool = False) -> TraceCheck:
        fn: Callable[..., TraceCheck] = _load(self.checker)
        return fn(path, collect=collect)


def _load(ref: str) -> Any:
    mod, _, attr = ref.partition(":")
    return getattr(importlib.import_module(mod), attr)


FORMATS: Final[tuple[ExportFormat, ...]] = (
    ExportFormat(
        "perfetto", "Perfetto protobuf", (".pftrace", ".perfetto-trace", ".perfetto", ".pb", ".proto"),
        writer="tracekit.export.perfetto:write", estimator="tracekit.export.perfetto:estimate_size",
        checker="tracekit.export.validate:validate_perfetto", magic=(b"\x0a",),
    ),
    ExportFormat(
        "json", "Chrome JSON", (".json", ".json.gz"),
        writer="tracekit.export.chrome:write", estimator="tracekit.export.chrome:estimate_size",
        checker="tracekit.export.validate:validate_chrome", magic=(b"\x1f\x8b", b"{", b"["),
    ),
)


def format_names() -> list[str]:
    return [f.name for f in FORMATS]


def get_format(name: str) -> ExportFormat:
    for f in FORMATS:
        if f.name == name:
            return f
    raise ValueError(f"unknown format {name!r} ({', '.join(format_names())})")


def format_for(path: str | os.PathLike[str], fmt: str | None = None) -> ExportFormat:
    """The format named ``fmt``, else the one whose suffix ``path`` ends with. Raises ValueError."""
    if fmt is not None:
        return get_format(fmt)
    name = str(path).lower()
    for f in sorted(FORMATS, key=lambda f: -max(len(s) for s in f.suffixes)):
        if name.endswith(f.suffixes):
            return f
    shown = ", ".join(s for f in FORMATS for s in f.suffixes[:2])
    raise ValueError(f"cannot tell the format from {str(path)!r}: use {shown}, or --format")


def format_of_bytes(head: bytes) -> ExportFormat | None:
    """The format whose magic bytes ``head`` (a file's first bytes) starts with."""
    for f in FORMATS:
        if head.startswith(f.magic):
            return f
    return None


__all__ = ["FORMATS", "ExportFormat", "WriteContext", "format_for", "format_names", "format_of_bytes", "get_format"]
