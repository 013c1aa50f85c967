"""The SGLang integration's commands, registered on the main CLI by tracekit/cli/common.py (COMMAND_MODULES).

``sglang-capture URL`` (also reached as ``tracekit capture --ranks all --sglang URL``),
``sglang-launch -- ARGS``, ``sglang-bootstrap DIR``, ``sglang-check``. Importing this
module imports click only; torch and sglang are imported inside the commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from tracekit.cli_errors import guarded
from tracekit.errors import TracekitError
from tracekit.render.text import echo

PROFILE_HELP = ("full: SGLang's profiler with CPU+CUDA activities; lite: CUDA activity only + tracekit's own phase "
                "ranges (no CPU ops); timing: no profiler, phase times per cycle by CUDA events (no kernels). "
                "auto: full (lite and timing need tracekit's hooks in every rank).")


@click.command("sglang-capture")
@click.argument("url")
@click.option("-o", "--out", type=click.Path(dir_okay=False), default="run.parquet", show_default=True)
@click.option("--requests", type=click.IntRange(1), default=64, show_default=True, help="Most /generate requests to send.")
@click.option("--input-len", type=click.IntRange(1), default=512, show_default=True, help="Prompt tokens per request (synthetic ids).")
@click.option("--output-len", type=click.IntRange(1), default=256, show_default=True, help="max_new_tokens per request.")
@click.option("--concurrency", type=click.IntRange(1), default=8, show_default=True, help="Requests in flight.")
@click.option("--cycles", type=click.IntRange(1), default=20, show_default=True,
              help="Scheduler iterations to profile on every rank (/start_profile num_steps; one speculative cycle each).")
@click.option("--world", "world", type=click.IntRange(1), default=None, help="Rank files to expect [default: tp_size x pp_size from the server].")
@click.option("--trace-dir", type=click.Path(file_okay=False), default=None,
              help="Where the server writes rank traces (same host) [default: <out>-sglang-traces].")
@click.option("--manifest-dir", type=click.Path(file_okay=False), default=None,
              help="The ranks' TRACEKIT_SGLANG_DIR: rank manifests, and the lite/timing window files [default: $TRACEKIT_SGLANG_DIR or <tmp>/tracekit-sglang].")
@click.option("--timeout", "timeout_s", type=click.FloatRange(1), default=300.0, show_default=True,
              help="Seconds to wait for every rank's trace file.")
@click.option("--allow-no-hooks", is_flag=True, help="Accept ranks without tracekit hooks (SGLang's own spans only; full mode).")
@click.option("--profile", "profile", type=click.Choice(["auto", "full", "lite", "timing"]), default="auto",
              show_default=True, help=PROFILE_HELP)
@guarded
def sglang_capture_cmd(url: str, out: str, requests: int, input_len: int, output_len: int, concurrency: int,
                       cycles: int, world: int | None, trace_dir: str | None, manifest_dir: str | None,
                       timeout_s: float, allow_no_hooks: bool, profile: str) -> None:
    """Capture every rank of a live SGLang server at URL (http://HOST:PORT) into one run.parquet."""
    sglang_capture(url, out, requests=requests, input_len=input_len, output_len=output_len, concurrency=concurrency,
                    cycles=cycles, world=world, trace_dir=trace_dir, manifest_dir=manifest_dir, timeout_s=timeout_s,
                    allow_no_hooks=allow_no_hooks, profile=profile)


# The capture command's SGLang group (collectors/engines.py); defaults of the shared load options are
# SGLang's when not given (vLLM on a CPU box takes smaller ones).
LOAD_DEFAULTS = {"requests": 64, "input_len": 512, "output_len": 256, "concurrency": 8}
CAPTURE_OPTIONS = [
    click.Option(["--sglang", "sglang_url"], default=None, metavar="URL",
                 help="Capture a live SGLang server (http://HOST:PORT) instead of the built-in workload; see sglang-capture."),
    click.Option(["--requests"], type=click.IntRange(1), default=None,
                 help="Requests to send [default: 64 with --sglang; --engine vllm: as many as the steps need]."),
    click.Option(["--input-len"], type=click.IntRange(1), default=None,
                 help="Prompt tokens per request [default: 512 with --sglang, 32 with --engine vllm]."),
    click.Option(["--output-len"], type=click.IntRange(1), default=None,
                 help="New tokens per request [default: 256 with --sglang, 64 with --engine vllm]."),
    click.Option(["--concurrency"], type=click.IntRange(1), default=None,
                 help="Requests in flight [default: 8 with --sglang, 4 with --engine vllm]."),
]


def capture_live(opts: Mapping[str, Any]) -> None:
    """``tracekit capture --ranks all --sglang URL`` (collectors/engines.py's live entry)."""
    if opts["ranks_opt"] != "all":
        raise click.UsageError("--sglang captures every rank: use --ranks all (and --world N to name the rank count)")
    load = {k: opts.get(k) or v for k, v in LOAD_DEFAULTS.items()}
    sglang_capture(opts["sglang_url"], opts["out"], **load, cycles=opts["cycles"], world=opts.get("world"),
                   trace_dir=None, manifest_dir=None, timeout_s=opts["timeout_s"], allow_no_hooks=False,
                   profile=opts["profile"])


def sglang_capture(url: str, out: str, *, requests: int, input_len: int, output_len: int, concurrency: int,
                    cycles: int, world: int | None, trace_dir: str | None, manifest_dir: str | None,
                    timeout_s: float, allow_no_hooks: bool, profile: str = "auto") -> None:
    """The live capture behind ``sglang-capture`` and ``capture --sglang``; ``profile`` ``auto`` is ``full``
    (the one mode that also works without tracekit's hooks: SGLang's own spans)."""
    mode = "full" if profile == "auto" else profile
    if allow_no_hooks and mode != "full":
        raise click.UsageError(f"--allow-no-hooks needs --profile full: {mode} is recorded by tracekit's hooks")
    from tracekit.collectors.sglang.live import (
        LoadConfig,
        run_live_capture,
    )
    from tracekit.outputs import claimed_output

    load = LoadConfig(requests=requests, input_len=input_len, output_len=output_len, concurrency=concurrency)
    with claimed_output(out):  # the output rule of every command (README), and one writer per output
        res = run_live_capture(url, out, load=load, num_steps=cycles, ranks=world, trace_dir=trace_dir,
                               manifest_dir=manifest_dir, timeout_s=timeout_s, require_hooks=not allow_no_hooks,
                               mode=mode, log=lambda m: echo(m, err=True))
    for note in res.notes:
        echo(f"note: {note}", err=True)
    where = "no profiler ran" if res.mode == "timing" else f"rank traces in {res.trace_dir}"
    echo(f"wrote {res.path} (profile mode {res.mode}): ranks {', '.join(str(r) for r in res.ranks)}; "
               f"{res.load.ok} request(s) done, {res.load.failed} failed; {where}")
    from tracekit.collectors.sglang.modes import CANNOT_GIVE

    echo(f"profile mode {res.mode} cannot give: {CANNOT_GIVE[res.mode]}")


@click.command("sglang-launch", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
@guarded
def sglang_launch_cmd(server_args: tuple[str, ...]) -> None:
    """Start SGLang's HTTP server with tracekit's hooks in every rank (sglang 0.5.8+).

    \b
    tracekit sglang-launch -- --model-path M --tp 8 --speculative-algorithm EAGLE3 ...
    """
    import importlib.util

    if importlib.util.find_spec("sglang") is None:
        raise TracekitError("sglang is not installed in this Python environment (pip install 'tracekit[sglang]')")
    from tracekit.collectors.sglang.launch import launch

    launch(list(server_args))


@click.command("sglang-bootstrap")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--pth", is_flag=True, help="Write tracekit-sglang.pth for a site-packages directory instead of sitecustomize.py.")
@guarded
def sglang_bootstrap_cmd(directory: str, pth: bool) -> None:
    """Write the opt-in bootstrap that hooks SGLang in every process (any version; TRACEKIT_SGLANG=1)."""
    from tracekit.collectors.sglang.autoload import (
        write_pth,
        write_sitecustomize,
    )

    path = write_pth(directory) if pth else write_sitecustomize(directory)
    echo(f"wrote {path}")
    if pth:
        echo("active for this interpreter's processes when TRACEKIT_SGLANG=1 is set")
    else:
        import os.path

        echo(f"start the server with: TRACEKIT_SGLANG=1 PYTHONPATH={os.path.abspath(directory)}${{PYTHONPATH:+:$PYTHONPATH}} "
                   "python -m sglang.launch_server ...")


@click.command("sglang-check")
@click.option("--version", "version", default=None, help="SGLang version [default: the installed one].")
@click.option("--source", type=click.Path(file_okay=False, exists=True), default=None,
              help="A directory holding an sglang package (e.g. an unpacked wheel) to check the hook table against.")
@guarded
def sglang_check_cmd(version: str | None, source: str | None) -> None:
    """Show which SGLang functions tracekit hooks in a version (and check them against its source)."""
    from tracekit.collectors.sglang.contract import check_source
    from tracekit.collectors.sglang.hooktable import (
        installed_version,
        specs_for,
    )

    ver = version or installed_version()
    if ver is None:
        raise click.UsageError("sglang is not installed here: pass --version")
    try:
        rows = specs_for(ver)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--version") from None
    echo(f"sglang {ver}: {len(rows)} hook target(s)")
    for s in rows:
        echo(f"  {s.role:<13} {s.target}")
    if source is not None:
        problems = check_source(source, ver)
        for p in problems:
            echo(f"  MISSING {p}")
        if problems:
            raise TracekitError(f"{len(problems)} hook target(s) do not match the source", path=source)
        echo(f"all targets and fields found in {source}")


COMMANDS = [sglang_capture_cmd, sglang_launch_cmd, sglang_bootstrap_cmd, sglang_check_cmd]
