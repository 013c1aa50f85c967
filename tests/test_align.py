"""Clock alignment from collectives: recover known offsets within the reported residual."""

from __future__ import annotations

import polars as pl
import pytest
from forensic_frames import Spec, build, manifest

from tracekit.analyzers.align import (
    align_events,
    auto_method,
    default_method,
    estimate_offsets,
    raw_times,
)
from tracekit.errors import AnalysisError
from tracekit.finalize import finalize_events


def test_recovers_known_offsets_within_residual() -> None:
    offsets = {0: 0, 1: 1_234_567, 2: -987_654_321, 3: 42}
    ev = build(Spec(ranks=4, cycles=10, clock_offset_ns=offsets, jitter_ns=800, straggler=2))
    fit = estimate_offsets(ev)
    assert fit.collectives == 10 * 4
    assert fit.residual_max_ns <= 800
    for r, o in offsets.items():
        # estimate within the residual of the truth (jitter is uniform 0..800 ns)
        assert abs(fit.offsets_ns[r] - o) <= max(fit.residual_max_ns, 1), (r, fit.offsets_ns[r], o)
    assert fit.residual_median_ns > 0  # jitter is there and reported


def test_shift_one_rank_and_recover_on_aligned_run() -> None:
    ev = build(Spec(ranks=2, cycles=8, jitter_ns=300))
    base = estimate_offsets(ev)
    shifted = ev.with_columns(
        pl.when(pl.col("rank") == 1).then(pl.col("start_ns") + 5_000_017).otherwise(pl.col("start_ns")).alias("start_ns")
    )
    fit = estimate_offsets(shifted)
    assert abs(fit.offsets_ns[1] - base.offsets_ns[1] - 5_000_017) <= 1  # the fit is linear in the shift
    assert abs(fit.offsets_ns[1] - 5_000_017) <= fit.residual_max_ns


def test_align_events_shifts_and_keeps_raw_recoverable() -> None:
    offsets = {1: 3_000_000_123}
    ev = build(Spec(ranks=2, cycles=6, clock_offset_ns=offsets, jitter_ns=200))
    man = manifest(2, **{"1": {"host": "node1"}})
    assert default_method(man) == "collectives"
    out, man2 = align_events(ev, man)
    clock = man2["clock"]
    assert clock["align"] == "collectives"
    assert abs(clock["offsets_ns"]["1"] + 3_000_000_123) <= clock["residual_ns"]["max"]
    assert clock["offsets_ns"]["0"] == 0
    # rank 1's allreduce ends now agree with rank 0's within the residual
    ar = out.filter(pl.col("category") == "allreduce").with_columns((pl.col("start_ns") + pl.col("dur_ns")).alias("end"))
    w = ar.pivot(on="rank", index="coll_seq", values="end")
    assert (w["1"] - w["0"]).abs().max() <= 2 * clock["residual_ns"]["max"] + 1
    # raw times come back exactly
    back = raw_times(out, man2)
    assert back.get_column("start_ns").to_list() == ev.get_column("start_ns").to_list()
    assert "clock" not in man  # input manifest untouched
    # aligning again composes: offsets stay (nearly) the same, raw still recoverable
    out2, man3 = align_events(out, man2, "collectives")
    assert abs(man3["clock"]["offsets_ns"]["1"] - clock["offsets_ns"]["1"]) <= clock["residual_ns"]["max"]
    assert raw_times(out2, man3).get_column("start_ns").to_list() == ev.get_column("start_ns").to_list()


def test_default_none_on_one_host_and_none_method_records_zero() -> None:
    ev = build(Spec(ranks=2, cycles=2))
    man = manifest(2)
    assert default_method(man) == "none"
    out, man2 = align_events(ev, man)
    assert out.equals(ev)
    assert man2["clock"] == {"align": "none", "offsets_ns": {"0": 0, "1": 0}, "auto": "every rank on one host"}


def test_auto_with_unknown_hosts_fits_and_applies_only_a_multi_host_offset() -> None:
    """Ingested Kineto traces name no host: auto fits the offsets and applies them only when one
    is larger than a single host's clock could show."""
    man = manifest(2)
    for sec in man["ranks"].values():  # type: ignore[attr-defined]
        sec.pop("host")
    far = build(Spec(ranks=2, cycles=6, clock_offset_ns={1: 3_000_000_123}, jitter_ns=200))
    method, why = auto_method(man, far)
    assert method == "collectives" and why.startswith("hosts unknown; fitted offsets up to 3000000")
    near = build(Spec(ranks=2, cycles=6, clock_offset_ns={1: 20_000}, jitter_ns=200))
    assert auto_method(man, near)[0] == "none"
    _, man2 = align_events(far, man)
    assert man2["clock"]["align"] == "collectives" and man2["clock"]["auto"].startswith("hosts unknown")


def test_trimming_drops_an_outlier_collective() -> None:
    ev = build(Spec(ranks=3, cycles=10, jitter_ns=200, seed=3))
    # one collective's end on rank 2 recorded 2 ms late
    bad = (pl.col("rank") == 2) & (pl.col("coll_seq") == 7)
    ev = ev.with_columns(pl.when(bad).then(pl.col("dur_ns") + 2_000_000).otherwise(pl.col("dur_ns")).alias("dur_ns"))
    fit = estimate_offsets(ev)
    assert fit.rejected == 1
    assert abs(fit.offsets_ns[2]) <= fit.residual_max_ns + 1
    assert fit.residual_max_ns < 1_000


def test_no_collectives_is_a_clear_error() -> None:
    ev = build(Spec(ranks=2, cycles=2)).filter(pl.col("category") != "allreduce")
    with pytest.raises(AnalysisError, match="no collective matched"):
        estimate_offsets(ev)
    with pytest.raises(ValueError, match="unknown alignment method"):
        align_events(ev, {}, "ntp")


def test_collectives_recognised_by_name_when_finalized() -> None:
    ev = build(Spec(ranks=3, cycles=5, clock_offset_ns={2: 250_000}, jitter_ns=400))
    bare = ev.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("coll_seq"),
        pl.lit(None, dtype=pl.String).alias("group"),
        pl.lit(None, dtype=pl.String).alias("category"),
        pl.lit(None, dtype=pl.String).alias("coll_op"),
    )
    # readers never annotate: a table without collectives annotated has none to match
    with pytest.raises(AnalysisError, match="no collective matched"):
        estimate_offsets(bare)
    fit = estimate_offsets(finalize_events(bare))
    assert fit.collectives == 5 * 4
    assert abs(fit.offsets_ns[2] - 250_000) <= fit.residual_max_ns
