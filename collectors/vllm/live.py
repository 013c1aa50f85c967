"""Capture every rank of a live vLLM server: ``tracekit capture --ranks all --vllm URL --trace-dir DIR``.

The server runs with vLLM's torch profiler configured (``--profiler-config '{"profiler": "torch",
"torch_profiler_dir": DIR}'``) and, for tracekit's phase ranges, ``TRACEKIT_VLLM=1`` in its
environment (the ``vllm.general_plugins`` entry point installs the hooks in every worker; they
emit ``record_function`` ranges while the profiler records). Without the hooks the trace still
has vLLM's own step annotations, which ingest maps to phases.

1. ``GET /v1/models``: the served model.
2. ``--concurrency`` requests unprofiled (a fresh server's first ones carry its start-up work),
   then ``POST /start_profile``, then the load: ``--requests`` ``POST /v1/completions`` with random
   prompt token ids (greedy, ``ignore_eos``), ``--concurrency`` in flight, then ``POST
   /stop_profile``.
3. Collect: every worker writes ``rank<N>.<ns>.pt.trace.json.gz`` into DIR (the front end its own
   ``*.async_llm.*`` trace, left out); wait until one complete new file per rank is there.
4. Ingest them (tracekit.ingest) and write the run with the capture's load and the server's
   ``config.json`` where it is a local directory (for ``tracekit sol``).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

from tracekit.errors import ConfigError, TracekitError

RANK_TRACE = re.compile(r"^rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
LOAD_DEFAULTS = {"requests": 16, "input_len": 32, "output_len": 32, "concurrency": 4}


def _call(base: str, route: str, body: dict[str, Any] | None = None, timeout: float = 300.0) -> Any:
    import urllib.error

    from tracekit.collectors.sglang.live import _request  # the one HTTP helper of the live captures

    try:
        status, data = _request(base + route, body, timeout=timeout)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise TracekitError(f"vLLM server unreachable ({getattr(exc, 'reason', exc)})", path=base) from None
    if status != 200:
        raise TracekitError(f"{route}: HTTP {status}: {data[:200].decode(errors='replace')}", path=base)
    try:
        return json.loads(data) if data.strip() else {}
    except (json.JSONDecodeError, RecursionError):
        raise TracekitError(f"{route} did not return JSON (is this a vLLM server?)", path=base) from None


def _stop_profile(base: str) -> str | None:
    """``/stop_profile``, asked again once if the server fails it (seen on the loaded 2-core box: HTTP 500
    "Call to profile method failed: cancelled" from vLLM's engine core); None when it stopped, else the
    server's error (the rank traces it may still have written are then looked for all the same)."""
    error = None
    for _ in range(2):
        try:
            _call(base, "/stop_profile", {})
            return None
        except TracekitError as exc:
            error = exc.message
    return error


def rank_traces(trace_dir: Path, before: set[Path]) -> dict[int, Path]:
    """The newest complete rank trace per rank written since ``before``."""
    from tracekit.collectors.sglang.live import _complete

    out: dict[int, Path] = {}
    for p in sorted(trace_dir.rglob("rank*.pt.trace.json*")):
        m = RANK_TRACE.match(p.name)
        if m and p not in before and _complete(p):
            out[int(m.group(1))] = p
    return out


def capture_live(opts: Mapping[str, Any]) -> None:
    """``tracekit capture --ranks all --vllm URL --trace-dir DIR`` (collectors/engines.py's live entry)."""
    if opts["ranks_opt"] != "all":
        raise click.UsageError("--vllm captures every rank: use --ranks all (and --world N to name the rank count)")
    if not opts.get("trace_dir"):
        raise ConfigError("--vllm needs --trace-dir DIR: the server's profiler_config torch_profiler_dir (this host)")
    from tracekit.outputs import claimed_output
    from tracekit.render.text import echo

    base, out = str(opts["vllm_url"]).rstrip("/"), str(opts["out"])
    load = {k: opts.get(k) or v for k, v in LOAD_DEFAULTS.items()}
    tdir = Path(opts["trace_dir"])
    if not tdir.is_dir():
        raise ConfigError(f"--trace-dir {tdir}: no such directory (the server's torch_profiler_dir)")
    with claimed_output(out):
        models = _call(base, "/v1/models", timeout=30).get("data") or []
        if not models:
            raise TracekitError("/v1/models lists no model", path=base)
        model = str(models[0]["id"])
        rng = random.Random(1234)

        def prompts(n: int) -> list[list[int]]:
            return [[rng.randrange(3, 1000) for _ in range(int(load["input_len"]))] for _ in range(n)]

        def one(ids: list[int]) -> int:
            res = _call(base, "/v1/completions", {"model": model, "prompt": ids, "max_tokens": load["output_len"],
                                                   "temperature": 0, "ignore_eos": True})
            return int((res.get("usage") or {}).get("completion_tokens") or 0)

        # unprofiled first: a fresh server's first requests (its lazy start-up work) made a 60 MB trace per rank here
        with ThreadPoolExecutor(int(load["concurrency"])) as pool:
            list(pool.map(one, prompts(int(load["concurrency"]))))
        before = set(tdir.rglob("rank*.pt.trace.json*"))
        started = time.time_ns()
        _call(base, "/start_profile", {})
        echo(f"capture: vLLM profiler started; {load['requests']} requests, {load['concurrency']} in flight", err=True)
        with ThreadPoolExecutor(int(load["concurrency"])) as pool:
            tokens = sum(pool.map(one, prompts(int(load["requests"]))))
        stop_error = _stop_profile(base)
        if stop_error is None:
            echo(f"capture: vLLM profiler stopped ({tokens} tokens generated); waiting for the rank traces in {tdir}",
                 err=True)
        else:  # the workers may still have written their traces: the wait below decides
            echo(f"capture: {stop_error} (twice); waiting for the rank traces in {tdir} all the same", err=True)
        world = opts.get("world")
        deadline = time.monotonic() + float(opts["timeout_s"])
        found: dict[int, Path] = {}
        while time.monotonic() < deadline:
            found = rank_traces(tdir, before)
            if found and (world is None or len(found) >= world) and found == rank_traces(tdir, before):
                time.sleep(2.0)  # a rank whose file is still being written: look once more
                if rank_traces(tdir, before) == found:
                    break
            time.sleep(1.0)
        if not found or (world is not None and len(found) < world):
            raise TracekitError(f"no complete rank trace from every rank in {opts['timeout_s']:g} s "
                                f"(found ranks {sorted(found)}); is torch_profiler_dir {tdir}?"
                                + ("" if stop_error is None else f" ({stop_error})"), path=base)
        from tracekit.collectors.sglang.live import model_config
        from tracekit.ingest import ingest_traces
        from tracekit.store import write_run

        run = ingest_traces([str(p) for _, p in sorted(found.items())])
        man = dict(run.manifest)
        man["capture"] = {"mode": "vllm-live", "profile_mode": "full", "url": base, "model": model,
                          "load": load, "tokens": tokens, "trace_dir": str(tdir), "started_unix_ns": started,
                          "traces": {str(r): p.name for r, p in sorted(found.items())}}
        mcfg = model_config(model)
        if mcfg is not None:
            man["capture"]["model_config"] = mcfg
        path = write_run(run.events, out, man)
    echo(f"wrote {path} ({len(found)} rank(s): {', '.join(p.name for _, p in sorted(found.items()))})")
