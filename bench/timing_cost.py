"""What profile mode ``timing`` costs a graphed verify cycle, measured two ways (bench/profile_modes.py runs it).

1. Interleaved per cycle: ``pairs`` pairs of adjacent cycles of one process, one with the timing
   recorder on (``start_recording`` of a ``RangeRecorder`` with CUDA events, as a timing window has
   it) and one with it off, the order of each pair drawn at random; each cycle's wall time ends in a
   host sync. The paired difference (on - off) cancels drift between pairs (clocks, the KV cache
   growing); its mean and median, with 95% bootstrap intervals (``resamples`` resamples, fixed seed),
   over the median "off" cycle. Every ``reset_every`` pairs the context goes back to its length at the
   first pair, so that the eager phases keep their shapes over hundreds of pairs.
2. Directly: the host time one phase range (``with phase(...)``: label, time stamps, two CUDA events)
   and one facts marker (``emit_facts``) cost with the recorder on, against the same calls with
   nothing recording, ``calls`` times each in a loop (CPU ns by ``thread_time_ns`` and wall ns), times
   the ranges and markers a cycle records: the host ns and CUDA events the recorder adds per cycle.
   The recorder as timing mode has it (CUDA events on every ``events_every``-th range of a phase:
   ``session.TIMING_EVENTS_EVERY``); split: a range without CUDA events (``range_no_events``), with
   events on every range (``range_events_always``), a new ``torch.cuda.Event`` made and recorded
   (``event_new``), a pooled one recorded again (``event_record``), each against an empty loop.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any


def bootstrap(values: list[int], stat: Any, resamples: int, seed: int = 16) -> tuple[float, float]:
    """95% percentile interval of ``stat`` over ``resamples`` resamples of ``values`` (with replacement)."""
    rng = random.Random(seed)
    n = len(values)
    est = sorted(stat(rng.choices(values, k=n)) for _ in range(resamples))
    return float(est[int(0.025 * resamples)]), float(est[int(0.975 * resamples) - 1])


def interleaved(wl: Any, start: int, pairs: int, cuda: bool, resamples: int = 2000,
                reset_every: int = 8) -> dict[str, Any]:
    from tracekit.collectors.hooks import start_recording, stop_recording
    from tracekit.collectors.ranges import RangeRecorder
    from tracekit.collectors.session import timing_events_every

    rec = RangeRecorder(cuda_events=cuda, events_every=timing_events_every())
    rng = random.Random(7)
    wl.timer.window = None
    c = start
    on_t: list[int] = []
    off_t: list[int] = []
    ctx0 = list(wl.seq)
    for p in range(pairs):
        if p % reset_every == 0:  # the context back to where the pairs began: the same shapes all along
            wl.seq = list(ctx0)
            wl.seq_t.copy_(wl.seq_t.new_tensor(ctx0))
        t: dict[bool, int] = {}
        for on in ((True, False) if rng.random() < 0.5 else (False, True)):
            if on:
                start_recording(rec, record_function=False)
            t0 = time.perf_counter_ns()
            wl.run_cycle(c)
            wl.sync()
            t[on] = time.perf_counter_ns() - t0
            if on:
                stop_recording()
            c += 1
        on_t.append(t[True])
        off_t.append(t[False])
    diff = [a - b for a, b in zip(on_t, off_t, strict=True)]
    off = statistics.median(off_t)
    mean_ci = bootstrap(diff, statistics.fmean, resamples)
    med_ci = bootstrap(diff, statistics.median, resamples)
    rows = rec.frame(0, 0)
    ranges = int((rows["dur_ns"] > 0).sum())
    return {"pairs": pairs, "off_median_ns": off, "on_median_ns": statistics.median(on_t),
            "diff_mean_ns": statistics.fmean(diff), "diff_mean_ci_ns": mean_ci,
            "diff_median_ns": statistics.median(diff), "diff_median_ci_ns": med_ci,
            "diff_mean_pct": 100 * statistics.fmean(diff) / off, "diff_mean_ci_pct": [100 * x / off for x in mean_ci],
            "diff_median_pct": 100 * statistics.median(diff) / off,
            "diff_median_ci_pct": [100 * x / off for x in med_ci],
            "off_p10_p90_ns": [sorted(off_t)[pairs // 10], sorted(off_t)[(9 * pairs) // 10]],
            "ranges_per_cycle": ranges / pairs, "markers_per_cycle": (rows.height - ranges) / pairs,
            "next_cycle": c, "resamples": resamples}


def _loop(calls: int, body: Any) -> tuple[int, int]:
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    for i in range(calls):
        body(i)
    return time.thread_time_ns() - c0, time.perf_counter_ns() - w0


def direct(calls: int, cuda: bool) -> dict[str, Any]:
    """Host ns of one phase range and one facts marker with the timing recorder on, minus the same with it off."""
    from tracekit.collectors.hooks import emit_facts, phase, start_recording, stop_recording
    from tracekit.collectors.ranges import RangeRecorder

    def rng_body(i: int) -> None:
        with phase("verify", cycle=i, bs=16, tok=64, seq=1024, graphed=True):
            pass

    def fact_body(i: int) -> None:
        emit_facts("verify", i, accept=2.5)

    out: dict[str, Any] = {"calls": calls}
    from tracekit.collectors.session import timing_events_every

    every = timing_events_every()
    out["events_every"] = every
    for name, body, events, n in (("range", rng_body, cuda, every), ("marker", fact_body, cuda, every),
                                  ("range_no_events", rng_body, False, 1), ("range_events_always", rng_body, cuda, 1)):
        _loop(calls // 10, body)  # warm
        off_cpu, off_wall = _loop(calls, body)
        rec = RangeRecorder(cuda_events=events, events_every=n)
        start_recording(rec, record_function=False)
        _loop(calls // 10, body)
        on_cpu, on_wall = _loop(calls, body)
        stop_recording()
        if cuda:
            import torch

            torch.cuda.synchronize()
        out[name] = {"cpu_ns": (on_cpu - off_cpu) / calls, "wall_ns": (on_wall - off_wall) / calls,
                     "off_cpu_ns": off_cpu / calls, "on_cpu_ns": on_cpu / calls}
    if cuda:
        import torch

        pool = [torch.cuda.Event(enable_timing=True) for _ in range(64)]
        for e in pool:
            e.record()
        empty_cpu, empty_wall = _loop(calls, lambda i: None)
        new_cpu, new_wall = _loop(calls, lambda i: torch.cuda.Event(enable_timing=True).record())
        torch.cuda.synchronize()
        rec_cpu, rec_wall = _loop(calls, lambda i: pool[i % 64].record())
        torch.cuda.synchronize()
        out["event_new"] = {"cpu_ns": (new_cpu - empty_cpu) / calls, "wall_ns": (new_wall - empty_wall) / calls}
        out["event_record"] = {"cpu_ns": (rec_cpu - empty_cpu) / calls, "wall_ns": (rec_wall - empty_wall) / calls}
    return out


def per_cycle(inter: dict[str, Any], dire: dict[str, Any]) -> dict[str, float]:
    """The direct figures times what one cycle records, against the median "off" cycle."""
    r, m = inter["ranges_per_cycle"], inter["markers_per_cycle"]
    cpu = r * dire["range"]["cpu_ns"] + m * dire["marker"]["cpu_ns"]
    wall = r * dire["range"]["wall_ns"] + m * dire["marker"]["wall_ns"]
    return {"host_cpu_ns": cpu, "host_wall_ns": wall, "cuda_events": 2 * r / dire.get("events_every", 1),
            "host_cpu_pct": 100 * cpu / inter["off_median_ns"], "host_wall_pct": 100 * wall / inter["off_median_ns"]}


def report(t: dict[str, Any]) -> list[str]:
    i, d, p = t["interleaved"], t["direct"], t["per_cycle"]
    ms = 1e6
    return [
        f"timing mode, verify graphed, interleaved per cycle ({i['pairs']} pairs, order random per pair): "
        f"cycle {i['off_median_ns'] / ms:.3f} ms off (p10-p90 {i['off_p10_p90_ns'][0] / ms:.3f}-"
        f"{i['off_p10_p90_ns'][1] / ms:.3f}), on - off: mean {i['diff_mean_ns'] / 1e3:+.1f} us "
        f"[95% CI {i['diff_mean_ci_ns'][0] / 1e3:+.1f}, {i['diff_mean_ci_ns'][1] / 1e3:+.1f}] = "
        f"{i['diff_mean_pct']:+.2f}% [{i['diff_mean_ci_pct'][0]:+.2f}%, {i['diff_mean_ci_pct'][1]:+.2f}%]; "
        f"median {i['diff_median_ns'] / 1e3:+.1f} us [{i['diff_median_ci_ns'][0] / 1e3:+.1f}, "
        f"{i['diff_median_ci_ns'][1] / 1e3:+.1f}] = {i['diff_median_pct']:+.2f}% "
        f"[{i['diff_median_ci_pct'][0]:+.2f}%, {i['diff_median_ci_pct'][1]:+.2f}%] (bootstrap, "
        f"{i['resamples']} resamples; target < 1%)",
        f"timing mode, direct: one phase range {d['range']['cpu_ns']:,.0f} CPU ns ({d['range']['wall_ns']:,.0f} wall) "
        f"more with the recorder on, one facts marker {d['marker']['cpu_ns']:,.0f} ({d['marker']['wall_ns']:,.0f}) "
        f"({d['calls']:,} calls each; CUDA events on every {d['events_every']}th range of a phase); a cycle records {i['ranges_per_cycle']:.1f} ranges + "
        f"{i['markers_per_cycle']:.1f} markers: {p['host_cpu_ns'] / 1e3:.1f} us host CPU "
        f"({p['host_wall_ns'] / 1e3:.1f} us wall), {p['cuda_events']:.2f} CUDA events per cycle = "
        f"{p['host_cpu_pct']:.3f}% ({p['host_wall_pct']:.3f}%) of a graphed cycle; split: a range without "
        f"CUDA events {d['range_no_events']['cpu_ns']:,.0f} CPU ns, with them on every range "
        f"{d['range_events_always']['cpu_ns']:,.0f}"
        + (f", a new torch.cuda.Event made + recorded {d['event_new']['cpu_ns']:,.0f}, a pooled one recorded "
           f"{d['event_record']['cpu_ns']:,.0f}" if "event_new" in d else ""),
    ]
