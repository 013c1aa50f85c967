"""Capture every rank of a live SGLang server: load, profile window, collect, ingest, merge.

``run_live_capture(url, out, ...)``:

1. ``GET /server_info`` (``/get_server_info`` before 0.5.x had it): version, ``tp_size``
   and ``pp_size`` give the number of rank files to expect.
2. Load: ``POST /generate`` with synthetic token ids (``input_ids``, exactly
   ``input_len`` each) and ``sampling_params = {max_new_tokens, temperature: 0,
   ignore_eos: true}`` from ``concurrency`` threads, kept running until the
   window has closed (``requests`` bounds the total).
3. Window, by profile mode (modes.py):
   ``full``: ``POST /start_profile {output_dir, num_steps, activities: [CPU, GPU]}``
   (fields of ``ProfileReqInput`` <= 0.5.12 and ``ProfileReq`` 0.5.23). Every
   scheduler process starts torch.profiler on the same iteration, stops after
   ``num_steps`` forward iterations (one speculative cycle each) and writes
   ``{profile_id}-TP-{r}[...].trace.json.gz``. tracekit's hooks (plugin /
   launcher / import hook) put their phase ranges and late facts inside that
   window because they emit ``record_function`` while a profiler is active.
   SGLang already fans the request out to all ranks and stops them in step.
   ``lite``: tracekit's own window first (window.py: a control file in the ranks'
   ``TRACEKIT_SGLANG_DIR``; every rank acknowledges once its hooks record), then
   ``/start_profile`` with ``activities: [GPU]`` and no stacks; after the rank files,
   the window is stopped and each rank's recorded ranges are collected.
   ``timing``: tracekit's window alone, ``num_steps`` cycles, no profiler.
4. Collect: wait until a complete (fully decodable) file per rank is there;
   a rank whose file never appears is an error naming it (``timeout_s``).
5. Ingest (tracekit.ingest; lite: joined with the recorded ranges, timing: the
   recorded ranges alone) and write ``out`` with the capture config (``profile_mode``)
   and each rank's environment manifest (rankinfo: what the rank process really saw).

Errors are TracekitError, one line: server unreachable, profile refused, rank
file missing, server without tracekit hooks (no ``tracekit:`` ranges in a rank's
trace; ``require_hooks=False`` accepts SGLang's own spans only).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.sglang import rankinfo
from tracekit.errors import TracekitError

if TYPE_CHECKING:
    from tracekit.collectors.sglang.window import WindowHandle

RANK_FILE = re.compile(r"(?<![A-Za-z])TP-(\d+)(?![0-9]).*\.trace\.json(\.gz)?$")
HOOK_PREFIX = "tracekit:"


@dataclass
class LoadConfig:
    requests: int = 64
    input_len: int = 512
    output_len: int = 256
    concurrency: int = 8
    seed: int = 0


@dataclass
class LoadStats:
    sent: int = 0
    ok: int = 0
    failed: int = 0
    first_error: str | None = None
    completion_tokens: int = 0


@dataclass
class CaptureResult:
    path: Path
    trace_dir: Path
    ranks: list[int]
    load: LoadStats
    notes: list[str] = field(default_factory=list)
    mode: str = "full"


def _request(url: str, body: dict[str, Any] | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read() if exc.fp is not None else b""


def model_config(model_path: Any) -> dict[str, Any] | None:
    """The server's ``config.json`` when ``model_path`` is a local checkpoint directory (None otherwise: a hub id
    whose files this host does not have, or an unreadable file)."""
    if not isinstance(model_path, str) or not model_path:
        return None
    p = Path(model_path) / "config.json"
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def server_info(base: str, timeout: float = 10.0) -> dict[str, Any]:
    """``/server_info`` (or ``/get_server_info``) as a dict; TracekitError when unreachable."""
    last = ""
    for route in ("/server_info", "/get_server_info"):
        try:
            status, body = _request(base + route, timeout=timeout)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TracekitError(f"SGLang server unreachable ({reason})", path=base) from None
        if status == 200:
            try:
                info = json.loads(body)
            except (json.JSONDecodeError, RecursionError):
                raise TracekitError(f"{route} did not return JSON (is this an SGLang server?)", path=base) from None
            if isinstance(info, dict):
                return info
        last = f"{route}: HTTP {status}"
    raise TracekitError(f"no server info ({last}; is this an SGLang server?)", path=base)


def expected_ranks(info: dict[str, Any], ranks: int | None) -> int:
    if ranks is not None:
        return ranks
    tp = info.get("tp_size")
    pp = info.get("pp_size") or 1
    if not isinstance(tp, int) or not isinstance(pp, int):
        raise TracekitError("server info has no tp_size: pass the number of ranks explicitly (--world N)")
    return tp * pp


class _Load:
    """Closed-loop load: ``concurrency`` threads, each sending one request after the other."""

    def __init__(self, base: str, cfg: LoadConfig, vocab: int) -> None:
        self.base = base
        self.cfg = cfg
        self.vocab = max(2, vocab)
        self.stats = LoadStats()
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._worker, args=(i,), daemon=True) for i in range(max(1, cfg.concurrency))]

    def _next(self) -> bool:
        with self._lock:
            if self.stop.is_set() or self.stats.sent >= self.cfg.requests:
                return False
            self.stats.sent += 1
            return True

    def _worker(self, idx: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + idx)
        while self._next():
            ids = [rng.randrange(1, self.vocab) for _ in range(self.cfg.input_len)]
            body = {
                "input_ids": ids,
                "sampling_params": {"max_new_tokens": self.cfg.output_len, "temperature": 0.0, "ignore_eos": True},
            }
            try:
                status, raw = _request(self.base + "/generate", body, timeout=600.0)
                ok = status == 200
                err = None if ok else f"HTTP {status}: {raw[:200]!r}"
                if ok:
                    meta = json.loads(raw).get("meta_info", {})
                    toks = meta.get("completion_tokens", 0) if isinstance(meta, dict) else 0
            except (urllib.error.URLError, OSError, TimeoutError, json.JSONDecodeError, RecursionError) as exc:
                ok, err, toks = False, f"{exc.__class__.__name__}: {exc}", 0
            with self._lock:
                if ok:
                    self.stats.ok += 1
                    self.stats.completion_tokens += int(toks) if isinstance(toks, int) else 0
                else:
                    self.stats.failed += 1
                    self.stats.first_error = self.stats.first_error or err

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def finish(self, timeout: float) -> None:
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _complete(path: Path) -> bool:
    """A rank file is complete when it decodes fully (gzip) and parses as JSON."""
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        doc = json.loads(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(doc, dict) and "traceEvents" in doc


def rank_files(trace_dir: Path) -> dict[int, list[Path]]:
    out: dict[int, list[Path]] = {}
    if not trace_dir.is_dir():
        return out
    for p in sorted(trace_dir.iterdir()):
        m = RANK_FILE.search(p.name)
        if m and not p.name.startswith("merged-"):
            out.setdefault(int(m.group(1)), []).append(p)
    return out


def wait_for_ranks(trace_dir: Path, world: int, timeout_s: float, poll_s: float = 0.5,
                   on_idle: Callable[[], None] | None = None) -> dict[int, list[Path]]:
    """Wait until every rank 0..world-1 has complete trace files; TracekitError naming the missing ones."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = rank_files(trace_dir)
        done = {r: fs for r, fs in files.items() if fs and all(_complete(f) for f in fs)}
        if all(r in done for r in range(world)):
            return {r: done[r] for r in range(world)}
        if time.monotonic() >= deadline:
            missing = [r for r in range(world) if r not in done]
            partial = [r for r in missing if r in files]
            what = ", ".join(f"rank {r}" + (" (incomplete file)" if r in partial else "") for r in missing)
            raise TracekitError(f"trace file never appeared for {what} after {timeout_s:.0f}s", path=str(trace_dir))
        if on_idle is not None:
            on_idle()
        time.sleep(poll_s)


