from typing import Any

K_KERNEL: int
K_MEMCPY: int
K_MEMSET: int
K_LAUNCH: int

def configure(*, nb: int, n_work: int, memory: int, n_event_codes: int, launch: int, idle: int) -> None: ...
def codes(stream: Any, names: tuple[str, ...], values: Any, out: Any, mask: Any = ..., want: int = ..., /) -> None: ...
def trim() -> None: ...
def take(stream: Any, src: Any, head_vals: Any, head_ok: Any, fill: int, out_vals: Any, out_ok: Any, /) -> None: ...
def intern(stream: Any, rows: Any, null_as: str | None, out: Any, /) -> list[str]: ...
def match(g: Any, op: Any, seqn: Any, rk: Any, start: Any, dur: Any, wait: Any, ok: Any, /) -> bool: ...
def walk_rank(
    *,
    columns: dict[str, Any],
    luts: bytes,
    dense: Any,
    i_tid: Any,
    host_start: Any,
    is_host: Any,
    k_lo: int,
    latency: int,
    outs: dict[str, Any],
    coll_out: dict[str, Any] | None,
) -> tuple[int, bytes, int, list[str], list[str]]: ...
