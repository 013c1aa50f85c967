"""The typed manifest (tracekit.manifest) reads every committed run's manifest, old or new."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.manifest import RankManifest, rank_section_dict, typed
from tracekit.store import read_manifest

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = [p for p in sorted(SAMPLES.rglob("*.parquet")) if not p.name.startswith("rank-")]


@pytest.mark.parametrize("run", RUNS, ids=[str(p.relative_to(SAMPLES)) for p in RUNS])
def test_committed_manifests_read_typed(run: Path) -> None:
    raw = read_manifest(run)
    man = typed(raw)
    assert man.schema_version == raw["schema_version"] and man.source == raw.get("source")
    assert set(man.ranks) == set(raw.get("ranks") or {})
    for r, sec in man.ranks.items():
        assert sec.rank in (None, int(r))
        if man.source == "capture" and "env" in raw["ranks"][r]:  # a capture's rank section names its host
            assert sec.host, (run, r)
            assert sec.env == raw["ranks"][r]["env"]
        for key in ("window", "aborted", "profile_note", "unprofiled", "profiled", "timed", "time_resolution_ns"):
            assert getattr(sec, key) == raw["ranks"][r].get(key), (run, r, key)
    for key in ("missing_ranks", "captured_ranks", "interrupted", "clock", "capture"):
        assert getattr(man, key) == (raw.get(key) if key in raw else getattr(typed({}), key)), (run, key)


def test_a_field_of_the_wrong_type_drops_only_that_field() -> None:
    man = typed({"world_size": "two", "missing_ranks": {"1": "killed"},
                 "ranks": {"0": {"host": "n1", "window": 5, "aborted": "lost its peer"}, "1": "not a section"}})
    assert man.world_size is None and man.missing_ranks == {"1": "killed"}
    assert list(man.ranks) == ["0"] and man.rank_ids() == [0]
    sec = man.ranks["0"]
    assert sec.host == "n1" and sec.window is None and sec.aborted == "lost its peer"


def test_rank_section_dict_keeps_set_keys_and_env() -> None:
    sec = rank_section_dict(RankManifest(rank=3, host="n1", host_source="process"), when="start")
    assert sec == {"rank": 3, "host": "n1", "host_source": "process", "when": "start"}
    assert rank_section_dict(RankManifest(env={}))["env"] == {}  # set, even empty: kept
    assert typed({"ranks": {"3": sec, "x": "not a section"}}).ranks["3"].host == "n1"
