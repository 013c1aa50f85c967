"""Where a heavy command's per-rank work runs: ``--executor local | dask-local:N | dask://HOST:PORT``.

``open_executor(spec)`` gives an :class:`Executor`: ``submit(fn, *args)`` returns a handle, a handle
passed as an argument of a later ``submit`` is the earlier result (on Dask: resolved on the worker,
where it was kept: it never travels through this process), ``gather(handles)`` brings results here.
Callers submit only module-level functions whose results they gather are small projections.

- ``local``: in this process, each call run when submitted (the command's own threads apply).
- ``dask-local:N``: a Dask ``distributed`` LocalCluster of N worker processes, one thread each,
  started and stopped with the command.
- ``dask://HOST:PORT``: a running Dask scheduler (dask-ssh, dask-jobqueue on SLURM,
  dask-kubernetes); its workers must see the command's input and output paths.

Dask is the optional extra ``tracekit[dask]``; nothing imports it unless a ``dask`` executor is asked
for. A task whose worker dies is run again by Dask on another worker (its ``allowed-failures``,
3 by default); past that the command fails naming the task.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

KINDS = ("local", "dask-local", "dask")
SYNTAX = "local, dask-local:N (N worker processes on this host) or dask://HOST:PORT (a running scheduler)"


@dataclass(frozen=True)
class ExecutorSpec:
    """A parsed ``--executor`` value."""

    kind: str = "local"
    workers: int = 0  # dask-local
    address: str = ""  # dask: tcp://HOST:PORT

    def __str__(self) -> str:
        if self.kind == "dask-local":
            return f"dask-local:{self.workers}"
        if self.kind == "dask":
            return "dask://" + self.address.removeprefix("tcp://")
        return "local"


def parse_executor(text: str) -> ExecutorSpec:
    """``local`` / ``dask-local:N`` / ``dask://HOST:PORT`` -> ExecutorSpec; ValueError names what is wrong."""
    t = text.strip()
    if t == "local":
        return ExecutorSpec()
    if t.startswith("dask-local"):
        _, sep, n = t.partition(":")
        if t == "dask-local":
            return ExecutorSpec("dask-local", 2)
        if sep and n.isdigit() and int(n) >= 1:
            return ExecutorSpec("dask-local", int(n))
        raise ValueError(f"--executor {text!r}: dask-local:N needs a whole number of workers >= 1")
    if t.startswith("dask://"):
        host, sep, port = t.removeprefix("dask://").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"--executor {text!r}: dask://HOST:PORT names the scheduler (e.g. dask://10.0.0.1:8786)")
        return ExecutorSpec("dask", address=f"tcp://{host}:{port}")
    raise ValueError(f"--executor {text!r} is not one of: {SYNTAX}")


class Executor(Protocol):
    name: str

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any: ...

    def gather(self, handles: Sequence[Any]) -> list[Any]: ...

    def close(self) -> None: ...


class _Done:
    """A local handle: the result, computed when submitted."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _resolve(arg: Any) -> Any:
    """A local handle (or a list of them, as Dask resolves futures in a list) -> its result."""
    if isinstance(arg, _Done):
        return arg.value
    if isinstance(arg, list):
        return [_resolve(a) for a in arg]
    return arg


class LocalExecutor:
    name = "local"

    def submit(self, fn: Callable[..., Any], *args: Any) -> _Done:
        return _Done(fn(*(_resolve(a) for a in args)))

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        return [h.value for h in handles]

    def release(self, handles: Sequence[Any]) -> None:
        for h in handles:
            h.value = None

    def close(self) -> None:
        pass


class DaskExecutor:
    """A ``distributed.Client`` on a LocalCluster (``dask-local:N``) or a running scheduler."""

    def __init__(self, spec: ExecutorSpec) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError(f"--executor {spec} needs Dask: pip install 'tracekit[dask]'") from None
        self.name = str(spec)
        self.cluster: Any = None
        if spec.kind == "dask-local":
            import warnings

            with warnings.catch_warnings():  # another cluster on this host holds the default HTTP port: not news
                warnings.filterwarnings("ignore", message=r"Port \d+ is already in use")
                self.cluster = LocalCluster(n_workers=spec.workers, threads_per_worker=1,  # type: ignore[no-untyped-call]
                                            processes=True, dashboard_address=None, silence_logs=logging.ERROR)
            self.client: Any = Client(self.cluster)  # type: ignore[no-untyped-call]
        else:
            self.client = Client(spec.address, timeout="30s")  # type: ignore[no-untyped-call]

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False)

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        return list(self.client.gather(list(handles)))

    def release(self, handles: Sequence[Any]) -> None:
        for h in handles:
            h.release()

    def window(self) -> int:
        """Tasks ``run_each`` keeps submitted and not yet gathered: 2 per worker thread (each thread has the
        next task at hand while its result travels), at least 2."""
        threads: int = sum(self.client.nthreads().values())
        return max(2, 2 * threads)

    def worker_pids(self) -> dict[str, int]:
        """Worker address -> its process id."""
        import os

        got: dict[str, int] = self.client.run(os.getpid)
        return got

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def run_each(executor: LocalExecutor | DaskExecutor, fn: Callable[..., Any],
             calls: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
    """``fn(*args)`` for each ``args`` of ``calls``, the results in order, each released once it is here:
    ``local`` runs each call when its result is asked for (one in flight); Dask keeps at most
    ``DaskExecutor.window()`` calls submitted and not yet gathered (2 per worker thread), submitting the
    next as each result arrives. A worker holds a task's arguments and result until the result is
    released: with every call submitted at once, the tasks it finished ahead of this loop piled up
    there (measured: 110-175 of 1,024 ingest write tasks per worker, +30-50 MB), so its memory grew
    with the number of tasks; bounded, it is the tasks in flight."""
    if isinstance(executor, LocalExecutor):
        for args in calls:
            yield fn(*args)
        return
    window = executor.window()
    pending: deque[Any] = deque()
    for args in calls:
        pending.append(executor.submit(fn, *args))
        if len(pending) >= window:
            yield _take(executor, pending.popleft())
    while pending:
        yield _take(executor, pending.popleft())


def _take(executor: DaskExecutor, handle: Any) -> Any:
    got = executor.gather([handle])[0]
    executor.release([handle])
    return got


def open_executor(spec: ExecutorSpec | str) -> LocalExecutor | DaskExecutor:
    s = parse_executor(spec) if isinstance(spec, str) else spec
    return LocalExecutor() if s.kind == "local" else DaskExecutor(s)


__all__ = ["KINDS", "SYNTAX", "DaskExecutor", "Executor", "ExecutorSpec", "LocalExecutor", "open_executor",
           "parse_executor", "run_each"]
