"""The CUDA-event pool of RangeRecorder (timing mode) used from several threads at once: no event is
handed to two ranges, and every range reads its own pair (a stand-in event class, no GPU here)."""

from __future__ import annotations

import threading
import time
from typing import Any

from tracekit.collectors.ranges import RangeRecorder


class StandInEvent:
    """torch.cuda.Event's surface the recorder uses; query() yields the GIL, as a real query can."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0

    def record(self) -> None:
        self.t = time.perf_counter_ns()

    def query(self) -> bool:
        time.sleep(0)
        return True

    def elapsed_time(self, end: Any) -> float:
        return (end.t - self.t) / 1e6


def test_pool_shared_by_threads_hands_each_event_once() -> None:
    rec = RangeRecorder()
    rec._event = StandInEvent  # what cuda_events=True sets, without torch
    rec._sync = lambda: None  # type: ignore[method-assign]  # no device to synchronize
    n_threads, per = 8, 400
    start = threading.Barrier(n_threads)

    def work(k: int) -> None:
        start.wait()
        for _ in range(per):
            rec.close(rec.open(f"phase{k}"))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gpu = rec._gpu_ns()
    assert len(gpu) == n_threads * per and all(g is not None and g >= 0 for g in gpu)
    # every event returned to the pool exactly once: no duplicate in the free list
    assert len({id(e) for e in rec._free}) == len(rec._free)
    # and the pool never grew past what the threads could hold at once (two events per open range)
    assert len(rec._free) <= 2 * n_threads + 64 * n_threads
