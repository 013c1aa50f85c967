"""Phase instances as one row each, with their facts, for the forensic analyzers.

A phase instance is a ``range`` row (DESIGN.md section 4). Runs written by
tracekit's ingest/capture carry ``phase`` / ``phase_id`` and the facts on the
range rows already; for a table where they are missing (a frame built by hand,
an older run) the phase is derived from the range name with
``tracekit.phases.phase_of_span`` and the label's facts are parsed. Late facts
markers (``tracekit:facts|phase=verify|cycle=..|accept=..``) fill facts that are
still null on the instance of the same rank, phase and cycle.

Output columns: rank, phase, phase_id, cycle, start_ns, dur_ns, end_ns,
batch_size, num_tokens, seq_len, graphed, accept_len (one row per instance,
sorted by rank and start).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from tracekit import schema
from tracekit.phases import parse_label, phase_of_span

FACT_COLUMNS: Final = ("batch_size", "num_tokens", "seq_len", "graphed", "accept_len")
INSTANCE_COLUMNS: Final = (
    "rank",
    "phase",
    "phase_id",
    "cycle",
    "start_ns",
    "dur_ns",
    "end_ns",
    *FACT_COLUMNS,
)


def _derive(ranges: pl.DataFrame) -> pl.DataFrame:
    """Fill phase and label facts from range names where ``phase`` is null."""
    names = ranges.get_column("name").to_list()
    phases: list[str | None] = []
    facts: dict[str, list[object]] = {c: [] for c in ("cycle", *FACT_COLUMNS)}
    for name in names:
        mapped = phase_of_span(name) if isinstance(name, str) else None
        phases.append(mapped[0] if mapped else None)
        got = mapped[1] if mapped else {}
        for col, vals in facts.items():
            vals.append(got.get(col))
    derived = pl.DataFrame(
        {"_phase": phases, **{f"_{c}": v for c, v in facts.items()}},
        schema={"_phase": pl.String(), **{f"_{c}": schema.COLUMNS[c] for c in facts}},
    )
    out = pl.concat([ranges, derived], how="horizontal")
    fills = [pl.coalesce(pl.col("phase"), pl.col("_phase")).alias("phase")]
    fills += [pl.coalesce(pl.col(c), pl.col(f"_{c}")).alias(c) for c in facts]
    return out.with_columns(fills).drop([c for c in out.columns if c.startswith("_")])


def _late_facts(events: pl.DataFrame) -> pl.DataFrame:
    """Facts markers as rows (rank, phase, cycle, facts...)."""
    marks = events.filter(
        (pl.col("kind") == schema.RANGE) & pl.col("name").str.starts_with("tracekit:facts|")
    )
    rows: list[dict[str, object]] = []
    for rank, name in marks.select("rank", "name").iter_rows():
        lab = parse_label(name)
        if lab is None or "cycle" not in lab.facts:
            continue
        row: dict[str, object] = {"rank": rank, "phase": lab.phase, "cycle": lab.facts["cycle"]}
        for col in FACT_COLUMNS:
            row[f"_late_{col}"] = lab.facts.get(col)
        rows.append(row)
    sch: dict[str, pl.DataType] = {"rank": pl.Int32(), "phase": pl.String(), "cycle": pl.Int64()}
    sch.update({f"_late_{c}": schema.COLUMNS[c] for c in FACT_COLUMNS})
    if not rows:
        return pl.DataFrame(schema=sch)
    return (
        pl.DataFrame(rows, schema=sch)
        .group_by(["rank", "phase", "cycle"])
        .agg([pl.col(f"_late_{c}").drop_nulls().last() for c in FACT_COLUMNS])
    )


def phase_instances(events: pl.DataFrame, phases: tuple[str, ...] | None = None) -> pl.DataFrame:
    """One row per phase instance (see module doc), optionally only ``phases``."""
    ranges = events.filter(
        (pl.col("kind") == schema.RANGE)
        & ~pl.col("name").fill_null("").str.starts_with("tracekit:facts|")
    ).select("rank", "name", "phase", "phase_id", "cycle", "start_ns", "dur_ns", *FACT_COLUMNS)
    if ranges.height and ranges.get_column("phase").null_count():
        ranges = _derive(ranges)
    ranges = ranges.filter(pl.col("phase").is_not_null())
    late = _late_facts(events)
    if late.height and ranges.height:
        ranges = ranges.join(late, on=["rank", "phase", "cycle"], how="left", nulls_equal=False)
        ranges = ranges.with_columns(
            [pl.coalesce(pl.col(c), pl.col(f"_late_{c}")).alias(c) for c in FACT_COLUMNS]
        ).drop([f"_late_{c}" for c in FACT_COLUMNS])
    if phases is not None:
        ranges = ranges.filter(pl.col("phase").is_in(list(phases)))
    ranges = ranges.sort(["rank", "start_ns"])
    # Instances without an id (hand-built or foreign frames) get a stable one.
    if ranges.height and ranges.get_column("phase_id").null_count():
        ranges = ranges.with_columns(
            pl.coalesce(
                pl.col("phase_id"), -(pl.int_range(1, pl.len() + 1, dtype=pl.Int64()))
            ).alias("phase_id")
        )
    return ranges.with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns")).select(
        INSTANCE_COLUMNS
    )
