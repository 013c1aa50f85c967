"""Capture across hosts: which ranks run on this node, where the process group meets, node files.

A capture of ``N`` nodes runs one launcher per node (``tracekit capture --nnodes N --node-rank I
--master ADDR:PORT``), or one launcher per rank under a launcher of the user's (torchrun, SLURM:
the ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT`` environment;
each such process is then a node of one rank). Node ``I`` starts ranks ``I*K .. I*K+K-1`` (``K``
local ranks); all of them join one process group whose store rank 0 hosts at ``ADDR:PORT``.

Every node writes its ranks' shards into the same shard directory (``RUN.d/``, a shared directory
when the nodes are several hosts) and two node files there (:func:`node_path`): one when its ranks
start (host, pid, ranks: so that a node that dies later is still named), one when they have ended
(shards written, failures). Node 0 waits for every node's end file (:func:`wait_nodes`), then
merges; a node that never reports loses only its ranks, and the merged manifest names its host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import ipaddress
import json
import os
import socket
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import ConfigError

if TYPE_CHECKING:
    from tracekit.collectors.remote import Remote

LOOPBACK = "127.0.0.1"
NODE_GLOB = "node-*.json"
ENV_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class Topology:
    """Where this launcher's ranks sit in the job (see the module docstring)."""

    nnodes: int = 1
    node_rank: int = 0
    nproc: int = 0  # local ranks on this node (0: not fixed yet, the single-host default decides)
    master_addr: str = LOOPBACK
    master_port: int = 0  # 0: a free port on this host (single host only)
    source: str = "local"  # local | options (--nnodes ...) | env (RANK / WORLD_SIZE ...)
    first_rank: int | None = None  # global rank of local rank 0 (None: node_rank * nproc)
    device_base: int = 0  # local index (GPU) of this node's first rank: LOCAL_RANK under another launcher

    @property
    def multi(self) -> bool:
        """More than one launcher takes part (hosts may differ)."""
        return self.nnodes > 1

    @property
    def world(self) -> int:
        return self.nnodes * self.nproc

    @property
    def first(self) -> int:
        return self.node_rank * self.nproc if self.first_rank is None else self.first_rank

    def local_ranks(self) -> list[int]:
        return list(range(self.first, self.first + self.nproc))

    def node_of(self, rank: int) -> int:
        """The node that runs global rank ``rank`` (every node runs ``nproc`` consecutive ranks)."""
        return rank // self.nproc if self.nproc else 0

    def node_ranks(self, node: int) -> list[int]:
        return list(range(node * self.nproc, (node + 1) * self.nproc))

    def with_nproc(self, nproc: int) -> Topology:
        return dataclasses.replace(self, nproc=nproc)

    def local_index(self, rank: int) -> int:
        """LOCAL_RANK of global rank ``rank`` on this node (its GPU)."""
        return rank - self.first + self.device_base

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["world"] = self.world
        return d


def parse_master(value: str) -> tuple[str, int]:
    """``ADDR:PORT`` (``[v6]:PORT`` for IPv6) -> (addr, port); ValueError with what is wrong."""
    addr, sep, port = value.rpartition(":")
    addr = addr[1:-1] if addr.startswith("[") and addr.endswith("]") else addr
    if not sep or not addr or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--master must be ADDR:PORT (e.g. 10.0.0.1:29500), not {value!r}")
    return addr, int(port)


def from_options(nnodes: int, node_rank: int, master: str | None, nproc: int | None) -> Topology:
    """The topology of ``--nnodes N --node-rank I --master ADDR:PORT [--nproc-per-node K]``."""
    if not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank {node_rank} outside 0..{nnodes - 1} (--nnodes {nnodes})")
    if master is None:
        if nnodes > 1:
            raise ConfigError("--nnodes above 1 needs --master ADDR:PORT (where node 0's rank 0 hosts the store)")
        return Topology(nproc=nproc or 0)
    addr, port = parse_master(master)
    return Topology(nnodes=nnodes, node_rank=node_rank, nproc=nproc or 0, master_addr=addr, master_port=port,
                    source="options")


