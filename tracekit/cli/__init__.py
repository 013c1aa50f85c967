"""The tracekit command line: thin modules over the library, one per command group.

Usage errors exit 2 (click), bad data exits 1 with one line naming the file and
rank, no traceback unless --debug.

Every command module below registers its commands on the ``tracekit`` group
(tracekit.cli.common); add a command to the module of its part of the project:
ingest (ingest, info), capture, analyses (attribute, gap), export (export,
validate-trace), forensics (spec, align, diff, ranks), report (report, merge).
"""

from __future__ import annotations

from tracekit.cli import analyses, capture, export, forensics, ingest, report  # noqa: F401  (registers the commands)
from tracekit.cli.common import cli

# --- sglang (integration) ---
# The integration's commands (sglang-capture, sglang-launch, sglang-bootstrap, sglang-check)
# live beside it in tracekit.collectors.sglang.commands (no torch or sglang import at load).
from tracekit.collectors.sglang.commands import COMMANDS as _SGLANG_COMMANDS

for _cmd in _SGLANG_COMMANDS:
    cli.add_command(_cmd)


def main() -> None:
    from tracekit._alloc import return_freed_memory

    return_freed_memory()  # before polars loads (docs/ingest.md, "Speed and memory")
    cli(prog_name="tracekit")


if __name__ == "__main__":
    main()
