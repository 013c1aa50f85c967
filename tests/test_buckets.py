"""The bucket vocabulary (tracekit.buckets): one table, every list derived from it."""

from __future__ import annotations

import pytest

from tracekit import _native, buckets, schema
from tracekit.analyzers import buckets as walk_buckets
from tracekit.finalize import categories
from tracekit.render.attribute import LABELS
from tracekit.render.host_attribute import HOST_LABELS


def test_derived_lists_keep_the_stored_order() -> None:
    # the codes stored runs, --json documents and the compiled walk rely on
    assert buckets.BUCKETS == ("attention", "moe", "gemm", "norm", "elementwise", "sampling", "other", "memory",
                               "allreduce", "comm", "launch_overhead", "idle")
    assert (*buckets.BUCKETS[:10], "host_overhead") == buckets.HOST_BUCKETS
    assert buckets.BUCKETS[:7] == buckets.COMPUTE_BUCKETS
    assert schema.CATEGORIES == categories.CATEGORIES == (
        "attention", "moe", "gemm", "allreduce", "comm", "norm", "elementwise", "sampling", "memory", "other")
    assert schema.CATEGORY_DTYPE.__class__(sorted(schema.CATEGORIES)) == schema.CATEGORY_DTYPE
    assert categories.COMM_CATEGORIES == ("allreduce", "comm")
    assert buckets.GAP_BUCKETS == ("launch_overhead", "idle")


def test_labels_come_from_the_table() -> None:
    assert LABELS is buckets.LABELS and HOST_LABELS is buckets.HOST_LABELS
    assert list(LABELS) == list(buckets.BUCKETS) and list(HOST_LABELS) == list(buckets.HOST_BUCKETS)
    assert LABELS["gemm"] == "dense GEMM" and HOST_LABELS["gemm"] == "dense GEMM / MLP"
    kinds = {b.name: b.kind for b in buckets.VOCABULARY}
    assert {n for n, k in kinds.items() if k is buckets.Kind.GAP} == {"launch_overhead", "idle", "host_overhead"}


def test_walk_codes_follow_the_kinds() -> None:
    c = buckets.WALK_CODES
    assert (c.nb, c.n_work, c.memory, c.n_event_codes, c.launch, c.idle) == (12, 8, 7, 10, 10, 11)
    assert (c.nb, c.n_work, c.n_event_codes) == (walk_buckets.NB, walk_buckets.N_WORK, walk_buckets.N_EVENT_CODES)
    kinds = {b.name: b.kind for b in buckets.VOCABULARY}
    work = {buckets.Kind.COMPUTE, buckets.Kind.MEMORY}
    assert all(kinds[b] in work for b in buckets.BUCKETS[: c.n_work])
    assert all(kinds[b] is buckets.Kind.COMM for b in buckets.BUCKETS[c.n_work : c.n_event_codes])


@pytest.mark.skipif(_native.walk is None, reason="tracekit._walk not built")
def test_compiled_walk_refuses_inconsistent_codes() -> None:
    w = _native.walk
    assert w is not None
    with pytest.raises(ValueError, match="inconsistent bucket codes"):
        w.configure(nb=12, n_work=8, memory=9, n_event_codes=10, launch=10, idle=11)  # memory not a work code
    with pytest.raises(ValueError, match="inconsistent bucket codes"):
        w.configure(nb=100, n_work=8, memory=7, n_event_codes=10, launch=10, idle=11)  # more codes than it holds


@pytest.mark.skipif(_native.walk is None, reason="tracekit._walk not built")
def test_compiled_walk_takes_named_arguments() -> None:
    w = _native.walk
    assert w is not None
    w.configure(nb=12, n_work=8, memory=7, n_event_codes=10, launch=10, idle=11)
    args = {"luts": bytes(514), "dense": bytes(8), "i_tid": None, "host_start": b"", "is_host": b"", "k_lo": 0,
            "latency": 0, "outs": {}, "coll_out": None}
    with pytest.raises(ValueError, match="columns has no start_ns"):
        w.walk_rank(columns={}, **args)
    with pytest.raises(ValueError, match="keys other than the expected ones"):
        names = ("start_ns", "dur_ns", "phase_id", "correlation", "stream", "tid", "graph", "coll_seq", "kind",
                 "category", "group", "coll_op")
        w.walk_rank(columns={**dict.fromkeys(names), "typo": None}, **args)
    with pytest.raises(TypeError):
        w.walk_rank({}, *args.values())  # type: ignore[misc]  # no positional tuple any more
