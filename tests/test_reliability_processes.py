"""Issue 30 with real processes on both sides: readers (``tracekit info --json``) while a writer
process replaces the run in a loop. Every wait is on a condition (a line from the writer, a process
ending), never on a clock."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
H200 = HERE.parent / "samples" / "h200x2-forensics" / "run.parquet"
GEN = "TRACEKIT_TEST_GENERATION"
READS = 12

_WRITER = """
import sys
from tracekit.store import load_run, write_run
src, dst, var = sys.argv[1], sys.argv[2], sys.argv[3]
run = load_run(src)
g = 0
while True:  # until the test kills it: generation g has g events fewer and says g in every rank's env
    man = dict(run.manifest)
    man["ranks"] = {r: {**info, "env": {**info.get("env", {}), var: str(g)}} for r, info in man["ranks"].items()}
    write_run(run.events.head(run.events.height - g), dst, man)  # temp file, then rename over dst
    print(g, flush=True)
    g += 1
"""


def test_info_processes_never_pair_one_generation_s_manifest_with_another_s_events(tmp_path: Path) -> None:
    """A writer process replaces run.parquet (write_run: temp file, then rename) as fast as it can, each
    generation's number in its manifest and in its event count; each ``tracekit info --json`` process
    must see one generation in both. Before each read the writer has published a new generation."""
    dst = tmp_path / "run.parquet"
    w = subprocess.Popen([sys.executable, "-c", _WRITER, str(H200), str(dst), GEN], stdout=subprocess.PIPE, text=True)
    assert w.stdout is not None
    from tracekit.store import load_run

    full = load_run(H200).events.height
    try:
        seen: list[int] = []
        last = int(w.stdout.readline())
        for _ in range(READS):
            while True:  # the writer has published a generation newer than the last read's
                line = w.stdout.readline()
                assert line, f"the writer ended (status {w.poll()})"
                if int(line) > last:
                    last = int(line)
                    break
            r = subprocess.run([sys.executable, "-m", "tracekit", "info", "--json", str(dst)], capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0, r.stderr
            doc = json.loads(r.stdout)
            gens = {env[GEN] for env in doc["environment"]["by_rank"].values()}
            assert len(gens) == 1, gens  # one manifest
            g = int(gens.pop())
            assert doc["events"] == full - g, (g, doc["events"], full)  # its events are that manifest's
            seen.append(g)
        assert len(set(seen)) == READS  # every read saw a newer generation: the writer ran all along
    finally:
        w.kill()
        w.wait(60)
