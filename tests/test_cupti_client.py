"""tracekit's CUPTI client (collectors/cupti_client.py) and the timing recorder's event pool, on the CPU.

The client's rows are checked through the one Kineto converter; the C library is built against the CUPTI
headers where they exist (a CUDA toolkit) and opened on the libcupti beside them (no GPU needed to load it;
starting it needs a driver, which these machines lack: it must then fail with CUPTI's error, not crash).
"""

from __future__ import annotations

import glob
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tracekit.collectors import cupti_client
from tracekit.collectors.cupti_client import ROW_DTYPE, ClientUnavailable, raw_frame
from tracekit.collectors.ranges import POOL_GROW, RangeRecorder
from tracekit.ingest.kineto_events import kineto_events
from tracekit.schema import KERNEL, LAUNCH, MEMCPY, SYNC

NONE = 0xFFFFFFFF
ROWS = [  # start, end, correlation, category, device, stream (thread of an API row), name id (cbid), pid
    (100, 200, 7, 3, NONE, 555, 211, 1234),  # cudaLaunchKernel
    (300, 900, 7, 0, 0, 7, 0, 1234),  # its kernel
    (210, 260, 8, 3, NONE, 555, 41, 1234),  # cudaMemcpyAsync
    (950, 990, 8, 1, 0, 7, 1, 1234),  # its copy
    (270, 280, 9, 4, NONE, 556, 652, 1234),  # cuLaunchKernelEx (driver)
    (400, 450, 9, 0, 0, 13, 0, 1234),  # its kernel, another stream
    (1000, 1100, 0, 3, NONE, 555, 131, 1234),  # cudaStreamSynchronize
    (1200, 1300, 10, 3, NONE, 555, 999, 1234),  # an id outside the launch table: named by CUPTI
]


def _events() -> Any:
    raw = raw_frame(np.array(ROWS, dtype=ROW_DTYPE), ["at::native::foo(int)", "Memcpy DtoH (Device -> Pinned)"],
                    lambda dom, cbid: f"cudaSomething_v{dom}{cbid}")
    return kineto_events(raw).events


def test_client_rows_become_launches_kernels_copies_and_syncs_through_the_one_converter() -> None:
    ev = _events()
    assert ev["kind"].to_list() == [LAUNCH, KERNEL, LAUNCH, MEMCPY, LAUNCH, KERNEL, SYNC, "runtime"]
    assert ev["name"].to_list() == ["cudaLaunchKernel", "at::native::foo(int)", "cudaMemcpyAsync",
                                    "Memcpy DtoH (Device -> Pinned)", "cuLaunchKernelEx", "at::native::foo(int)",
                                    "cudaStreamSynchronize", "cudaSomething"]
    # a launch and its GPU work share the correlation id; a sync has none
    assert ev["correlation"].to_list() == [7, 7, 8, 8, 9, 9, None, 10]
    # GPU rows: device and stream; API rows: no device, the process and its native thread id
    assert ev["device"].to_list() == [-1, 0, -1, 0, -1, 0, -1, -1]
    assert ev["stream"].to_list()[1::2][:3] == [7, 7, 13]
    host = ev.filter(ev["device"] < 0)
    assert set(host["tid"].to_list()) == {555, 556} and set(host["pid"].to_list()) == {1234}
    assert ev["start_ns"].to_list()[:2] == [100, 300] and ev["dur_ns"].to_list()[:2] == [100, 600]


def _cuda_home() -> tuple[Path, str] | None:
    inc = cupti_client.find_headers()
    libs = sorted(glob.glob(str(inc.parent / "lib*" / "libcupti.so*"))) if inc is not None else []
    return (inc, libs[0]) if inc is not None and libs else None


