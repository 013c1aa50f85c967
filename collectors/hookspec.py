"""One row of an engine's hook table: which function tracekit wraps, in which versions, and why.

Every engine's hook table (collectors/<engine>/hooktable.py) is a tuple of :class:`HookSpec`:
data, never imported code. A row names its target by qualified name (``module.Class.method``,
resolved when the engine installs its hooks), the role it plays for that engine (the phase it
marks, or the loop it belongs to), the parameters the hook reads, the call sites that must
appear in the method's body in order (``calls``: see collectors/contract.py), and the half-open
version range ``[since, until)`` in which it holds. collectors/contract.py checks rows against
an engine's real source with ``ast``; the contract tests run it on the real wheels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

Version = tuple[int, int, int]

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version:
    """``"0.5.12.post1"`` -> ``(0, 5, 12)``. Raises ValueError on garbage."""
    m = _VERSION_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def as_version(version: Version | str) -> Version:
    return parse_version(version) if isinstance(version, str) else version


@dataclass(frozen=True)
class HookSpec:
    target: str  # module.Class.method
    role: str  # what the engine's runtime does with it (a phase, a loop, an accept point)
    params: tuple[str, ...] = ()  # parameter names the hook reads (after self)
    calls: tuple[str, ...] = ()  # call sites in source order ("loop:" inside a while loop, "a|b": either callee)
    since: Version = (0, 0, 0)
    until: Version | None = None  # exclusive
    worker: str = ""  # an engine's variant the row belongs to ("" every variant)
    install: str = "class"  # class: the class attribute is wrapped | instance: each object | module: torch hooks

    @property
    def module(self) -> str:
        return self.target.rsplit(".", 2)[0]

    @property
    def cls(self) -> str:
        return self.target.rsplit(".", 1)[0]

    @property
    def method(self) -> str:
        return self.target.rsplit(".", 1)[1]

    def applies(self, version: Version) -> bool:
        return version >= self.since and (self.until is None or version < self.until)


def select(rows: Iterable[HookSpec], version: Version | str) -> list[HookSpec]:
    """The rows of a hook table that hold in ``version``."""
    v = as_version(version)
    return [h for h in rows if h.applies(v)]


# A field row: (class path, attributes the hooks read, first version, first version without it).
FieldRow = tuple[str, tuple[str, ...], Version, Version | None]


def select_fields(rows: Iterable[FieldRow], version: Version | str) -> list[tuple[str, tuple[str, ...]]]:
    """The (class, attributes) rows of a field table that hold in ``version``."""
    v = as_version(version)
    return [(cls, attrs) for cls, attrs, lo, hi in rows if v >= lo and (hi is None or v < hi)]


def installed_version(dist: str) -> str | None:
    """The installed distribution's version, or None (no import of the package)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


__all__ = ["HookSpec", "Version", "as_version", "installed_version", "parse_version", "select"]