def check_hooks(events: Any, world: int, trace_dir: Path) -> None:
    """Every rank must carry tracekit ranges; names the ranks that do not."""
    import polars as pl

    hooked = set(
        events.filter(pl.col("name").str.starts_with(HOOK_PREFIX)).get_column("rank").unique().to_list()
    )
    lacking = [r for r in range(world) if r not in hooked]
    if len(lacking) == world:
        raise TracekitError(
            "the server was started without tracekit hooks (no tracekit: ranges in any rank trace); "
            "start it with the plugin (sglang >= 0.5.12), `tracekit sglang-launch` or TRACEKIT_SGLANG=1 "
            "with the bootstrap, or pass --allow-no-hooks",
            path=str(trace_dir),
        )
    if lacking:
        raise TracekitError(
            f"ranks {lacking} have no tracekit ranges (hooks not installed in those scheduler processes)",
            path=str(trace_dir),
        )


def _window_error(mode: str, what: str, ranks: list[int], mdir: Path, timeout_s: float) -> TracekitError:
    return TracekitError(
        f"ranks {ranks} {what} tracekit's {mode} window within {timeout_s:.0f}s (hooks not installed in those "
        f"scheduler processes, their TRACEKIT_SGLANG_DIR is not this directory (--manifest-dir), or they ran no cycle)",
        path=str(mdir))


