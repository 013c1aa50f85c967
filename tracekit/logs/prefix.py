"""The logging prefixes of the engines: time and rank tags of a line (what precedes its message).

- SGLang (``configure_logger``, sglang/srt/utils/common.py): ``[%(asctime)s{.ms}{prefix}] `` with
  ``datefmt="%Y-%m-%d %H:%M:%S"`` and the scheduler's prefix (``run_scheduler_process``,
  managers/scheduler.py: `` DPd``, `` PPp``, `` ATTN_CPc``, `` MOE_DPm``, `` TPt``, `` EPe``, each
  only when that parallelism is on); under Ray a ``(Name pid=N, ip=...)`` before it. DP / TP / EP /
  PP become columns; ATTN_CP and MOE_DP are read past.
- vLLM (vllm/logger.py ``_FORMAT``): ``(process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] ``
  (``(EngineCore_DP0 pid=2811)``; older versions without the process part and with ``file.py:line]``).

Times are the server's wall clock as printed (no time zone): stored as ns since the epoch read as
UTC. vLLM prints no year: the year of the file's modification time is used and recorded in the
manifest (``year_assumed``).
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

_PROC = r"\((?P<proc>[\w.-]+?) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)\s*"
SGLANG: Final = re.compile(r"(?:" + _PROC + r")?\[(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,6}))?"
                           r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\]")
VLLM: Final = re.compile(r"(?:" + _PROC + r")?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
                         r"(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d{1,6}))? "
                         r"\[?(?P<file>[\w./-]+):(?P<lineno>\d+)\]")
_TAG: Final = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_PROC_DP: Final = re.compile(r"_DP(\d+)$")

TAGS: Final = ("dp", "tp", "ep", "pp")


@dataclass(frozen=True)
class Prefix:
    time_ns: int | None
    tags: dict[str, int]  # dp / tp / ep / pp / pid
    proc: str | None


@lru_cache(maxsize=4096)
def _ns(y: int, mo: int, d: int, hms: str, frac: str | None) -> int | None:
    try:
        h, mi, s = (int(x) for x in hms.split(":"))
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and s < 62):
            return None
        secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    sub = int((frac or "0").ljust(9, "0")[:9])
    return secs * 1_000_000_000 + sub


def parse_prefix(text: str, year: int) -> Prefix:
    """The time and tags in ``text`` (the part of a line before its message); empty when none."""
    tags: dict[str, int] = {}
    m = SGLANG.search(text)
    if m is not None:
        y, mo, d = (int(x) for x in m["date"].split("-"))
        t = _ns(y, mo, d, m["hms"], m["frac"])
        for name, num in _TAG.findall(m["tags"] or ""):
            if name.lower() in TAGS:
                tags[name.lower()] = int(num)
    else:
        m = VLLM.search(text)
        if m is None:
            return Prefix(None, tags, None)
        mo, d = (int(x) for x in m["md"].split("-"))
        t = _ns(year, mo, d, m["hms"], m["frac"])
    proc = m["proc"]
    if m["pid"] is not None:
        tags["pid"] = int(m["pid"])
    if proc is not None:
        dp = _PROC_DP.search(proc)
        if dp is not None:
            tags.setdefault("dp", int(dp.group(1)))
    return Prefix(t, tags, proc)


__all__ = ["SGLANG", "TAGS", "VLLM", "Prefix", "parse_prefix"]
