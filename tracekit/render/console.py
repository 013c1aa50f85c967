"""The rich console of every table and line tracekit prints: plain text, control characters escaped
(the rule: ``tracekit.render.text``). Kept apart from ``text`` so a command that prints no table
does not import rich."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from tracekit.render.text import shown


class SafeConsole(Console):
    """A rich Console that renders every string as plain text (no markup) with control characters escaped."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["markup"] = False
        super().__init__(**kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        kwargs["markup"] = False
        return super().render_str(shown(text), **kwargs)


__all__ = ["SafeConsole"]
