"""Make N-rank Kineto trace sets from the real committed 2-rank H200 traces (issue 29's scale bench).

    python bench/scale_gen.py OUT_DIR 64 [256 1024 ...] [--ranks-per-host 8] [--source eager]

For each N, ``OUT_DIR/N/rank-00000.trace.json.gz`` ... one trace per rank. Rank r is the real trace
of rank ``r % 2`` (samples/h200x2-builtin/eager-rank-0000{0,1}.trace.json.gz, 17,169 and 16,701
events) with:

- rank ids rewritten: ``distributedInfo`` says rank r of world N (its process group of N ranks), and
  every collective kernel's ``Group size`` / ``Process Group Ranks`` name the N ranks;
- clocks rewritten: ranks are grouped ``--ranks-per-host`` to a host, and host h's clock reads
  ``h * 1.37 ms`` ahead (``baseTimeNanoseconds`` shifted: every event of the rank moves with it), so
  the ingest's ``--align auto`` must fit and remove the offsets;
- collectives kept consistent: the two real ranks ran the same sequence of collectives (one
  process group), so every rank of the set holds that sequence, matched on every rank.

The event body of each source is rewritten and compressed once; each file is a gzip member of its
own header followed by that compressed body (gzip members concatenate into one stream), so a
1,024-rank set is written at disk speed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = REPO / "samples" / "h200x2-builtin"
HOST_SKEW_NS = 1_370_000
_BASE = re.compile(r'"baseTimeNanoseconds": (\d+)')
_BODY = '"traceEvents": ['


def _split(text: str) -> tuple[dict[str, object], str, int]:
    """(header fields before traceEvents, the body from traceEvents on, baseTimeNanoseconds)."""
    at = text.index(_BODY)
    head = json.loads(text[:at].rstrip().rstrip(",") + "}")
    m = _BASE.search(text[:at])
    if m is None:
        raise SystemExit("source trace has no baseTimeNanoseconds")
    return head, text[at:], int(m.group(1))


def _body(body: str, world: int) -> bytes:
    ranks = "[" + ", ".join(str(r) for r in range(world)) + "]"
    out = re.sub(r'"Group size": \d+', f'"Group size": {world}', body)
    out = re.sub(r'"Process Group Ranks": "\[[0-9, ]*\]"', f'"Process Group Ranks": "{ranks}"', out)
    return gzip.compress(out.encode(), compresslevel=6, mtime=0)


def make_set(out: Path, world: int, per_host: int, source: str) -> Path:
    """Write the N-rank set into ``out/N``; returns that directory."""
    srcs = [gzip.decompress((SOURCES / f"{source}-rank-{r:05d}.trace.json.gz").read_bytes()).decode() for r in (0, 1)]
    parts = [_split(t) for t in srcs]
    bodies = [_body(body, world) for _, body, _ in parts]
    d = out / str(world)
    d.mkdir(parents=True, exist_ok=True)
    for r in range(world):
        head, _, base = parts[r % 2]
        h = dict(head)
        dist = dict(h["distributedInfo"])  # type: ignore[arg-type]
        dist["rank"], dist["world_size"] = r, world
        dist["pg_config"] = [{**pg, "pg_size": world, "ranks": list(range(world))} for pg in dist.get("pg_config", [])]
        h["distributedInfo"] = dist
        h["trace_id"] = f"{r:032X}"
        h["baseTimeNanoseconds"] = base + (r // per_host) * HOST_SKEW_NS
        header = json.dumps(h)[:-1] + ", "
        (d / f"rank-{r:05d}.trace.json.gz").write_bytes(gzip.compress(header.encode(), compresslevel=1, mtime=0)
                                                        + bodies[r % 2])
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("sizes", type=int, nargs="+")
    ap.add_argument("--ranks-per-host", type=int, default=8)
    ap.add_argument("--source", choices=["eager", "graphed"], default="eager")
    a = ap.parse_args(argv)
    for n in a.sizes:
        d = make_set(a.out, n, a.ranks_per_host, a.source)
        size = sum(p.stat().st_size for p in d.iterdir())
        print(f"{d}: {n} ranks, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
