"""collectors/nodes.py: the topology of a multi-host capture, its options and environment, the node files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.collectors.nodes import (
    Topology,
    from_env,
    from_options,
    interface_of,
    missing_from_nodes,
    node_info,
    parse_master,
    read_nodes,
    write_node,
)


def test_options_place_the_node_ranks() -> None:
    t = from_options(3, 2, "10.0.0.1:29500", 4)
    assert (t.master_addr, t.master_port, t.world, t.multi, t.source) == ("10.0.0.1", 29500, 12, True, "options")
    assert t.local_ranks() == [8, 9, 10, 11]
    assert [t.node_of(r) for r in (0, 3, 4, 11)] == [0, 0, 1, 2]
    assert t.local_index(9) == 1
    assert parse_master("[fd00::1]:29500") == ("fd00::1", 29500)
    assert not from_options(1, 0, None, None).multi


@pytest.mark.parametrize(("args", "words"), [
    ((2, 2, "h:1", None), "--node-rank 2 outside 0..1"),
    ((2, 0, None, None), "needs --master"),
    ((2, 0, "host", None), "ADDR:PORT"),
    ((2, 0, "host:99999", None), "ADDR:PORT"),
])
def test_bad_options_say_what(args: tuple[int, int, str | None, int | None], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        from_options(*args)


def test_environment_of_another_launcher() -> None:
    assert from_env({"MASTER_ADDR": "a"}) is None
    t = from_env({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "29500"})
    assert t is not None
    assert (t.nnodes, t.node_rank, t.nproc, t.local_ranks(), t.local_index(5), t.source) == (8, 5, 1, [5], 1, "env")
    with pytest.raises(ValueError, match="MASTER_PORT"):
        from_env({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "n0"})
    with pytest.raises(ValueError, match="RANK=2 outside"):
        from_env({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "n0", "MASTER_PORT": "1"})


def test_loopback_interface_found() -> None:
    assert interface_of("127.0.0.1") == "lo"
    assert interface_of("not an address") is None


def test_missing_ranks_name_their_host(tmp_path: Path) -> None:
    topo = Topology(nnodes=4, node_rank=0, nproc=2, master_addr="h0", master_port=1, source="options")
    n1 = Topology(nnodes=4, node_rank=1, nproc=2, master_addr="h0", master_port=1, source="options")
    n2 = Topology(nnodes=4, node_rank=2, nproc=2, master_addr="h0", master_port=1, source="options")
    write_node(tmp_path, 1, "started", {**node_info(n1), "host": "gpu-a"})
    write_node(tmp_path, 1, "ended", {**node_info(n1), "host": "gpu-a", "failed": {"3": "killed by SIGKILL"}})
    (tmp_path / "rank-00002.parquet").write_bytes(b"")  # a shard there: that rank is not missing
    write_node(tmp_path, 2, "started", {**node_info(n2), "host": "gpu-b"})
    assert set(read_nodes(tmp_path, "started")) == {1, 2}
    assert not list(tmp_path.glob("*.tmp*"))
    got = missing_from_nodes(topo, tmp_path, set(), 60.0)
    assert set(got) == {"3", "4", "5", "6", "7"}
    assert got["3"] == "killed by SIGKILL on node 1 (host gpu-a)"
    assert got["4"].startswith("node 2 (host gpu-b) started its ranks but did not report their end within 60 s")
    assert got["6"] == "node 3 never started (no node-00003.started.json)"
