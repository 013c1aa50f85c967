"""Attribution buckets of the phase instances, as columns, for the GPU-window phase slices.

``attribution_buckets`` runs ``tracekit.analyzers.attribution.attribute_instances`` and keeps its
bucket columns as arrays (``BucketTable``: one row per (rank, phase_id), the nonzero buckets of a
row are its args). The table is also a read-only mapping (rank, phase_id) -> {bucket: ns} (nonzero
buckets only; a repeated key keeps its last row), the form ``layout.add_buckets`` (the reference)
reads; ``add_bucket_args`` (the compiled layout) joins it to the slices on integer keys and builds
each instance's arg tuple from the arrays, with no dict per instance.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np
import numpy.typing as npt
import polars as pl

from tracekit.errors import TracekitError
from tracekit.schema import GPU_KINDS, GPU_RANGE, RANGE

if TYPE_CHECKING:
    from tracekit.export.layout import ArgSet, ArgValue

I64 = npt.NDArray[np.int64]


class BucketTable(Mapping[tuple[int, int], Mapping[str, int]]):
    """Buckets per phase instance: ``rank``, ``phase_id`` (int64, one row per instance with at least
    one nonzero bucket), ``ns`` (int64, rows x ``names``; 0 = no such bucket)."""

    def __init__(self, rank: I64, phase_id: I64, names: Sequence[str], values: npt.NDArray[np.int64]) -> None:
        keep = np.flatnonzero((values != 0).any(axis=1)) if values.size else np.zeros(0, np.int64)
        self.rank = np.ascontiguousarray(rank[keep], dtype=np.int64)
        self.phase_id = np.ascontiguousarray(phase_id[keep], dtype=np.int64)
        self.names = tuple(names)
        self.ns = np.ascontiguousarray(values[keep], dtype=np.int64).reshape(keep.size, len(self.names))
        self._dict: dict[tuple[int, int], dict[str, int]] | None = None

    def as_dict(self) -> dict[tuple[int, int], dict[str, int]]:
        if self._dict is None:
            d: dict[tuple[int, int], dict[str, int]] = {}
            for r, p, row in zip(self.rank.tolist(), self.phase_id.tolist(), self.ns.tolist(), strict=True):
                d[(r, p)] = {k: v for k, v in zip(self.names, row, strict=True) if v}
            self._dict = d
        return self._dict

    def __getitem__(self, key: tuple[int, int]) -> Mapping[str, int]:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    def __bool__(self) -> bool:  # every row has a bucket: empty exactly when the mapping is
        return bool(self.rank.size)

    def args(self, rows: I64) -> list[tuple[tuple[str, ArgValue], ...]]:
        """The ``bucket.<name>`` args of table rows ``rows`` (nonzero buckets, in column order)."""
        labels = [f"bucket.{k}" for k in self.names]
        return [tuple([(lab, v) for lab, v in zip(labels, row, strict=True) if v]) for row in self.ns[rows].tolist()]


def attribution_buckets(events: pl.DataFrame, warnings: list[str]) -> BucketTable | None:
    """(rank, phase_id) -> {bucket: ns} of every phase instance (``tracekit.analyzers.attribution``)."""
    from tracekit.analyzers.attribution import BUCKET_COLUMNS, attribute_instances

    if not events.select(pl.col("kind").is_in(list(GPU_KINDS)).any()).item():
        return None
    inst_ids = (events.lazy().select("rank", "kind", "phase_id")
                .filter(pl.col("kind").is_in([RANGE, GPU_RANGE]) & pl.col("phase_id").is_not_null())
                .select("rank", "phase_id").collect())
    if inst_ids.unique().height != inst_ids["phase_id"].n_unique():
        warnings.append("phase ids repeat across ranks in this run (instances numbered per rank): "
                        "attribution buckets left out of the phase slices")
        return None
    try:
        inst = attribute_instances(events)
    except TracekitError as exc:
        warnings.append(f"attribution buckets left out of the phase slices: {exc.message}")
        return None
    cols = [c for c in BUCKET_COLUMNS if c in inst.columns]
    inst = inst.filter(pl.col("rank").is_not_null() & pl.col("phase_id").is_not_null())
    vals = inst.select(pl.col(c).fill_null(0).cast(pl.Int64) for c in cols).to_numpy() if cols else np.zeros((inst.height, 0))
    return BucketTable(inst["rank"].cast(pl.Int64).to_numpy(), inst["phase_id"].cast(pl.Int64).to_numpy(),
                       [c[:-3] for c in cols], np.asarray(vals, dtype=np.int64).reshape(inst.height, len(cols)))


class ArgSets(Sequence["ArgSet"]):
    """The arg sets of a layout: ``base`` (distinct tuples), then one set per GPU-window phase slice
    with buckets: its base set ``ext_base[e]`` followed by the ``bucket.<name>`` args of table row
    ``ext_row[e]``, kept as columns (the encoder writes them from the arrays); a tuple is built
    only when one is read."""

    def __init__(self, base: list[ArgSet], ext_base: I64, ext_row: I64, table: BucketTable) -> None:
        self.base = base
        self.ext_base = ext_base
        self.ext_row = ext_row
        self.table = table

    def __len__(self) -> int:
        return len(self.base) + int(self.ext_row.size)

    @overload
    def __getitem__(self, i: int) -> ArgSet: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[ArgSet]: ...
    def __getitem__(self, i: int | slice) -> ArgSet | Sequence[ArgSet]:
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        nb = len(self.base)
        if i < nb:
            return self.base[i]
        e = i - nb
        return self.base[int(self.ext_base[e])] + self.table.args(self.ext_row[e:e + 1])[0]

    def __iter__(self) -> Iterator[ArgSet]:
        yield from self.base
        extra = self.table.args(self.ext_row)
        yield from map(operator.add, [self.base[a] for a in self.ext_base.tolist()], extra)

    def nonempty(self) -> npt.NDArray[np.bool_]:
        """Per set: has at least one arg (every extended set has a bucket)."""
        return np.concatenate([np.array([len(a) > 0 for a in self.base], dtype=bool), np.ones(self.ext_row.size, bool)])

    def keys_in_order(self) -> list[str]:
        """Arg names in order of first appearance over the sets (as iterating them would give)."""
        keys: dict[str, None] = {}
        for a in self.base:
            for k, _ in a:
                keys.setdefault(k)
        if self.ext_row.size:
            seen = self.table.ns[self.ext_row] != 0
            first = np.where(seen.any(axis=0), seen.argmax(axis=0), -1)
            cols = [j for j in np.lexsort((np.arange(first.size), first)).tolist() if first[j] >= 0]
            for j in cols:
                keys.setdefault(f"bucket.{self.table.names[j]}")
        return list(keys)


def add_bucket_args(rows: I64, rank: I64, phase_id: I64, argset_arr: I64, argsets: list[ArgSet], table: BucketTable) -> ArgSets:
    """``layout.add_buckets`` on a ``BucketTable``: the GPU-window phase slices ``rows`` (ascending) whose
    (rank, phase_id) has buckets get a new arg set each (their own + ``bucket.<name>`` args), numbered
    after ``argsets`` in row order (``argset_arr`` updated). The same sets as the reference, as columns."""
    nt = int(table.rank.size)
    none = ArgSets(argsets, np.zeros(0, np.int64), np.zeros(0, np.int64), table)
    if nt == 0 or rows.size == 0:
        return none
    from tracekit.export.fastlayout import _pack, first_seen

    # the table's keys reversed: the first-seen table row of a key is its last row (a dict keeps the last)
    rev = np.arange(nt - 1, -1, -1, dtype=np.int64)
    keys = _pack([np.concatenate([table.rank[rev], rank.astype(np.int64)]),
                  np.concatenate([table.phase_id[rev], phase_id.astype(np.int64)])])
    ids, first = first_seen(keys)
    f = first[ids[nt:]]
    hit = np.flatnonzero(f < nt)
    if hit.size == 0:
        return none
    n0 = len(argsets)
    out = ArgSets(argsets, argset_arr[rows[hit]].copy(), rev[f[hit]], table)
    argset_arr[rows[hit]] = np.arange(n0, n0 + hit.size, dtype=np.int64)
    return out


__all__ = ["ArgSets", "BucketTable", "add_bucket_args", "attribution_buckets"]
