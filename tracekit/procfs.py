"""What Linux says about a process (``/proc/PID/stat``): its state and its start time."""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (the first is the state), or None when
    there is no such process (or no /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()


def start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, to tell a reused pid apart."""
    fields = stat_fields(pid)
    return None if fields is None or len(fields) < 20 else fields[19]


def is_stopped(pid: int) -> bool:
    """The process is stopped by a signal (SIGSTOP, SIGTSTP: state T) or by a tracer (t)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] in ("T", "t")


__all__ = ["is_stopped", "start_ticks", "stat_fields"]
