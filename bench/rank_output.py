"""Issue 29, "many ranks in every output": text size and render time of ``attribute``, ``ranks``, ``info``,
``gap --by rank`` and ``report`` on a many-rank run, this checkout against a reference checkout.

    python bench/rank_output.py RUN --before DIR [--rounds 3] [--out results.txt]

``DIR`` is a checkout of the code before the rank summaries (``git worktree add --detach DIR d991ba6``,
its compiled modules copied in: ``cp tracekit/*.so DIR/tracekit/``); it runs in this interpreter with
DIR first on ``sys.path`` and the editable install's finder (which maps ``tracekit`` to this checkout)
left out; the after side runs this checkout. Both sides run in the same bench run, one
after the other per round, each a fresh process.

Printed per command and side: the text on stdout (bytes, lines; ``report``: the HTML file's bytes),
the render time (CPU s of the render call alone, in the child: the run loaded and analysed first,
then the text renderer timed writing to a buffer; ``report``: the whole ``build_report``, whose
plots are its render), and the whole command as a process (CPU s = user + system, wall s), the
median over rounds; then after / before ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# every child starts with this: argv[1] = the checkout to import tracekit from ("" = the installed one)
PRE = (
    "import sys\n"
    "d = sys.argv.pop(1)\n"
    "if d:\n"
    "    sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in str(getattr(f, '__module__', ''))]\n"
    "    sys.path.insert(0, d)\n"
)
MAIN = PRE + "import runpy\nrunpy.run_module('tracekit', run_name='__main__', alter_sys=True)\n"
CHECK = PRE + "import tracekit\nprint(tracekit.__file__)\n"

# the child: load + analyse (not timed), render to a buffer (timed, CPU s); prints one JSON line on stderr
CHILD = r'''
import contextlib, io, json, sys, time
from tracekit.store import load_run
from tracekit.analyzers import analyses
cmd, path = sys.argv[1], sys.argv[2]
run = load_run(path)
buf = io.StringIO()
from tracekit.render.attribute import make_console
if cmd == "attribute":
    from tracekit.render import attribute_doc
    rep = analyses.attribute(run.events, run.manifest, None, None)
    t0 = time.process_time()
    with contextlib.redirect_stdout(buf):
        attribute_doc.render(rep, "rank")
elif cmd == "ranks":
    from tracekit.render import ranks as render_ranks
    rep = analyses.ranks(run.events, run.manifest)
    t0 = time.process_time()
    with contextlib.redirect_stdout(buf):
        render_ranks.render(rep, make_console(200))
elif cmd == "gap":
    from tracekit.render import gap as render_gap
    from tracekit.render.console import SafeConsole
    rep = analyses.gap(run.events, run.manifest, None, None, a="verify", b="decode")
    t0 = time.process_time()
    with contextlib.redirect_stdout(buf):
        render_gap.render_report(rep, SafeConsole(width=200), by_rank=True)
elif cmd == "report":
    import tempfile, os
    from tracekit.render.report import build_report
    out = os.path.join(tempfile.mkdtemp(), "r.html")
    t0 = time.process_time()
    res = build_report(path, out)
    buf.write("x" * res.bytes)
t1 = time.process_time()
text = buf.getvalue()
print(json.dumps({"render_cpu_s": t1 - t0, "bytes": len(text.encode()), "lines": text.count("\n")}), file=sys.stderr)
'''

CLI = {
    "attribute": ["attribute", "{run}"],
    "ranks": ["ranks", "{run}"],
    "info": ["info", "{run}"],
    "gap": ["gap", "{run}", "--by", "rank"],
    "report": ["report", "{run}", "-o", "{tmp}/r.html"],
}
RENDER = ("attribute", "ranks", "gap", "report")


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="200")
    env.pop("PYTHONPATH", None)
    return env


def _process(args: list[str], env: dict[str, str]) -> tuple[float, float, bytes]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(args, env=env, capture_output=True, check=False)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 3):
        raise SystemExit(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.decode()[-2000:]}")
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), wall, p.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run")
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commands", default=",".join(CLI))
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    if not (a.before / "tracekit" / "__init__.py").is_file():
        raise SystemExit(f"--before {a.before}: not a tracekit checkout")
    for d, want in ((str(a.before.resolve()), a.before.resolve()), ("", REPO)):
        got = subprocess.run([sys.executable, "-c", CHECK, d], env=_env(), capture_output=True, text=True, check=True)
        if not Path(got.stdout.strip()).resolve().is_relative_to(want):
            raise SystemExit(f"tracekit imported from {got.stdout.strip()}, not from {want}")
    lines: list[str] = [f"# {' '.join(sys.argv)}", f"# run {a.run}; before = {a.before}; after = {REPO}; "
                        f"{a.rounds} rounds, medians; load {os.getloadavg()[0]:.1f}"]
    head = f"{'command':10} {'side':6} {'stdout bytes':>12} {'lines':>6} {'render CPU s':>12} {'process CPU s':>13} {'wall s':>7}"
    lines.append(head)
    print("\n".join(lines), flush=True)
    table: dict[tuple[str, str], dict[str, float]] = {}
    for cmd in a.commands.split(","):
        got: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
        for _ in range(a.rounds):
            for side, d in (("before", str(a.before.resolve())), ("after", "")):
                env = _env()
                with tempfile.TemporaryDirectory() as tmp:
                    args = [sys.executable, "-c", MAIN, d, *[x.format(run=a.run, tmp=tmp) for x in CLI[cmd]]]
                    cpu, wall, out = _process(args, env)
                    size = (Path(tmp) / "r.html").stat().st_size if cmd == "report" else len(out)
                    nlines = 0 if cmd == "report" else out.count(b"\n")
                g = got[side]
                g.setdefault("bytes", []).append(size)
                g.setdefault("lines", []).append(nlines)
                g.setdefault("cpu", []).append(cpu)
                g.setdefault("wall", []).append(wall)
                if cmd in RENDER:
                    p = subprocess.run([sys.executable, "-c", PRE + CHILD, d, cmd, a.run], env=env, capture_output=True,
                                       check=False)
                    if p.returncode != 0:
                        raise SystemExit(f"render child {cmd} ({side}): {p.stderr.decode()[-2000:]}")
                    g.setdefault("render", []).append(json.loads(p.stderr.decode().strip().splitlines()[-1])["render_cpu_s"])
        for side in ("before", "after"):
            m = {k: statistics.median(v) for k, v in got[side].items()}
            table[(cmd, side)] = m
            render = f"{m['render']:12.3f}" if "render" in m else f"{'-':>12}"
            line = (f"{cmd:10} {side:6} {m['bytes']:12,.0f} {m['lines']:6,.0f} {render} {m['cpu']:13.2f} {m['wall']:7.2f}")
            lines.append(line)
            print(line, flush=True)
    lines.append("# after / before")
    for cmd in a.commands.split(","):
        b, f = table[(cmd, "before")], table[(cmd, "after")]
        parts = [f"bytes {f['bytes'] / b['bytes']:.3f}x", f"process CPU {f['cpu'] / b['cpu']:.2f}x"]
        if "render" in b:
            parts.insert(1, f"render CPU {f['render'] / max(b['render'], 1e-9):.2f}x")
        lines.append(f"{cmd:10} " + ", ".join(parts))
        print(lines[-1], flush=True)
    if a.out is not None:
        a.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
