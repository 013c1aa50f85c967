"""``tracekit`` as a real process held just before it publishes an output (the signal tests):

    python tests/pause_cli.py READY_FILE COMMAND ...

The output's temp file is complete when ``READY_FILE`` appears; the process then waits for a signal
(``signal.pause``) and goes on as tracekit does when one comes. Nothing of it is in tracekit."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any


def main() -> None:
    ready, args = Path(sys.argv[1]), sys.argv[2:]

    import tracekit.outputs as outputs

    def held(tmp: Any, dest: Any) -> None:
        ready.write_text(str(tmp))
        while True:
            signal.pause()  # the handler raises (tracekit.outputs.Stopped): the writer unwinds from here

    outputs.publish = held  # type: ignore[assignment]
    import tracekit.store as store

    store.publish = held  # type: ignore[attr-defined]
    sys.argv = ["tracekit", *args]
    from tracekit.cli import main as tracekit_main

    tracekit_main()


if __name__ == "__main__":
    main()
