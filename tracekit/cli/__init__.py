"""The tracekit command line: thin modules over the library, one per command group.

Usage errors exit 2 (click), bad data exits 1 with one line naming the file and
rank, no traceback unless --debug.

Every command module registers its commands on the ``tracekit`` group
(tracekit.cli.common) and is imported when one of its commands runs; add a command to the
module of its part of the project and to ``COMMAND_MODULES``:
ingest (ingest, info), capture, analyses (attribute, gap), export (export,
validate-trace), forensics (spec, align, upgrade, diff, ranks), report (report, merge), sol (sol), logs (logs).
"""

from __future__ import annotations

from tracekit.cli.common import cli

# Each command module registers its commands on the ``tracekit`` group when it is imported; the
# group imports a command's module when that command runs (tracekit.cli.common.COMMAND_MODULES).


def main() -> None:
    """The ``tracekit`` program (console script and ``python -m tracekit``): the command, then the process
    ends without the interpreter's teardown (``tracekit.process_exit.end_process``)."""
    from tracekit._alloc import return_freed_memory
    from tracekit.process_exit import end_process, stdout_error_line

    return_freed_memory()  # before polars loads (docs/ingest.md, "Speed and memory")
    try:
        cli(prog_name="tracekit")  # click's standalone mode: always ends in SystemExit
    except SystemExit as exc:
        end_process(exc.code)
    except OSError as exc:  # outside any command (guarded): click's own --version / --help output to a full disk
        end_process(stdout_error_line(exc))
    end_process(0)


if __name__ == "__main__":
    main()
