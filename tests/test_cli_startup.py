"""CLI start-up: a command imports only its own module (the ``tracekit`` group loads a command's
module when it runs), `--help` imports no polars, `ingest -q` no rich, and reading a finalized
run does not import the finalize chain."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import click

from tracekit.cli.common import COMMAND_MODULES, cli, load_commands

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def test_command_table_names_every_command_and_its_module() -> None:
    for module in set(COMMAND_MODULES.values()):
        load_commands(module)
    assert set(cli.commands) == set(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        cmd = cli.commands[name]
        assert isinstance(cmd, click.Command)
        mod = importlib.import_module(module)
        assert cmd.callback is not None and cmd.callback.__module__ == mod.__name__, name


def _modules_after(args: list[str]) -> tuple[int, set[str]]:
    """Exit status and sys.modules of a process that ran ``tracekit ARGS`` (main() ends the process after
    the atexit handlers: tracekit.process_exit)."""
    code = ("import atexit, json, sys\nfrom tracekit.cli import main\nsys.argv = ['tracekit', *json.loads(sys.argv[1])]\n"
            "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True)
    mods = json.loads(proc.stderr.strip().splitlines()[-1])
    return proc.returncode, set(mods)


def test_help_lists_every_command_without_polars() -> None:
    proc = subprocess.run([sys.executable, "-m", "tracekit", "--help"], capture_output=True, text=True, check=True)
    for name in COMMAND_MODULES:
        assert f"  {name} " in proc.stdout, name
    rc, mods = _modules_after(["--help"])
    assert rc == 0 and "polars" not in mods and "numpy" not in mods


def test_ingest_quiet_imports_only_what_it_uses(tmp_path: Path) -> None:
    traces = sorted((SAMPLES / "sglang-shapes-h200x2").glob("*.trace.json.gz"))
    rc, mods = _modules_after(["ingest", "-q", *map(str, traces), "-o", str(tmp_path / "run.parquet")])
    assert rc == 0 and (tmp_path / "run.parquet").exists()
    others = {m for m in set(COMMAND_MODULES.values()) if m != "tracekit.cli.ingest"}
    assert not others & mods, others & mods
    assert "rich" not in mods and "tracekit.export" not in mods and "tracekit.render.attribute" not in mods


def test_attribute_on_a_finalized_run_imports_no_finalize_chain(tmp_path: Path) -> None:
    from tracekit.store import load_run, write_run

    run = load_run(SAMPLES / "cpu8-builtin" / "run.parquet")
    path = tmp_path / "run.parquet"
    write_run(run.events, path, run.manifest)
    rc, mods = _modules_after(["attribute", str(path)])
    assert rc == 0
    assert "tracekit.finalize.version" in mods
    assert "tracekit.finalize.pipeline" not in mods  # the chain: only for a run of an older version
    assert not {m for m in set(COMMAND_MODULES.values()) if m != "tracekit.cli.analyses"} & mods
