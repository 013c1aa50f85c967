"""The CLI process's allocator setting (tracekit/_alloc.py): set before polars loads, a user's value kept."""

from __future__ import annotations

import os
import subprocess
import sys

from tracekit._alloc import JEMALLOC_CONF, JEMALLOC_CONF_VAR, return_freed_memory


def test_user_value_is_kept() -> None:
    env = {JEMALLOC_CONF_VAR: "dirty_decay_ms:5000"}
    return_freed_memory(env)
    assert env[JEMALLOC_CONF_VAR] == "dirty_decay_ms:5000"
    empty: dict[str, str] = {}
    return_freed_memory(empty)
    assert empty == {JEMALLOC_CONF_VAR: JEMALLOC_CONF}


def test_cli_sets_it_before_polars_loads() -> None:
    # main() must run before anything imports polars: jemalloc reads the variable when polars' library loads
    # main() ends the process (tracekit.process_exit.end_process) after running the atexit handlers
    code = (
        "import atexit, os, sys\n"
        "import tracekit.cli as cli\n"
        "assert 'polars' not in sys.modules, 'tracekit.cli imports polars'\n"
        "sys.argv = ['tracekit', '--help']\n"
        f"atexit.register(lambda: print(os.environ.get({JEMALLOC_CONF_VAR!r})))\n"
        "cli.main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != JEMALLOC_CONF_VAR}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip().splitlines()[-1] == JEMALLOC_CONF