def run_live_capture(
    url: str,
    out: str | Path,
    *,
    load: LoadConfig | None = None,
    num_steps: int = 20,
    ranks: int | None = None,
    trace_dir: str | Path | None = None,
    manifest_dir: str | Path | None = None,
    timeout_s: float = 300.0,
    warmup_s: float = 2.0,
    require_hooks: bool = True,
    mode: str = "full",
    log: Callable[[str], None] | None = None,
) -> CaptureResult:
    """Profile ``num_steps`` scheduler iterations on every rank of the server at ``url`` into ``out``.

    ``mode``: ``full``, ``lite`` or ``timing`` (modes.py says what each records). ``lite`` and
    ``timing`` need tracekit's hooks in every rank (``require_hooks`` applies to ``full`` only).
    """
    from tracekit.collectors.sglang import modes, window
    from tracekit.store import write_run

    if mode not in modes.PROFILE_MODES:
        raise ValueError(f"profile mode must be one of {modes.PROFILE_MODES}, not {mode!r}")
    say = log or (lambda _msg: None)
    base = url.rstrip("/")
    if not re.match(r"^https?://", base):
        base = "http://" + base
    cfg = load or LoadConfig()
    out_path = Path(out)
    mdir = (Path(manifest_dir) if manifest_dir is not None else rankinfo.manifest_dir()).resolve()
    try:
        rankinfo.private_dir(mdir)  # the servers' control directory: this user's alone (rankinfo.private_dir)
    except rankinfo.ControlDirError as exc:
        raise TracekitError(str(exc)) from None
    info = server_info(base)
    world = expected_ranks(info, ranks)
    tdir = Path(trace_dir) if trace_dir is not None else out_path.with_name(out_path.stem + "-sglang-traces")
    tdir = tdir.resolve()
    if mode != "timing":
        tdir.mkdir(parents=True, exist_ok=True)
        if rank_files(tdir):
            raise TracekitError("trace directory already holds rank traces; use an empty one", path=str(tdir))
    raw_vocab = info.get("vocab_size")
    vocab = raw_vocab if isinstance(raw_vocab, int) else 32000
    say(f"server {base}: sglang {info.get('version', '?')}, {world} rank(s); profile mode {mode}"
        + (f"; traces -> {tdir}" if mode != "timing" else ""))
    say(f"profile mode {mode}: {modes.MODE_NOTES[mode]}")

    gen = _Load(base, cfg, vocab)
    gen.start()
    started = time.time_ns()
    win: window.WindowHandle | None = None
    files: dict[int, list[Path]] = {}
    delivered: list[window.RankRanges] = []
    stopped = [False]
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < warmup_s and gen.stats.ok == 0 and gen.stats.failed == 0:
            time.sleep(0.05)
        if gen.stats.failed and not gen.stats.ok:
            raise TracekitError(f"/generate failed: {gen.stats.first_error}", path=base)
        if mode != "full":
            ack_s = min(timeout_s, 60.0)
            # the ranks stop by themselves past every wait below (a capture killed with its window open)
            win = window.open_window(mdir, mode, num_steps if mode == "timing" else None, max_s=ack_s + 2 * timeout_s + 60)
            late = win.wait_acks(world, ack_s)
            _refuse_clashes(win, mdir)
            if late:
                raise _window_error(mode, "did not start", late, mdir, ack_s)
            say(f"tracekit's {mode} window {win.id} recording on every rank")

        def on_idle() -> None:
            # load exhausted before the window closed: flush the profilers / recorders once
            if not gen.alive() and not stopped[0]:
                stopped[0] = True
                if mode != "timing":
                    _request(base + "/stop_profile", {}, timeout=60.0)
                if win is not None:
                    win.stop()

        if mode != "timing":
            body = {"output_dir": str(tdir), "num_steps": int(num_steps), **modes.START_PROFILE[mode]}
            status, raw = _request(base + "/start_profile", body, timeout=60.0)
            if status != 200:
                raise TracekitError(f"/start_profile refused: HTTP {status} {raw[:200].decode(errors='replace').strip()}", path=base)
            say(f"profiling {num_steps} steps on every rank")
            files = wait_for_ranks(tdir, world, timeout_s, on_idle=on_idle)
            say(f"collected {sum(len(v) for v in files.values())} file(s) from {world} rank(s)")
        if win is not None:
            if mode == "lite":
                win.stop()
            else:
                say(f"timing {num_steps} cycles on every rank")
            missing = win.wait_ranges(world, timeout_s, on_idle=on_idle)
            if missing:
                raise _window_error(mode, "did not deliver the phase ranges of", missing, mdir, timeout_s)
            _refuse_clashes(win, mdir)  # a replica that lost its claim after the acks arrived
            delivered = win.ranges(world)
    finally:
        gen.finish(timeout=5.0)
        if win is not None:
            win.stop()  # never leave a window open for the next capture
    man, events = _assemble(mode, files, delivered, world, tdir, require_hooks)
    man["source"] = "capture"
    man["capture"] = {
        "mode": "sglang-live",
        "profile_mode": mode,
        "url": base,
        "sglang_version": info.get("version"),
        "num_steps": num_steps,
        "load": asdict(cfg),
        "load_stats": asdict(gen.stats),
        "trace_dir": str(tdir) if mode != "timing" else None,
        "window": win.id if win is not None else None,
        "server_args": {k: info[k] for k in sorted(info) if k.startswith(("speculative_", "tp_", "pp_", "dp_", "ep_", "cuda_graph", "disable_cuda_graph", "attention_backend", "model_path", "enable_dp_attention"))},
    }
    mcfg = model_config(info.get("model_path"))
    if mcfg is not None:  # the model's config.json, for tracekit sol (read where the server's files are)
        man["capture"]["model_config"] = mcfg
    rank_mans = rankinfo.read_rank_manifests(mdir)
    notes: list[str] = []
    ranks_sec = man.setdefault("ranks", {})
    for r in range(world):
        entry = ranks_sec.setdefault(str(r), {})
        entry["profile_mode"] = mode
        entry["profile_note"] = modes.MODE_NOTES[mode]
        rm = rank_mans.get(r)
        if rm is None:
            notes.append(f"rank {r}: no tracekit rank manifest in {mdir}")
            continue
        for k, v in rm.items():
            entry.setdefault(k, v)
    if notes:
        man.setdefault("notes", []).extend(notes)
    man["capture"]["started_unix_ns"] = started
    path = write_run(events, out_path, man)
    return CaptureResult(path=path, trace_dir=tdir, ranks=list(range(world)), load=gen.stats, notes=notes, mode=mode)


