"""Chrome trace JSON writer (``.json`` / ``.json.gz``), for tools that only read JSON.

Same layout as the Perfetto export: one process per rank, one ``tid`` per track
(lanes included) named by ``thread_name`` metadata, complete (``X``) slices,
counters (``C``), flows (``s``/``f`` with ``bp: "e"``). Timestamps are exact:
``ts``/``dur`` are µs printed with three decimals from integer ns (never through a
float), relative to ``baseTimeNanoseconds`` (Kineto's convention: absolute ns =
base + ts * 1000), which keeps them within float64 precision for readers that
parse numbers as doubles. Written in batches, built with polars string
expressions; gzip output has a zero mtime, so the bytes are deterministic.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import IO, Any, Final

import numpy as np
import polars as pl

from tracekit import __version__
from tracekit.export.layout import INT_ARGS, Layout
from tracekit.exporters import WriteContext

BATCH: Final = 1 << 17


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _us(col: pl.Expr) -> pl.Expr:
    """Integer ns -> decimal µs text with exactly three decimals."""
    return pl.concat_str([(col // 1000).cast(pl.String), pl.lit("."), (col % 1000).cast(pl.String).str.zfill(3)])


def base_ns(lay: Layout) -> int:
    vals = [int(lay.start.min())] if lay.n_slices else []
    if lay.n_counters:
        vals.append(int(lay.c_ts.min()))
    return min(vals) if vals else 0


def _metadata(lay: Layout) -> list[str]:
    out: list[str] = []
    pid_of = {t.uuid: t.pid for t in lay.tracks if t.kind == "process"}
    for t in lay.tracks:
        if t.kind == "process":
            out.append(f'{{"ph":"M","name":"process_name","pid":{t.pid},"tid":0,"args":{{"name":{_q(t.name)}}}}}')
            out.append(f'{{"ph":"M","name":"process_sort_index","pid":{t.pid},"tid":0,"args":{{"sort_index":{t.rank}}}}}')
            if t.labels:
                out.append(f'{{"ph":"M","name":"process_labels","pid":{t.pid},"tid":0,"args":{{"labels":{_q(",".join(t.labels))}}}}}')
        elif t.kind == "slice":
            pid = pid_of[t.parent]
            out.append(f'{{"ph":"M","name":"thread_name","pid":{pid},"tid":{t.uuid},"args":{{"name":{_q(t.name)}}}}}')
            out.append(f'{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{t.uuid},"args":{{"sort_index":{t.order}}}}}')
    return out


def _argset_json(lay: Layout) -> list[str]:
    out = []
    for aset in lay.argsets:
        parts = []
        for k, v in aset:
            if isinstance(v, bool):
                val = "true" if v else "false"
            elif isinstance(v, int):
                val = str(v)
            elif isinstance(v, float):
                val = repr(v) if np.isfinite(v) else _q(repr(v))
            else:
                val = _q(str(v))
            parts.append(f"{_q(k)}:{val}")
        out.append(",".join(parts))
    return out


def iter_chunks(lay: Layout, batch: int = BATCH, meta: dict[str, Any] | None = None) -> Iterator[str]:
    base = base_ns(lay)
    head = {"displayTimeUnit": "ns", "baseTimeNanoseconds": base,
            "otherData": {"producer": f"tracekit {__version__}", **(meta or {})}}
    yield json.dumps(head, ensure_ascii=False, sort_keys=True)[:-1] + ',"traceEvents":[\n'
    yield ",\n".join(_metadata(lay))
    pid_of_proc = {t.uuid: t.pid for t in lay.tracks if t.kind == "process"}
    parent = {t.uuid: t.parent for t in lay.tracks}
    tname = {t.uuid: t.name for t in lay.tracks}
    track_pid = pl.DataFrame({"track": list(parent), "pid": [pid_of_proc.get(parent[u], pid_of_proc.get(u, 0)) for u in parent]},
                             schema={"track": pl.Int64(), "pid": pl.Int64()})
    names = pl.Series("n", [_q(n) for n in lay.names], dtype=pl.String())
    cats = pl.Series("c", [_q(c) for c in lay.cats], dtype=pl.String())
    asets = pl.Series("a", _argset_json(lay), dtype=pl.String())
    for lo in range(0, lay.n_slices, batch):
        hi = min(lo + batch, lay.n_slices)
        aid = lay.argset[lo:hi]
        cols: dict[str, Any] = {
            "track": lay.track[lo:hi], "start": lay.start[lo:hi] - base, "dur": lay.dur[lo:hi],
            "name": names.gather(lay.name_id[lo:hi]), "cat": cats.gather(lay.cat_id[lo:hi]), "aid": aid,
            "aset": asets.gather(np.maximum(aid, 0)) if asets.len() else pl.Series([None] * (hi - lo), dtype=pl.String()),
        }
        for k in INT_ARGS:
            cols[k] = lay.ints[k][0][lo:hi]
            cols[f"_{k}"] = lay.ints[k][1][lo:hi]
        df = pl.DataFrame(cols).join(track_pid, on="track", how="left", maintain_order="left")
        ints = [pl.when(pl.col(f"_{k}")).then(pl.concat_str([pl.lit(f'"{k}":'), pl.col(k).cast(pl.String)])) for k in INT_ARGS]
        aset = pl.when(pl.col("aid") >= 0).then(pl.col("aset"))
        lines = df.select(pl.concat_str([
            pl.lit('{"ph":"X","name":'), pl.col("name"), pl.lit(',"cat":'), pl.col("cat"),
            pl.lit(',"pid":'), pl.col("pid").cast(pl.String), pl.lit(',"tid":'), pl.col("track").cast(pl.String),
            pl.lit(',"ts":'), _us(pl.col("start")), pl.lit(',"dur":'), _us(pl.col("dur")),
            pl.lit(',"args":{'), pl.concat_str([aset, *ints], separator=",", ignore_nulls=True), pl.lit("}}"),
        ]).alias("l"))["l"]
        yield ",\n" + ",\n".join(lines.to_list())
    for lo in range(0, lay.n_counters, batch):
        hi = min(lo + batch, lay.n_counters)
        df = pl.DataFrame({"track": lay.c_track[lo:hi], "ts": lay.c_ts[lo:hi] - base, "v": lay.c_value[lo:hi],
                           "is_int": lay.c_is_int[lo:hi]}).join(track_pid, on="track", how="left", maintain_order="left")
        df = df.with_columns(pl.col("track").replace_strict({u: _q(n) for u, n in tname.items()}, return_dtype=pl.String).alias("name"))
        val = pl.when(pl.col("is_int")).then(pl.col("v").cast(pl.Int64).cast(pl.String)).otherwise(pl.col("v").cast(pl.String))
        lines = df.select(pl.concat_str([
            pl.lit('{"ph":"C","name":'), pl.col("name"), pl.lit(',"pid":'), pl.col("pid").cast(pl.String),
            pl.lit(',"ts":'), _us(pl.col("ts")), pl.lit(',"args":{"value":'), val, pl.lit("}}"),
        ]).alias("l"))["l"]
        yield ",\n" + ",\n".join(lines.to_list())
    if lay.flow_id.size:
        tp = dict(zip(track_pid["track"].to_list(), track_pid["pid"].to_list(), strict=True))
        pid_arr = np.vectorize(tp.__getitem__, otypes=[np.int64])(lay.track) if lay.n_slices else np.zeros(0, np.int64)
        for lo in range(0, lay.flow_id.size, batch):
            s, d, f = lay.flow_src[lo:lo + batch], lay.flow_dst[lo:lo + batch], lay.flow_id[lo:lo + batch]
            df = pl.DataFrame({"id": f, "sp": pid_arr[s], "st": lay.track[s], "sts": lay.start[s] - base,
                               "dp": pid_arr[d], "dt": lay.track[d], "dts": lay.start[d] - base})
            lines = df.select(pl.concat_str([
                pl.lit('{"ph":"s","name":"flow","cat":"flow","id":'), pl.col("id").cast(pl.String),
                pl.lit(',"pid":'), pl.col("sp").cast(pl.String), pl.lit(',"tid":'), pl.col("st").cast(pl.String),
                pl.lit(',"ts":'), _us(pl.col("sts")), pl.lit('},\n{"ph":"f","bp":"e","name":"flow","cat":"flow","id":'),
                pl.col("id").cast(pl.String), pl.lit(',"pid":'), pl.col("dp").cast(pl.String), pl.lit(',"tid":'),
                pl.col("dt").cast(pl.String), pl.lit(',"ts":'), _us(pl.col("dts")), pl.lit("}"),
            ]).alias("l"))["l"]
            yield ",\n" + ",\n".join(lines.to_list())
    yield "\n]}\n"


def write_chrome(lay: Layout, out: IO[bytes], *, gz: bool, meta: dict[str, Any] | None = None) -> int:
    """Stream the JSON trace to ``out`` (gzip-compressed when ``gz``); returns uncompressed bytes."""
    total = 0
    sink: Any = gzip.GzipFile(fileobj=out, mode="wb", compresslevel=3, mtime=0, filename="") if gz else out
    try:
        for chunk in iter_chunks(lay, meta=meta):
            data = chunk.encode("utf-8", "surrogatepass")
            sink.write(data)
            total += len(data)
    finally:
        if gz:
            sink.close()
    return total


def write(lay: Layout, out: IO[bytes], ctx: WriteContext) -> int:
    """The registry's writer (``tracekit.exporters``): gzip when the path ends in .gz."""
    meta = {"selection": ctx.selection, "source": ctx.source}
    return write_chrome(lay, out, gz=ctx.path.lower().endswith(".gz"), meta=meta)


def estimate_size(lay: Layout) -> int:
    """Uncompressed JSON bytes, roughly."""
    return 340 * lay.n_slices + 90 * lay.n_counters + 200 * int(lay.flow_id.size)


__all__ = ["base_ns", "estimate_size", "iter_chunks", "write", "write_chrome"]
