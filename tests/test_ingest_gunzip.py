"""read_trace_bytes' gunzip: inflated into one buffer sized by the gzip trailer, every member read."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.errors import BadTraceError
from tracekit.ingest.discover import _HAVE_ISAL, _gunzip, read_trace_bytes

needs_isal = pytest.mark.skipif(not _HAVE_ISAL, reason="isal not installed: gzip.decompress is used")


def _with_isize(blob: bytes, isize: int) -> bytes:
    """``blob`` (one gzip member) with its trailer's size field replaced (the CRC kept)."""
    return blob[:-4] + (isize & 0xFFFFFFFF).to_bytes(4, "little")


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=4), st.integers(0, 9))
@settings(max_examples=150, deadline=None)
def test_every_member_exactly(parts: list[bytes], level: int) -> None:
    blob = b"".join(gzip.compress(p, compresslevel=level) for p in parts)
    out = _gunzip(blob)
    assert bytes(out) == b"".join(parts) == gzip.decompress(blob)


@needs_isal
@pytest.mark.parametrize("parts", [[b"abc", b"abc"], [b"abcdefgh", b"d"], [b"a", b"bcdefgh" * 100], [b"", b"xyz"]])
def test_several_members_whatever_the_last_trailer_says(parts: list[bytes]) -> None:
    # ISIZE is the LAST member's size: smaller, equal or larger than the first member's output
    blob = b"".join(gzip.compress(p) for p in parts)
    assert bytes(_gunzip(blob)) == b"".join(parts)


@needs_isal
def test_a_trailer_that_lies_about_the_size_is_an_error_not_a_short_read(tmp_path: Path) -> None:
    data = b'{"traceEvents": []}' * 500
    blob = gzip.compress(data)
    for isize in (1, len(data) - 1, len(data) + 1, 10**9):
        bad = _with_isize(blob, isize)
        with pytest.raises((EOFError, zlib.error, gzip.BadGzipFile, OSError)):
            gzip.decompress(bad)  # the reference refuses it too
        f = tmp_path / "t.json.gz"
        f.write_bytes(bad)
        with pytest.raises(BadTraceError, match="truncated or corrupt gzip"):
            read_trace_bytes(f)


def test_truncated_gzip_is_one_clear_error(tmp_path: Path) -> None:
    blob = gzip.compress(b'{"traceEvents": []}' * 1000)
    for cut in (len(blob) - 3, len(blob) // 2, 12):
        f = tmp_path / "t.json.gz"
        f.write_bytes(blob[:cut])
        with pytest.raises(BadTraceError, match="truncated or corrupt gzip"):
            read_trace_bytes(f)