def from_env(environ: Mapping[str, str] | None = None) -> Topology | None:
    """This process as one rank of a job started by another launcher (torchrun, srun): None unless
    ``RANK`` and ``WORLD_SIZE`` are both set. The process is a node of one rank; ``MASTER_ADDR`` /
    ``MASTER_PORT`` say where rank 0 hosts the store."""
    env = os.environ if environ is None else environ
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    got = {k: env.get(k, "") for k in ENV_KEYS}
    bad = [k for k in ("RANK", "WORLD_SIZE", "MASTER_PORT") if not got[k].strip().isdigit()]
    if bad or not got["MASTER_ADDR"].strip():
        what = ", ".join(f"{k}={got[k]!r}" for k in ENV_KEYS)
        raise ConfigError(f"the launcher environment ({what}) needs whole numbers RANK, WORLD_SIZE, MASTER_PORT "
                         "and a MASTER_ADDR")
    rank, world = int(got["RANK"]), int(got["WORLD_SIZE"])
    if not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} outside 0..{world - 1} (WORLD_SIZE={world})")
    local = env.get("LOCAL_RANK", "0").strip()
    return Topology(nnodes=world, node_rank=rank, nproc=1, master_addr=got["MASTER_ADDR"].strip(),
                    master_port=int(got["MASTER_PORT"]), source="env", device_base=int(local) if local.isdigit() else 0)


def local_address(master_addr: str, port: int) -> str:
    """The address of this host that packets to the master leave from (no packet is sent)."""
    family = socket.AF_INET6 if ":" in master_addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect((master_addr, port or 9))
        addr: str = s.getsockname()[0]
        return addr


def interface_of(address: str) -> str | None:
    """The name of the IPv4 interface that holds ``address`` (None when none does, or for IPv6)."""
    try:
        if ipaddress.ip_address(address).version != 4:
            return None
    except ValueError:
        return None
    siocgifaddr = 0x8915
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s, contextlib.suppress(OSError):
            req = struct.pack("256s", name.encode()[:15])
            got = socket.inet_ntoa(fcntl.ioctl(s.fileno(), siocgifaddr, req)[20:24])
            if got == address:
                return name
    return None


def gloo_interface(master_addr: str, port: int) -> tuple[str | None, str]:
    """(interface, how) gloo should use to reach the other hosts: the one the route to the master
    leaves from. Gloo's own default (the address the host name resolves to) is often a loopback
    address on cluster nodes, which the other hosts cannot reach."""
    try:
        addr = local_address(master_addr, port)
    except OSError as exc:
        return None, f"no route to the master {master_addr}: {exc.strerror or exc}"
    name = interface_of(addr)
    return name, (f"{name} ({addr}), the route to the master {master_addr}" if name
                  else f"no interface holds {addr}: gloo's default")


def node_path(shard_dir: Path, node: int, state: str) -> Path:
    """A node file: ``node-00001.started.json`` / ``node-00001.ended.json``."""
    return shard_dir / f"node-{node:05d}.{state}.json"


def write_node(shard_dir: Path, node: int, state: str, info: Mapping[str, Any], remote: Remote | None = None) -> str:
    """Write one node file atomically (temp file beside it, renamed; under ``remote``'s prefix: one PUT)."""
    from tracekit.outputs import atomic_write

    out = node_path(shard_dir, node, state)
    text = json.dumps(dict(info), sort_keys=True, default=str)
    if remote is not None:
        from tracekit.collectors.remote import UploadFailed
        from tracekit.urls import problem, put_bytes

        url = remote.url(out.name)
        try:
            put_bytes(url, text.encode())
        except Exception as exc:
            raise UploadFailed(f"node {node}: upload of {out.name} failed ({problem(exc)})", path=url) from None
        return url
    with atomic_write(out) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return str(out)


def _node_files(shard_dir: Path, state: str, remote: Remote | None) -> list[tuple[str, Callable[[], bytes]]]:
    """(name, read) of every ``state`` node file, in the shard directory or under ``remote``'s prefix."""
    if remote is None:
        return [(p.name, p.read_bytes) for p in shard_dir.glob(f"node-*.{state}.json")]
    from tracekit.urls import read_bytes, shard_urls

    try:
        urls = shard_urls(remote.prefix, f"node-*.{state}.json")
    except Exception:  # a store that does not answer now: no node file seen yet (the wait goes on)
        return []
    return [(u.rsplit("/", 1)[-1], lambda u=u: read_bytes(u)) for u in urls]  # type: ignore[misc]


