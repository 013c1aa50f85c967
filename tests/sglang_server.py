"""A local stand-in for an SGLang HTTP server, speaking SGLang's real request/response schema.

    python sglang_server.py PORT_FILE --world 2 --style 0.5.23 [--no-hooks] [--drop-rank R] [--old-info] [--serve]

Routes and bodies as in sglang/srt/entrypoints/http_server.py (0.5.2 - 0.5.23):
- ``GET /server_info`` (``/get_server_info`` only with --old-info): server args incl.
  ``tp_size``, ``pp_size``, ``version``
- ``POST /generate`` with ``input_ids`` + ``sampling_params`` -> ``{"text", "meta_info"}``
- ``POST /start_profile`` with ``ProfileReq(Input)`` fields (``output_dir``, ``num_steps``,
  ``activities``, ...) -> 200 ``Start profiling.\\n``; then every rank writes
  ``{profile_id}-TP-{r}.trace.json.gz`` (profile_id = str(time.time()), as the
  tokenizer manager sets it) from a real CPU-profiler run (tests/sglang_rank.py;
  the simulated ranks run one after the other in the server process, each with
  its own copy of the classes and its own hook Recorder)
- ``POST /stop_profile`` -> 200 ``Stop profiling. This will take some time.\\n``
The chosen port is written to PORT_FILE once the server listens.

``--serve``: like SGLang, one scheduler process per rank (tests/sglang_rank.py ``serve``), each
running speculative cycles without end with tracekit's hooks installed, so tracekit's own window
(profile modes lite and timing) runs in every rank; ``/start_profile`` hands the request to
every rank process (a file in a private control directory), which profiles ``num_steps`` cycles
with the requested activities and writes its file. Like SGLang, the server listens (and writes
PORT_FILE) only once every rank process has run its first cycle; the server process itself
imports no torch then. The rank processes end with the server.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


KNOWN_PROFILE_FIELDS = {"output_dir", "start_step", "num_steps", "activities", "profile_by_stage", "with_stack",
                        "record_shapes", "merge_profiles", "profile_prefix", "profile_stages", "profile_id",
                        "detailed_annotations", "req_type"}


class State:
    args: argparse.Namespace
    profiling = False
    lock = threading.Lock()
    ctl = ""
    seq = 0
    requests: list[dict] = []  # noqa: RUF012  (the /start_profile bodies, for GET /test/requests)
    ranks: list[subprocess.Popen] = []  # noqa: RUF012
    rank_module: Any = None  # tests/sglang_rank.py, imported at start unless --serve (its ranks import torch)


def run_profile(output_dir: str, num_steps: int) -> None:
    """Every rank writes its file; ranks run one after the other in this process (one torch import)."""
    profile_id = str(time.time())
    a = State.args
    try:
        for r in range(a.world):
            if r == a.drop_rank:
                continue
            out = os.path.join(output_dir, f"{profile_id}-TP-{r}.trace.json.gz")
            State.rank_module.run_rank(out, r, a.style, num_steps, not a.no_hooks)
    finally:
        with State.lock:
            State.profiling = False


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self) -> None:
        a = State.args
        if self.path == "/test/requests":  # test hook: what /start_profile received
            self._send(200, json.dumps(State.requests).encode())
            return
        if (self.path == "/server_info" and not a.old_info) or self.path == "/get_server_info":
            info = {"tp_size": a.world, "pp_size": 1, "dp_size": 1, "version": a.style, "vocab_size": 1000,
                    "model_path": "test/tiny", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                    "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
            self._send(200, json.dumps(info).encode())
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        if self.path == "/generate":
            req = self._body()
            ids = req.get("input_ids")
            sp = req.get("sampling_params") or {}
            if not isinstance(ids, list) or not ids:
                self._send(400, b'{"error":"Either text or input_ids should be provided."}')
                return
            n = int(sp.get("max_new_tokens", 128))
            time.sleep(0.02)
            out = {"text": "x" * n, "meta_info": {"id": "0", "prompt_tokens": len(ids), "completion_tokens": n,
                                                  "finish_reason": {"type": "length", "length": n}}}
            self._send(200, json.dumps(out).encode())
        elif self.path == "/start_profile":
            req = self._body()
            unknown = set(req) - KNOWN_PROFILE_FIELDS
            if unknown:
                self._send(422, json.dumps({"detail": f"unknown fields {sorted(unknown)}"}).encode())
                return
            if State.args.serve:
                out_dir = req.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
                Path(out_dir).mkdir(parents=True, exist_ok=True)
                State.seq += 1
                doc = {"seq": State.seq, "output_dir": out_dir, "num_steps": int(req.get("num_steps") or 5),
                       "activities": req.get("activities") or ["CPU", "GPU"], "profile_id": str(time.time())}
                tmp = Path(State.ctl) / "profile.json.tmp"
                tmp.write_text(json.dumps(doc))
                os.replace(tmp, Path(State.ctl) / "profile.json")
                State.requests.append(req)
                self._send(200, b"Start profiling.\n", "text/plain")
                return
            with State.lock:
                if State.profiling:
                    self._send(500, b"Internal Server Error")
                    return
                State.profiling = True
            out_dir = req.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            threading.Thread(target=run_profile, args=(out_dir, int(req.get("num_steps") or 5)), daemon=True).start()
            self._send(200, b"Start profiling.\n", "text/plain")
        elif self.path == "/stop_profile":
            self._send(200, b"Stop profiling. This will take some time.\n", "text/plain")
        else:
            self._send(404, b'{"detail":"Not Found"}')


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("port_file")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--style", default="0.5.23")
    p.add_argument("--no-hooks", action="store_true")
    p.add_argument("--drop-rank", type=int, default=-1)
    p.add_argument("--old-info", action="store_true")
    p.add_argument("--serve", action="store_true")
    State.args = p.parse_args()
    if State.args.serve:
        State.ctl = tempfile.mkdtemp(prefix="tk-fake-sglang-")

        def bye(*_: object) -> None:
            for proc in State.ranks:
                proc.terminate()
            sys.exit(0)

        signal.signal(signal.SIGTERM, bye)
        for r in range(State.args.world):
            State.ranks.append(subprocess.Popen([sys.executable, str(HERE / "sglang_rank.py"), "--serve", State.ctl,
                                                 str(r), State.args.style, "0" if State.args.no_hooks else "1"]))
        while not all((Path(State.ctl) / f"ready-{r}").exists() for r in range(State.args.world)):
            if any(proc.poll() is not None for proc in State.ranks):
                bye()
            time.sleep(0.1)
    else:
        import sglang_rank  # imports torch and the shapes once, at server start

        State.rank_module = sglang_rank
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Path(State.args.port_file).write_text(str(srv.server_address[1]))
    srv.serve_forever()


if __name__ == "__main__":
    main()
