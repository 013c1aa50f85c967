"""Terminal text: every name, path and value a command prints is text, never markup or control codes.

One rule for all terminal output. :func:`shown` writes control characters (C0 but tab and newline,
DEL, C1: ANSI/OSC escape sequences start with them) as visible ``\\xNN`` escapes; :class:`tracekit.render.console.SafeConsole`
(the console of every table and line tracekit prints with rich) applies it to every string it
renders and never reads ``[...]`` as markup (a kernel named ``foo[bar]`` or ``[/x]`` prints as
is; styles are given with ``style=``, never inside the text); :func:`echo` is ``click.echo``
through :func:`shown`. JSON documents need nothing: ``json.dumps`` escapes control characters.
"""

from __future__ import annotations

import re

import click

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` with every control character but tab and newline written as ``\\xNN``."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def echo(message: str = "", err: bool = False) -> None:
    """``click.echo`` of one line (or document) with control characters escaped."""
    click.echo(shown(message), err=err)


__all__ = ["echo", "shown"]
