"""Build of tracekit's compiled core (``tracekit._core``); everything else is in pyproject.toml.

The extension is plain C over the CPython buffer protocol (no numpy headers, no third-party
build requirement). It is optional: without a C compiler the package still installs and
runs the numpy reference paths (``tracekit._native``); CI checks it was built.
"""

from setuptools import Extension, setup

# The Arrow C data/stream interface structs, one header for _kineto.c and _walk.c: a dependency
# (rebuilds when it changes) and, through depends, part of the sdist.
ARROW_C = ["tracekit/arrow_c.h"]

setup(
    ext_modules=[
        Extension("tracekit._core", ["tracekit/_core.c"], extra_compile_args=["-O2", "-std=c99"], optional=True),
        Extension("tracekit._kineto", ["tracekit/_kineto.c"], depends=ARROW_C, extra_compile_args=["-O2", "-std=c99"], optional=True),
        Extension("tracekit._walk", ["tracekit/_walk.c"], depends=ARROW_C, extra_compile_args=["-O2", "-std=c99"], optional=True),
    ]
)