def read_nodes(shard_dir: Path, state: str, remote: Remote | None = None) -> dict[int, dict[str, Any]]:
    """node -> the content of its ``state`` file, for every node that wrote one (unreadable ones skipped)."""
    from tracekit.errors import RunError

    out: dict[int, dict[str, Any]] = {}
    for name, read in _node_files(shard_dir, state, remote):
        with contextlib.suppress(OSError, ValueError, RecursionError, RunError):
            node = int(name.split(".")[0].split("-")[1])
            data = json.loads(read())
            if isinstance(data, dict):
                out[node] = data
    return out


def node_info(topo: Topology, **more: Any) -> dict[str, Any]:
    return {"node_rank": topo.node_rank, "nnodes": topo.nnodes, "host": socket.gethostname(), "pid": os.getpid(),
            "ranks": topo.local_ranks(), "taken_unix_ns": time.time_ns(), **more}


# How long node 0 waits for the other nodes' end files once its own ranks have ended: their ranks
# passed the same final barrier, so only their teardown is left (launcher.DONE_GRACE_S) plus the
# shared file system's visibility delay.
NODE_WAIT_S = 60.0


def node_wait_s() -> float:
    """NODE_WAIT_S, or ``TRACEKIT_NODE_WAIT_S`` (seconds) when set: a cluster whose shared file system
    shows files later, or a test that kills a node."""
    env = os.environ.get("TRACEKIT_NODE_WAIT_S", "").strip()
    try:
        return float(env) if env and float(env) >= 0 else NODE_WAIT_S
    except ValueError:
        raise ValueError(f"TRACEKIT_NODE_WAIT_S: {env!r} is not a number of seconds") from None


def wait_nodes(shard_dir: Path, topo: Topology, timeout_s: float, say: Callable[[str], None],
               stop: Callable[[], bool] | None = None, remote: Remote | None = None) -> dict[int, dict[str, Any]]:
    """On node 0: wait until every node's end file is in ``shard_dir`` (or under ``remote``'s prefix) or
    ``timeout_s`` passed (or ``stop()``); returns the end files found (node -> content)."""
    deadline = time.monotonic() + timeout_s
    said = False
    while True:
        ended = read_nodes(shard_dir, "ended", remote)
        waiting = [n for n in range(topo.nnodes) if n not in ended]
        if not waiting or time.monotonic() >= deadline or (stop is not None and stop()):
            return ended
        if not said:
            say(f"capture: waiting up to {timeout_s:g} s for node(s) {', '.join(map(str, waiting))} to end "
                f"(their end files in {remote.prefix if remote else shard_dir}/)")
            said = True
        time.sleep(0.5)  # polling a shared directory: no event to wait on across hosts


def missing_from_nodes(topo: Topology, shard_dir: Path, have: set[int], timeout_s: float,
                       remote: Remote | None = None) -> dict[str, str]:
    """Why each rank of another node has no shard, from that node's files (its host named)."""
    from tracekit.collectors.capture import shard_path

    started = read_nodes(shard_dir, "started", remote)
    ended = read_nodes(shard_dir, "ended", remote)
    if remote is not None:
        from tracekit.urls import shard_urls

        held = {u.rsplit("/", 1)[-1] for u in shard_urls(remote.prefix, "rank-*.parquet")}
        have = have | {r for r in range(topo.world) if shard_path(shard_dir, r).name in held}
    out: dict[str, str] = {}
    for node in range(topo.nnodes):
        if node == topo.node_rank:
            continue
        for r in topo.node_ranks(node):
            if r in have or shard_path(shard_dir, r).exists():
                continue
            end, start = ended.get(node), started.get(node)
            host = (end or start or {}).get("host")
            where = f"node {node} (host {host})" if host else f"node {node}"
            if end is not None:
                why = (end.get("failed") or {}).get(str(r)) or "its node ended without its shard"
                out[str(r)] = f"{why} on {where}"
            elif start is not None:
                out[str(r)] = (f"{where} started its ranks but did not report their end within {timeout_s:g} s "
                               "(the node or its launcher died, or its shards are not in this directory)")
            else:
                out[str(r)] = f"{where} never started (no {node_path(shard_dir, node, 'started').name})"
    return out


__all__ = [
    "NODE_WAIT_S",
    "Topology",
    "from_env",
    "from_options",
    "gloo_interface",
    "interface_of",
    "local_address",
    "missing_from_nodes",
    "node_info",
    "node_path",
    "node_wait_s",
    "parse_master",
    "read_nodes",
    "wait_nodes",
    "write_node",
]