def _refuse_clashes(win: WindowHandle, mdir: Path) -> None:
    """Raise when a TP rank of the window was claimed by two scheduler processes (dp/pp replicas): the
    window's files are named by TP rank, so one replica's ranges would stand for the rank."""
    clash = win.clashes()
    if clash:
        raise TracekitError(
            "; ".join(f"TP rank {r} is claimed by scheduler processes {pids}" for r, pids in sorted(clash.items()))
            + ": tracekit's window files are named by TP rank, so servers with data or pipeline parallel "
            "replicas (dp/pp > 1) cannot be captured in lite or timing mode; use --profile full",
            path=str(mdir))


def _assemble(mode: str, files: dict[int, list[Path]], delivered: list[Any], world: int, tdir: Path,
              require_hooks: bool) -> tuple[dict[str, Any], Any]:
    """(manifest, events) of the run from the ranks' trace files and/or their recorded ranges."""
    from tracekit.collectors.sglang import modes
    from tracekit.store import new_manifest

    win_info = {d.rank: {k: d.info.get(k) for k in ("why", "cycles", "ranges", "cuda_events", "device")}
                for d in delivered}
    if mode == "timing":
        events = modes.timing_events(delivered)
        man: dict[str, Any] = new_manifest(
            world_size=world, captured_ranks=list(range(world)),
            ranks={str(r): {"rank": r, "window": win_info.get(r)} for r in range(world)},
            clock={"align": "none", "note": "time.time_ns() of each scheduler process; ranks on one host share a clock",
                   "offsets_ns": {str(r): 0 for r in range(world)}})
        from tracekit.finalize.pipeline import stamp

        return stamp(man), events
    from tracekit.ingest import ingest_traces

    run = ingest_traces([str(f) for fs in files.values() for f in fs])
    events = run.events
    man = dict(run.manifest)
    if mode == "lite":
        events, lite_notes = modes.merge_lite(events, delivered)
        for r, note in lite_notes.items():
            man.setdefault("ranks", {}).setdefault(str(r), {})["window"] = {**win_info.get(r, {}), **note}
    if require_hooks or mode == "lite":
        check_hooks(events, world, tdir)
    return man, events