@pytest.mark.skipif(_cuda_home() is None, reason="no CUDA toolkit with CUPTI headers and libcupti here")
def test_library_builds_opens_libcupti_and_reports_cupti_errors(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    home = _cuda_home()
    assert home is not None
    monkeypatch.setenv("TRACEKIT_CUPTI_CLIENT", str(tmp_path / "tk.so"))
    path = cupti_client.build()
    assert path == tmp_path / "tk.so" and path.is_file()
    assert cupti_client.build() == path  # kept, not rebuilt
    lib = cupti_client._lib(path)
    assert lib.tk_row_size() == np.dtype(ROW_DTYPE).itemsize
    assert lib.tk_open(b"/nonexistent/libcupti.so") != 0 and b"dlopen" in lib.tk_error()
    assert lib.tk_open(home[1].encode()) == 0
    assert lib.tk_api_name(2, 211) == b"cudaLaunchKernel_v7000"
    lib.tk_clear()
    assert lib.tk_count() == 0
    client = cupti_client.Client("callback")
    client.lib, client._rt, client._dr = lib, [211], []
    try:
        client.start()
    except ClientUnavailable as exc:  # no GPU driver here: CUPTI refuses, the client says so
        assert "CUPTI error" in str(exc)
    else:  # a GPU machine: it records
        client.stop()
        assert client.info["dropped_records"] == 0


def test_build_without_headers_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CUPTI_CLIENT", str(tmp_path / "none.so"))
    monkeypatch.setattr(cupti_client, "find_headers", lambda: None)
    with pytest.raises(ClientUnavailable, match="no CUPTI headers"):
        cupti_client.build()
    with pytest.raises(ValueError, match="CUPTI client mode"):
        cupti_client.Client("everything")
    # an unreadable source or unwritable cache is a reason to fall back, not a crash
    monkeypatch.setattr(cupti_client, "build", lambda: (_ for _ in ()).throw(PermissionError("cache")))
    with pytest.raises(ClientUnavailable, match="PermissionError: cache"):
        cupti_client.Client("callback").open()


def test_lite_source_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.collectors.session import LITE_CUPTI, lite_cupti_source

    monkeypatch.delenv("TRACEKIT_LITE_CUPTI", raising=False)
    assert lite_cupti_source() == LITE_CUPTI
    monkeypatch.setenv("TRACEKIT_LITE_CUPTI", "torch")
    assert lite_cupti_source() == "torch"
    monkeypatch.setenv("TRACEKIT_LITE_CUPTI", "bogus")
    with pytest.raises(ValueError, match="TRACEKIT_LITE_CUPTI"):
        lite_cupti_source()


class FakeEvent:
    """A CUDA event stand-in: a clock read at record(); done unless the test holds it back."""

    made = 0
    clock = 0
    held: ClassVar[set[int]] = set()

    def __init__(self, enable_timing: bool = True) -> None:
        FakeEvent.made += 1
        self.t = -1
        self.id = FakeEvent.made

    def record(self) -> None:
        FakeEvent.clock += 1_000_000  # 1 ms between two records
        self.t = FakeEvent.clock

    def query(self) -> bool:
        return self.id not in FakeEvent.held

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) / 1e6  # ms, as torch gives it


def test_timing_recorder_reuses_its_events_and_reads_every_range() -> None:
    FakeEvent.made = 0
    FakeEvent.held = set()
    rec = RangeRecorder()
    rec._event = FakeEvent
    rec._sync = lambda: None  # type: ignore[method-assign]
    for i in range(10 * POOL_GROW):
        rec.close(rec.open(f"r{i}"))
    # every range read its two events' time; a few pools' worth of events served 20 pools' worth of ranges
    assert FakeEvent.made <= 2 * POOL_GROW
    gpu = rec._gpu_ns()
    assert len(gpu) == 10 * POOL_GROW and set(gpu) == {1_000_000}
    # a range whose end has not completed keeps its events until it has (or the frame waits for it)
    FakeEvent.held = {e.id for e in rec._free}
    tok = rec.open("late")
    rec.close(tok)
    assert rec._rows[-1][4] is not None
    FakeEvent.held = set()
    assert rec._gpu_ns()[-1] == 1_000_000 and rec._rows[-1][4] is None


def test_timing_recorder_samples_cuda_events_per_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.collectors.session import TIMING_EVENTS_EVERY, timing_events_every

    rec = RangeRecorder(events_every=4)
    rec._event = FakeEvent
    rec._sync = lambda: None  # type: ignore[method-assign]
    for cycle in range(8):  # two phases a cycle: each gets events on its 1st, 5th, ... instance
        for ph in ("verify", "draft"):
            rec.close(rec.open(f"tracekit:{ph}|cycle={cycle}"))
    gpu = rec._gpu_ns()
    timed = [r[0] for r, g in zip(rec._rows, gpu, strict=True) if g is not None]
    assert timed == ["tracekit:verify|cycle=0", "tracekit:draft|cycle=0", "tracekit:verify|cycle=4",
                     "tracekit:draft|cycle=4"]
    frame = rec.frame(0, 1)
    assert frame["args"].null_count() == 12
    monkeypatch.delenv("TRACEKIT_TIMING_EVENTS_EVERY", raising=False)
    assert timing_events_every() == TIMING_EVENTS_EVERY
    monkeypatch.setenv("TRACEKIT_TIMING_EVENTS_EVERY", "1")
    assert timing_events_every() == 1
    monkeypatch.setenv("TRACEKIT_TIMING_EVENTS_EVERY", "0")
    with pytest.raises(ValueError, match="TRACEKIT_TIMING_EVENTS_EVERY"):
        timing_events_every()
    with pytest.raises(ValueError, match="events_every"):
        RangeRecorder(events_every=0)


