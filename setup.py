"""Build of tracekit's compiled core (``tracekit._core``); everything else is in pyproject.toml.

The extension is plain C over the CPython buffer protocol (no numpy headers, no third-party
build requirement). It is optional: without a C compiler the package still installs and
runs the numpy reference paths (``tracekit._native``); CI checks it was built.
"""

from setuptools import Extension, setup

# The headers the modules share (the Arrow C data/stream interface structs for _kineto.c and
# _walk.c; the buffer helpers for _core.c and _walk.c; the string interner for _kineto.c and
# _walk.c): dependencies (a module rebuilds when one
# changes) and, through depends, part of the sdist. -Wall here; -Werror only in CI (.ci/run compiles
# each module with it), since the extensions are optional and another compiler's new warning must
# not silently leave a user on the slower reference paths.
ARROW_C = ["tracekit/arrow_c.h"]
BUF = ["tracekit/buf.h"]
INTERN = ["tracekit/intern.h"]
FLAGS = ["-O2", "-std=c99", "-Wall"]

setup(
    ext_modules=[
        Extension("tracekit._core", ["tracekit/_core.c"], depends=BUF, extra_compile_args=FLAGS, optional=True),
        Extension("tracekit._kineto", ["tracekit/_kineto.c"], depends=ARROW_C + INTERN, extra_compile_args=FLAGS, optional=True),
        Extension("tracekit._walk", ["tracekit/_walk.c"], depends=ARROW_C + BUF + INTERN, extra_compile_args=FLAGS, optional=True),
    ]
)
