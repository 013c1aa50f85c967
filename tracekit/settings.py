"""The ``TRACEKIT_*`` settings: every switch once, typed and checked in one place.

    s = Settings.from_env()          # ConfigError (one line, exit 2) for a value that cannot work
    s.ingest_threads                 # None: the usable cores

``current()`` is the process's settings, built from its environment (again only when one of
the variables changed: a test that sets one sees it). The CLI builds them once before a command
runs, so a bad value is refused before anything is read; the modules read the fields they use
from ``current()`` instead of the environment. Rank processes inherit the environment and build
their own. ``SWITCHES`` is the table ``docs/settings.md`` lists.

Not here: the SGLang integration's ``TRACEKIT_SGLANG`` / ``TRACEKIT_SGLANG_DIR``, which the
launcher sets for the server's processes (the plugin's contract, ``collectors/sglang``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from tracekit.errors import ConfigError

SWITCHES: Final[dict[str, str]] = {
    "TRACEKIT_PURE": "1: the numpy / Python reference paths instead of the compiled modules",
    "TRACEKIT_INGEST_THREADS": "threads of ingest's rank files (default: the usable cores)",
    "TRACEKIT_INGEST_WHOLE_MB": "ingest -o FILE in one process while the inputs' JSON is at most this many MiB "
                                "(default 512); past it, rank by rank (docs/scale.md); 0: always rank by rank",
    "TRACEKIT_ANALYSIS_WHOLE_MB": "attribute, ranks and gap read a one-file run in one table while it is at most "
                                  "this many MiB (default 16); past it, rank by rank (docs/scale.md); 0: always "
                                  "rank by rank",
    "TRACEKIT_ATTRIBUTE_THREADS": "threads of the compiled attribution's rank passes (default: the usable cores)",
    "TRACEKIT_MAX_GZIP_RATIO": "how many times its size a gzip input may inflate to (a decompression bomb's limit)",
    "TRACEKIT_TIMING_EVENTS_EVERY": "timing mode: CUDA events around every N-th instance of a phase (default 16)",
    "TRACEKIT_LITE_CUPTI": "lite mode's CUDA records: torch, or a mode of tracekit's CUPTI client",
    "TRACEKIT_CUPTI_TRIM": "what lite switches off in CUPTI: a comma list (lean, dropped, CUPTI kinds); empty: nothing",
    "TRACEKIT_CUPTI_INCLUDE": "a folder holding cupti.h for the CUPTI client's build",
    "TRACEKIT_CUPTI_CLIENT": "the CUPTI client's library file (built there when missing)",
    "TRACEKIT_NVTX": "1: NVTX ranges beside tracekit's phase ranges; 0: never (default: when a consumer is attached)",
    "TRACEKIT_NORMAL_EXIT": "1: the interpreter's own exit (for tools that write at exit)",
    "TRACEKIT_EXPORT_BATCH_EVENTS": "events of consecutive ranks per Perfetto export stream (default 524288; memory)",
}


@dataclass(frozen=True)
class Settings:
    pure: bool = False
    ingest_threads: int | None = None
    ingest_whole_mb: int | None = None  # None: tracekit.ingest.plan.WHOLE_MAX_MB
    analysis_whole_mb: int | None = None  # None: tracekit.analyzers.ranked.WHOLE_MAX_MB
    attribute_threads: int | None = None
    max_gzip_ratio: int | None = None
    timing_events_every: int | None = None
    lite_cupti: str | None = None  # checked against the client's modes by collectors/session.py
    cupti_trim: tuple[str, ...] | None = None  # None: lite's default; () nothing
    cupti_include: str | None = None
    cupti_client: str | None = None
    nvtx: bool | None = None  # None: when an NVTX consumer is attached
    normal_exit: bool = False
    export_batch_events: int | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def text(name: str) -> str | None:
            v = env.get(name)
            return v.strip() if v is not None and v.strip() else None

        def count(name: str) -> int | None:
            v = text(name)
            if v is None:
                return None
            if not v.isdigit() or int(v) < 1:
                raise ConfigError(f"{name}={v!r}: not a whole number >= 1")
            return int(v)

        def size(name: str) -> int | None:  # a count that may be 0
            v = text(name)
            if v is None:
                return None
            if not v.isdigit():
                raise ConfigError(f"{name}={v!r}: not a whole number >= 0")
            return int(v)

        def flag(name: str) -> bool | None:  # lenient, as before: read at import and at exit too
            v = text(name)
            return None if v is None else v != "0"

        trim = env.get("TRACEKIT_CUPTI_TRIM")
        return cls(
            pure=text("TRACEKIT_PURE") == "1",
            ingest_threads=count("TRACEKIT_INGEST_THREADS"),
            ingest_whole_mb=size("TRACEKIT_INGEST_WHOLE_MB"),
            analysis_whole_mb=size("TRACEKIT_ANALYSIS_WHOLE_MB"),
            attribute_threads=count("TRACEKIT_ATTRIBUTE_THREADS"),
            max_gzip_ratio=count("TRACEKIT_MAX_GZIP_RATIO"),
            timing_events_every=count("TRACEKIT_TIMING_EVENTS_EVERY"),
            lite_cupti=text("TRACEKIT_LITE_CUPTI"),
            cupti_trim=None if trim is None else tuple(x.strip() for x in trim.split(",") if x.strip()),
            cupti_include=text("TRACEKIT_CUPTI_INCLUDE"),
            cupti_client=text("TRACEKIT_CUPTI_CLIENT"),
            nvtx={"0": False, "1": True}.get(text("TRACEKIT_NVTX") or ""),
            normal_exit=flag("TRACEKIT_NORMAL_EXIT") or False,
            export_batch_events=count("TRACEKIT_EXPORT_BATCH_EVENTS"),
        )


_built: tuple[tuple[str | None, ...], Settings] | None = None


def current() -> Settings:
    """This process's settings (``Settings.from_env``), built again only when a variable changed."""
    global _built
    key = tuple(os.environ.get(name) for name in SWITCHES)
    if _built is None or _built[0] != key:
        _built = (key, Settings.from_env())
    return _built[1]


__all__ = ["SWITCHES", "Settings", "current"]