class YieldingEvent(FakeEvent):
    """FakeEvent whose query() lets another thread run, as a real query can."""

    def query(self) -> bool:
        time.sleep(0)
        return super().query()


def test_timing_recorder_pool_shared_by_threads_hands_each_event_once() -> None:
    """Eight threads opening and closing ranges at once: no event is freed twice (two ranges would then
    record on one event) and every range reads its time."""
    FakeEvent.made = 0
    FakeEvent.held = set()
    rec = RangeRecorder()
    rec._event = YieldingEvent
    rec._sync = lambda: None  # type: ignore[method-assign]
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
    assert len(gpu) == n_threads * per and all(g is not None and g > 0 for g in gpu)
    assert len({id(e) for e in rec._free}) == len(rec._free)


def test_library_cache_is_keyed_by_the_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two toolkits' CUPTI headers (record layouts differ between versions) get two cached builds."""
    monkeypatch.delenv("TRACEKIT_CUPTI_CLIENT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    paths = []
    for version in ("12.4", "13.0"):
        inc = tmp_path / version
        inc.mkdir()
        for name in ("cupti.h", "cuda.h", "cupti_activity.h"):
            (inc / name).write_text(f"/* {name} of CUDA {version} */\n")
        monkeypatch.setenv("TRACEKIT_CUPTI_INCLUDE", str(inc))
        paths.append(cupti_client.library_path())
    assert paths[0] != paths[1] and all(p.parent == tmp_path / "cache" / "tracekit" for p in paths)
    assert cupti_client.library_path() == paths[1]  # stable for the same headers


FAKE_CUPTI = r"""
/* A libcupti stand-in: every entry point tk_open resolves; which activity kinds are on, how many
 * subscribers there are, how many process-wide registrations were made; one call made to fail on demand
 * with a given CUPTI error code. */
#include <stdint.h>
static uint64_t kinds_on; static int subscribers, registrations, fail_kind = -1, code = 17; static const char *fail_call = "";
static int is(const char *c) { const char *a = fail_call, *b = c; while (*a && *a == *b) { a++; b++; } return *a == *b; }
void fake_fail(int kind, const char *call, int c) { fail_kind = kind; fail_call = call; code = c; }
uint64_t fake_kinds_on(void) { return kinds_on; }
int fake_subscribers(void) { return subscribers; }
int fake_registrations(void) { return registrations; }
int cuptiActivityRegisterCallbacks(void *a, void *b) { (void)a; (void)b; if (is("register")) return code; registrations++; return 0; }
int cuptiActivityRegisterTimestampCallback(void *f) { (void)f; registrations++; return 0; }
int cuptiSetThreadIdType(int t) { (void)t; registrations++; return 0; }
int cuptiActivityEnable(int k) { if (k == fail_kind) return code; kinds_on |= 1ull << k; return 0; }
int cuptiActivityDisable(int k) { if (is("disable")) return code; kinds_on &= ~(1ull << k); return 0; }
int cuptiActivityGetNextRecord(void *b, unsigned long n, void **r) { (void)b; (void)n; (void)r; return 3; }
int cuptiActivityFlushAll(unsigned f) { (void)f; return 0; }
int cuptiActivityEnableRuntimeApi(unsigned id, unsigned char on) { (void)id; (void)on; return is("runtime_api") ? code : 0; }
int cuptiActivityEnableDriverApi(unsigned id, unsigned char on) { (void)id; (void)on; return is("driver_api") ? code : 0; }
int cuptiSubscribe(void **h, void *cb, void *u) { (void)cb; (void)u; if (is("subscribe")) return code; subscribers++; *h = (void *)1; return 0; }
int cuptiUnsubscribe(void *h) { (void)h; subscribers--; return 0; }
int cuptiEnableCallback(unsigned on, void *h, int d, unsigned id) { (void)on; (void)h; (void)d; (void)id; return is("callback") ? code : 0; }
"""


@pytest.mark.skipif(cupti_client.find_headers() is None, reason="no CUPTI headers to build the client against")
def test_a_start_that_fails_part_way_leaves_nothing_switched_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tk_start against a stand-in libcupti that fails one call. A subscriber refused (another CUPTI client
    holds CUPTI: torch.profiler's Kineto keeps one) refuses the start in every mode before tracekit registers
    anything process-wide (buffer, time stamp, thread id callbacks), saying which client may hold it when
    CUPTI says so (error 39); a later failure switches off again what the start switched on (activity kinds,
    callbacks, the subscriber), naming the failed call; a start holds the subscriber until tk_stop, which
    gives it back even when a step before fails; a later start and stop work."""
    import ctypes
    import subprocess
    import sysconfig

    src = tmp_path / "fake_cupti.c"
    src.write_text(FAKE_CUPTI)
    fake_path = tmp_path / "libfakecupti.so"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    subprocess.run([cc, "-shared", "-fPIC", "-O1", str(src), "-o", str(fake_path)], check=True)
    fake = ctypes.CDLL(str(fake_path))
    fake.fake_kinds_on.restype = ctypes.c_uint64
    fake.fake_fail.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    monkeypatch.setenv("TRACEKIT_CUPTI_CLIENT", str(tmp_path / "tk.so"))  # a fresh copy: its own static state
    lib = cupti_client._lib(cupti_client.build())
    assert lib.tk_open(str(fake_path).encode()) == 0
    memset = 2  # CUPTI_ACTIVITY_KIND_MEMSET: enabled after the kernels and MEMCPY
    rt, dr = [211, 41], [652]

    def start(mode: str) -> int:
        return int(lib.tk_start(cupti_client.MODES[mode], cupti_client._ids(rt), len(rt), cupti_client._ids(dr), len(dr)))

    modes = ("kernels", "launch", "callback", "all")
    for code, said in ((39, b"cuptiSubscribe (another CUPTI client holds CUPTI in this process: torch.profiler, "
                            b"Nsight Systems / Compute or cuda-gdb): CUPTI error 39"),
                       (15, b"cuptiSubscribe: CUPTI error 15")):
        for mode in modes:
            fake.fake_fail(-1, b"subscribe", code)
            assert start(mode) != 0 and lib.tk_error() == said, (mode, lib.tk_error())
            assert fake.fake_registrations() == 0 and fake.fake_kinds_on() == 0 and fake.fake_subscribers() == 0, mode
    for mode, kind, call, said in (
        ("kernels", -1, b"register", b"cuptiActivityRegisterCallbacks: CUPTI error 17"),
        ("callback", -1, b"register", b"cuptiActivityRegisterCallbacks: CUPTI error 17"),
        ("launch", -1, b"runtime_api", b"cuptiActivityEnableRuntimeApi off: CUPTI error 17"),
        ("launch", -1, b"driver_api", b"cuptiActivityEnableDriverApi off: CUPTI error 17"),
        ("launch", memset, b"", b"enable MEMSET: CUPTI error 17"),
        ("callback", -1, b"callback", b"cuptiEnableCallback runtime: CUPTI error 17"),
        ("callback", memset, b"", b"enable MEMSET: CUPTI error 17"),
        ("all", memset, b"", b"enable MEMSET: CUPTI error 17"),
    ):
        fake.fake_fail(kind, call, 17)
        assert start(mode) != 0 and lib.tk_error() == said, (mode, call, lib.tk_error())
        assert fake.fake_kinds_on() == 0 and fake.fake_subscribers() == 0, (mode, call)
    fake.fake_fail(-1, b"", 17)
    for mode in modes:
        assert start(mode) == 0
        assert fake.fake_kinds_on() != 0 and fake.fake_subscribers() == 1, mode  # held for the whole window
        assert lib.tk_stop() == 0
        assert fake.fake_kinds_on() == 0 and fake.fake_subscribers() == 0, mode
    assert start("launch") == 0
    fake.fake_fail(-1, b"disable", 17)
    assert lib.tk_stop() != 0 and lib.tk_error() == b"disable RUNTIME: CUPTI error 17"
    assert fake.fake_subscribers() == 0  # given back all the same
    fake.fake_fail(-1, b"", 17)
    assert start("kernels") == 0 and lib.tk_stop() == 0
