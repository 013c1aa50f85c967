"""``tracekit sglang-launch -- <launch_server args>``: SGLang 0.5.8 - 0.5.10 (works on any version
whose ``launch_server`` takes ``run_scheduler_process_func``).

SGLang spawns one scheduler process per rank with ``mp.set_start_method("spawn")``
and ``target=run_scheduler_process_func``; a spawned target must be picklable,
so the wrapper is this module-level function. It installs tracekit's hooks in
the rank process, then runs SGLang's own ``run_scheduler_process`` with the
arguments it was given (its signature changes between versions: passed through).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from tracekit.collectors.sglang import rankinfo, runtime


def install_in_rank(entry: str) -> runtime.InstallReport:
    """Install the hooks in this process by direct patching; the rank manifest follows at the first call."""
    runtime.RECORDER.on_first_call = rankinfo.on_first_call(entry)
    return runtime.install_direct(entry=entry)


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Picklable ``run_scheduler_process_func``: hooks first, then SGLang's scheduler."""
    from sglang.srt.managers import scheduler

    if runtime.enabled():
        install_in_rank("launcher")
    return scheduler.run_scheduler_process(*args, **kwargs)


def launch(argv: Sequence[str]) -> None:
    """Parse SGLang's own server arguments and start its HTTP server with the wrapper."""
    os.environ.setdefault("TRACEKIT_SGLANG", "1")
    from sglang.srt.entrypoints.http_server import launch_server
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(list(argv))
    launch_server(server_args, run_scheduler_process_func=run_scheduler_process)
