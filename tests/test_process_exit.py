"""How tracekit processes end (tracekit/process_exit.py): sys.exit's statuses, atexit handlers run,
buffered output flushed (Python's and the C library's), the teardown skipped, the normal exit where it
is needed (threads waited for, profilers, TRACEKIT_NORMAL_EXIT), a closed stdout quiet; the CLI through
it, end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracekit.cli_errors import EXIT_ERROR
from tracekit.process_exit import NORMAL_EXIT_ENV

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "samples" / "cpu8-builtin" / "run.parquet"


# stdout and stderr buffered as a user's shell has them (PYTHONUNBUFFERED, set in some sandboxes, off)
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}


def _py(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={**ENV, **env})


# an object whose finalizer runs only in the interpreter's teardown: it says which exit was taken
TEARDOWN_PROBE = """
    import sys
    class Probe:
        def __del__(self):
            sys.stdout.write("teardown ran\\n")
            sys.stdout.flush()
    probe = Probe()
"""


@pytest.mark.parametrize(("code", "status", "err"), [("None", 0, ""), ("0", 0, ""), ("3", 3, ""),
                                                     ("'no such run'", 1, "no such run\n")])
def test_status_atexit_and_buffers(code: str, status: int, err: str) -> None:
    # stdout is a pipe: block-buffered, so nothing reaches it unless end_process flushes
    out = _py(f"""
        import atexit, sys
        from tracekit.process_exit import end_process
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("x" * 100000 + "\\n")
        sys.stderr.write("partial line")
        end_process({code})
        print("not reached")
    """)
    assert out.returncode == status
    assert out.stdout == "x" * 100000 + "\natexit ran\n"
    assert out.stderr == "partial line" + err


def test_a_running_thread_is_waited_for() -> None:
    # a non-daemon thread still running: the normal exit (which waits for it) is taken
    out = _py("""
        import threading, time
        from tracekit.process_exit import end_process
        def late():
            time.sleep(0.3)
            print("thread finished", flush=True)
        threading.Thread(target=late).start()
        end_process(4)
    """)
    assert (out.returncode, out.stdout) == (4, "thread finished\n")


def test_teardown_is_skipped_and_daemon_threads_do_not_stop_it() -> None:
    out = _py(TEARDOWN_PROBE + """
    import threading, time
    from tracekit.process_exit import end_process
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    end_process(0)
    """)
    assert (out.returncode, out.stdout) == (0, "")
    # the same without end_process: the interpreter's teardown runs the finalizer (the probe works)
    assert _py(TEARDOWN_PROBE).stdout == "teardown ran\n"


@pytest.mark.parametrize("how", ["profiler", "tracer", "env", "thread"])
def test_normal_exit_where_it_is_needed(how: str) -> None:
    # under a profiler or tracer (cProfile, pdb, coverage write after the program), with TRACEKIT_NORMAL_EXIT=1,
    # or called off the main thread: SystemExit, the interpreter's own exit
    setup = {"profiler": "sys.setprofile(lambda *a: None)", "tracer": "sys.settrace(lambda *a: None)", "env": "",
             "thread": ""}[how]
    call = "end_process(6)" if how != "thread" else \
        "t = threading.Thread(target=lambda: end_process(6)); t.start(); t.join(); print('thread done'); sys.exit(6)"
    out = _py(f"""
        import sys, threading
        from tracekit.process_exit import end_process
        {setup}
        try:
            {call}
        except SystemExit as e:
            print("SystemExit", e.code)
            raise
    """, **({NORMAL_EXIT_ENV: "1"} if how == "env" else {}))
    want = "thread done\nSystemExit 6\n" if how == "thread" else "SystemExit 6\n"
    assert (out.returncode, out.stdout) == (6, want)


def test_c_stdio_is_flushed() -> None:
    # what a native library printed through C's stdio (block-buffered into a pipe) is not lost
    for fn in ("exit_now", "end_process"):
        out = _py(f"""
            import ctypes
            from tracekit.process_exit import {fn}
            ctypes.CDLL(None).printf(b"from C\\n")
            {fn}(0)
        """)
        assert (out.returncode, out.stdout) == (0, "from C\n"), fn


def test_exit_now_skips_atexit_but_flushes() -> None:
    out = _py("""
        import atexit, sys
        from tracekit.process_exit import exit_now
        atexit.register(lambda: print("atexit ran"))
        sys.stdout.write("buffered")
        exit_now(5)
    """)
    assert (out.returncode, out.stdout) == (5, "buffered")


@pytest.mark.parametrize(("code", "status"), [(0, EXIT_ERROR), (3, 3)])
def test_closed_stdout_is_quiet(code: int, status: int) -> None:
    # the reader goes away before the buffered output is flushed (`| head`): a 0 becomes 1 (click's status for a
    # stdout closed during the command), a status already set is kept; no message, not Python's "Exception ignored"
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from tracekit.process_exit import end_process
        sys.stdout.write("y" * 1000)  # held in the buffer
        sys.stdin.read()  # until the test has closed the reading end
        end_process({code})
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    p.stdout.close()
    p.stdin.close()
    assert p.wait(timeout=120) == status
    assert p.stderr.read() == b""


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_unwritable_stdout_says_so() -> None:
    # output lost for another reason (a full disk): status 1 and one line, never a silent loss or a traceback
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
            import sys
            from tracekit.process_exit import end_process
            sys.stdout.write("lost")
            end_process(0)
        """)], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120, env=ENV)
        assert (out.returncode, out.stderr) == (1, "tracekit: error: stdout: No space left on device\n")
        # click's own output outside any command (--version) to a full disk: one line, status 1
        ver = subprocess.run([sys.executable, "-m", "tracekit", "--version"], stdout=full, stderr=subprocess.PIPE,
                             text=True, timeout=120, env=ENV)
    assert ver.returncode == 1 and ver.stderr.startswith("tracekit: error:"), ver.stderr
    assert len(ver.stderr.strip().splitlines()) == 1 and "Traceback" not in ver.stderr


def test_cli_ends_through_it() -> None:
    # the whole JSON document comes out through a pipe; a bad input is one line and status 1; a usage error 2
    out = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(RUN), "--json"], capture_output=True,
                         text=True, timeout=300, env=ENV)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["document"] == "attribute" and doc["phases"]
    bad = subprocess.run([sys.executable, "-m", "tracekit", "attribute", str(ROOT / "no-such.parquet")],
                         capture_output=True, text=True, timeout=300, env=ENV)
    assert bad.returncode == 1 and bad.stdout == ""
    assert len(bad.stderr.strip().splitlines()) == 1 and "no-such.parquet" in bad.stderr
    usage = subprocess.run([sys.executable, "-m", "tracekit", "attribute", "--no-such-flag"], capture_output=True,
                           text=True, timeout=300, env=ENV)
    assert usage.returncode == 2 and "no-such-flag" in usage.stderr
