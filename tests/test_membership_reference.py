"""annotate_phases against a straightforward row-by-row reference on random multi-rank frames.

The frames hold nested phase ranges on several threads (same-phase nesting, SGLang
spans, non-phase ranges), late facts markers, eager launches, graph launches (one
correlation, many kernels), unmatched and duplicate correlations, and a rank without
launch rows whose kernels fall back to projected ``gpu_range`` phases per stream; launch
rows on a thread with no open range join the innermost range open on another thread of the
process (the cross-thread rule).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from tracekit.finalize.membership import annotate_phases
from tracekit.finalize.phases import (
    FACT_COLUMNS,
    format_facts,
    format_label,
    parse_label,
    phase_of_span,
)
from tracekit.schema import conform

PHASES = ("verify", "draft", "draft_extend", "decode")
HOST_KINDS = ("launch", "runtime", "sync", "op", "python", "instant")
GPU = ("kernel", "memcpy", "memset")


def _name(rs: np.random.Generator) -> str:
    u = rs.random()
    if u < 0.15:
        return "other_range"
    if u < 0.3:
        return f"step[TARGET_VERIFY bs={int(rs.integers(1, 9))}]"
    ph = PHASES[int(rs.integers(len(PHASES)))]
    bs = int(rs.integers(1, 9)) if rs.random() < 0.6 else None
    return format_label(ph, cycle=int(rs.integers(0, 4)), bs=bs, graphed=bool(rs.random() < 0.5))


def _tree(rs: np.random.Generator, lo: int, hi: int, depth: int, out: list[tuple[int, int]]) -> None:
    """Properly nested intervals inside [lo, hi) (grid units)."""
    t = lo
    while depth < 4 and hi - t > 6 and rs.random() < 0.8:
        s = int(rs.integers(t, t + (hi - t) // 2))
        e = int(rs.integers(s + 2, min(hi, s + 2 + (hi - s) // 2) + 1))
        out.append((s, e))
        _tree(rs, s + 1, e, depth + 1, out)
        t = e


def random_frame(seed: int) -> pl.DataFrame:
    rs = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    corr = 0
    for rank in range(3):
        launches = rank < 2  # rank 2 has no launch rows: gpu_range fallback
        lanes = [("t", 1), ("t", 2)] + ([("s", 7), ("s", 8)] if not launches else [])
        for lane_i, (lk, lid) in enumerate(lanes):
            iv: list[tuple[int, int]] = []
            _tree(rs, 0, 400, 0, iv)

            def t_(g: int, lane: int = lane_i) -> int:  # distinct starts per rank
                return g * 8 + lane

            for s, e in iv:
                extra: dict[str, Any] = {}
                if rs.random() < 0.2:
                    extra["batch_size"] = int(rs.integers(20, 30))
                if rs.random() < 0.1:
                    extra["cycle"] = int(rs.integers(0, 4))
                if lk == "t":
                    rows.append(dict(rank=rank, kind="range", name=_name(rs), pid=10, tid=lid,
                                     start_ns=t_(s), dur_ns=t_(e) - t_(s), **extra))
                else:
                    rows.append(dict(rank=rank, kind="gpu_range", name=_name(rs), device=rank, stream=lid,
                                     start_ns=t_(s), dur_ns=t_(e) - t_(s), **extra))
            if lk == "t":
                for _ in range(40):
                    t = int(rs.integers(0, 3300))
                    u = rs.random()
                    if u < 0.6 and launches:
                        graph = rs.random() < 0.2
                        c = corr if rs.random() < 0.9 else None
                        rows.append(dict(rank=rank, kind="launch", name="cudaGraphLaunch" if graph else "cudaLaunchKernel",
                                         pid=10, tid=lid, start_ns=t, dur_ns=3, correlation=c))
                        if c is not None and rs.random() < 0.05:  # duplicate: first launch row wins
                            rows.append(dict(rank=rank, kind="launch", name="cudaLaunchKernel", pid=10, tid=3 - lid,
                                             start_ns=t + 1, dur_ns=3, correlation=c))
                        for j in range(int(rs.integers(2, 6)) if graph else 1):
                            rows.append(dict(rank=rank, kind=GPU[int(rs.integers(3))], name=f"k{j}", device=rank,
                                             stream=7, start_ns=t + 10 + j, dur_ns=5,
                                             correlation=c if rs.random() < 0.95 else corr + 10_000))
                        corr += 1
                    elif u < 0.8:
                        kind = HOST_KINDS[int(rs.integers(1, len(HOST_KINDS)))]
                        rows.append(dict(rank=rank, kind=kind, name=f"h_{kind}", pid=10, tid=lid, start_ns=t, dur_ns=2))
                    else:  # late facts marker (zero length, outside or inside anything)
                        ph = PHASES[int(rs.integers(len(PHASES)))]
                        acc = float(rs.integers(1, 9)) / 2 if rs.random() < 0.8 else None
                        bs = int(rs.integers(1, 9)) if rs.random() < 0.3 else None
                        rows.append(dict(rank=rank, kind="range", name=format_facts(ph, int(rs.integers(0, 4)),
                                         accept=acc, bs=bs), pid=10, tid=lid, start_ns=t, dur_ns=0))
            else:
                for _ in range(30):
                    rows.append(dict(rank=rank, kind=GPU[int(rs.integers(3))], name="fk", device=rank, stream=lid,
                                     start_ns=int(rs.integers(0, 3300)), dur_ns=4,
                                     correlation=int(rs.integers(0, 50)) if rs.random() < 0.5 else None))
    order = rs.permutation(len(rows))  # row order must not matter beyond the documented tie rules
    return conform(pl.DataFrame([rows[i] for i in order], infer_schema_length=None))


def _mapping(name: str) -> tuple[str, dict[str, Any], bool] | None:
    lab = parse_label(name)
    if lab is not None and lab.is_facts:
        return lab.phase, dict(lab.facts), True
    m = phase_of_span(name)
    return None if m is None else (m[0], dict(m[1]), False)


def reference(ev: pl.DataFrame) -> pl.DataFrame:
    rows = ev.to_dicts()
    launch_ranks = {r["rank"] for r in rows if r["kind"] == "launch"}
    ranges: list[dict[str, Any]] = []  # phase ranges with label facts applied
    markers: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        if r["kind"] not in ("range", "instant", "gpu_range") or r["name"] is None:
            continue
        m = _mapping(r["name"])
        if m is None:
            continue
        phase, facts, is_facts = m
        facts = {c: facts.get(c) if facts.get(c) is not None else r[c] for c in FACT_COLUMNS}
        d = dict(i=i, phase=phase, rank=r["rank"], s=r["start_ns"], e=r["start_ns"] + r["dur_ns"], **facts)
        if is_facts:
            markers.append(d)
        elif r["kind"] == "range" and r["dur_ns"] > 0:
            ranges.append(dict(d, src="host", lane=(r["rank"], r["pid"], r["tid"])))
        elif r["kind"] == "gpu_range" and r["dur_ns"] > 0 and r["rank"] not in launch_ranks:
            ranges.append(dict(d, src="gpu", lane=(r["rank"], r["stream"])))

    def order_key(d: dict[str, Any]) -> tuple[int, int, int]:
        return (d["rank"], d["s"], -(d["e"] - d["s"]))

    def innermost(cands: list[dict[str, Any]], t: int) -> dict[str, Any] | None:
        open_ = [d for d in cands if d["s"] <= t < d["e"]]
        return max(open_, key=order_key) if open_ else None

    # same-phase merge: root = outermost enclosing range of the same phase chain
    for d in ranges:
        same_lane = [o for o in ranges if o["lane"] == d["lane"] and o is not d]
        root = d
        while True:
            encl = [o for o in same_lane if o["s"] <= root["s"] and root["e"] <= o["e"] and order_key(o) < order_key(root)]
            up = [o for o in encl if o["phase"] == root["phase"]]
            # nearest enclosing same-phase range (nested ranges: the one started latest)
            if not up:
                break
            root = max(up, key=order_key)
        d["root"] = root
    roots = [d for d in ranges if d["root"] is d]
    roots.sort(key=lambda d: (d["src"] != "host", *order_key(d)))
    for k, d in enumerate(roots):
        d["id"] = k
    inst: dict[int, dict[str, Any]] = {}
    for d in sorted(ranges, key=order_key):  # outer first
        i = inst.setdefault(d["root"]["id"], dict(phase=d["phase"], rank=d["rank"], **{c: None for c in FACT_COLUMNS}))
        for c in FACT_COLUMNS:
            if i[c] is None:
                i[c] = d[c]
    for i in inst.values():  # late facts markers: same rank, phase, cycle; the last value wins
        if i["cycle"] is None:
            continue
        same = [mk for mk in markers if (mk["rank"], mk["phase"], mk["cycle"]) == (i["rank"], i["phase"], i["cycle"])]
        for c in FACT_COLUMNS:
            vals = [mk[c] for mk in same if mk[c] is not None]
            if c != "cycle" and i[c] is None and vals:
                i[c] = vals[-1]

    pid = [-1] * len(rows)
    own = {d["i"]: d["root"]["id"] for d in ranges}
    for i, k in own.items():
        pid[i] = k
    by_lane: dict[Any, list[dict[str, Any]]] = {}
    for d in ranges:
        by_lane.setdefault(d["lane"], []).append(d)
    first_launch: dict[tuple[int, int], int] = {}
    for i, r in enumerate(rows):
        if r["kind"] == "launch" and r["correlation"] is not None:
            first_launch.setdefault((r["rank"], r["correlation"]), i)
    for i, r in enumerate(rows):
        if i in own or r["kind"] not in HOST_KINDS or r["tid"] is None:
            continue
        d = innermost(by_lane.get((r["rank"], r["pid"], r["tid"]), []), r["start_ns"])
        if d is None and r["kind"] == "launch" and r["pid"] is not None:
            # cross-thread: no range open on its own thread, so the innermost open on any
            # thread of the process (its own has none open)
            procs = [o for o in ranges if o["src"] == "host" and o["lane"][:2] == (r["rank"], r["pid"])]
            d = innermost(procs, r["start_ns"])
        pid[i] = -1 if d is None else d["root"]["id"]
    for i, r in enumerate(rows):
        if r["kind"] not in GPU:
            continue
        if r["rank"] in launch_ranks:
            j = first_launch.get((r["rank"], r["correlation"])) if r["correlation"] is not None else None
            pid[i] = -1 if j is None else pid[j]
        else:
            d = innermost(by_lane.get((r["rank"], r["stream"]), []), r["start_ns"])
            pid[i] = -1 if d is None else d["root"]["id"]

    out: dict[str, list[Any]] = {"phase": [], "phase_id": [], **{c: [] for c in FACT_COLUMNS}}
    for i, r in enumerate(rows):
        k = pid[i]
        ins = inst.get(k) if k >= 0 else None
        out["phase_id"].append(k if k >= 0 else None)
        out["phase"].append(ins["phase"] if ins else None)
        for c in FACT_COLUMNS:
            v = r[c]
            if ins is not None and (c == "cycle" or i in own) and ins[c] is not None:
                v = ins[c]
            out[c].append(v)
    return ev.with_columns(pl.Series(c, v, dtype=ev.schema[c]) for c, v in out.items())


@pytest.mark.parametrize("seed", range(12))
def test_annotate_phases_matches_reference(seed: int) -> None:
    ev = random_frame(seed)
    got = annotate_phases(ev)
    want = reference(ev)
    assert got.columns == want.columns
    for c in ("phase", "phase_id", *FACT_COLUMNS):
        bad = got.select(pl.int_range(pl.len()).alias("row"), pl.col(c)).filter(
            ~pl.col(c).eq_missing(want.get_column(c))
        )
        assert bad.height == 0, (c, bad.head(5), want.get_column(c).gather(bad["row"].head(5)).to_list())
    assert got.drop("phase", "phase_id", *FACT_COLUMNS).equals(ev.drop("phase", "phase_id", *FACT_COLUMNS))


def test_random_frames_exercise_every_path() -> None:
    got = pl.concat([annotate_phases(random_frame(seed)) for seed in range(12)])
    gpu = got.filter(pl.col("kind").is_in(GPU) & pl.col("phase_id").is_not_null())
    assert gpu.filter(pl.col("rank") == 2).height > 0  # gpu_range fallback
    assert gpu.filter(pl.col("rank") < 2).height > 0  # via launches
    graphed = gpu.filter(pl.col("rank") < 2).group_by("rank", "correlation").len()
    assert graphed.get_column("len").max() > 1  # graph replays: many kernels, one launch
    assert got.filter(pl.col("kind").is_in(HOST_KINDS[1:]) & pl.col("phase_id").is_not_null()).height > 0
    assert got.filter(pl.col("kind") == "range").get_column("accept_len").drop_nulls().len() > 0  # late markers
    # same-phase nesting merged some ranges into one instance
    ranges = got.filter(pl.col("kind") == "range", pl.col("phase_id").is_not_null())
    assert ranges.height > ranges.get_column("phase_id").n_unique()
