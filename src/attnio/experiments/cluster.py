"""Dask distributed execution of a sweep: a client (a remote scheduler or a local cluster) and
the rows of the configurations, run as tasks of :func:`attnio.experiments.row.run_batch`."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

from ..core.errors import AttnioError, ParameterError
from ..core.extras import require
from .grid import Config
from .pool import PART_S, tasks
from .row import run_batch
from .store import row_values

__all__ = ["check_scheduler", "dashboard_link", "dask_client", "dask_rows"]

#: Seconds of work a Dask task aims at, and the most configurations it holds.
TASK_S, MAX_TASK = PART_S, 32

_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")


def check_scheduler(scheduler: str | None) -> None:
    """A ParameterError unless ``scheduler`` is None or an address like ``tcp://HOST:PORT``."""
    if scheduler is not None and not str(scheduler).startswith(_SCHEMES):
        raise ParameterError(f"scheduler must be an address like tcp://HOST:PORT, got "
                             f"{scheduler!r}", param="scheduler")


def _has_bokeh() -> bool:
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def dashboard_link(client: Any) -> str | None:
    """The URL of the Dask dashboard ``client`` is attached to, or None when there is none (a
    local cluster without bokeh, which the dashboard needs: ``pip install 'attnio[dask]'``)."""
    try:
        link = client.dashboard_link
    except Exception:  # noqa: BLE001 (no dashboard: the scheduler runs without its HTTP server)
        return None
    return link or None


@contextlib.contextmanager
def dask_client(scheduler: str | None, jobs: int, dask: bool,
                on_dashboard: Callable[[str], None] | None = None) -> Iterator[Any]:
    """A Dask distributed client (remote scheduler or a local cluster), or None.

    A local cluster serves its dashboard on a free port of 127.0.0.1 when bokeh is installed
    (the ``dask`` extra brings it); ``on_dashboard(url)`` is told where, for either kind."""
    if not (scheduler or dask):
        yield None
        return
    distributed = require("distributed", "dask", "a Dask sweep (--dask/--scheduler)")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise AttnioError(f"cannot reach Dask scheduler {scheduler}: {e}") from None
        with client:
            link = dashboard_link(client)
            if link and on_dashboard is not None:
                on_dashboard(link)
            yield client
        return
    address = "127.0.0.1:0" if _has_bokeh() else None
    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                      dashboard_address=address) as cluster, Client(cluster) as client:
        link = dashboard_link(client) if address else None
        if link and on_dashboard is not None:
            on_dashboard(link)
        yield client


class _Peekable:
    """An iterator of configurations whose next one can be looked at."""

    def __init__(self, it: Iterator[Config]):
        self.it: Iterator[Config] = it
        self.head: Config | None = None

    def peek(self) -> Config | None:
        if self.head is None:
            self.head = next(self.it, None)
        return self.head

    def pop(self) -> Config | None:
        c = self.peek()
        self.head = None
        return c


def _bundle(c: Config) -> tuple:
    return (c.shape, c.M, c.mode, c.backward)


def take(stream: _Peekable, size: int) -> list[Config]:
    """The next ``size`` configurations of the stream and, in count mode, the next ones that
    share the last one's workload and M (its other algorithms, which share its certificate:
    :func:`.pool.tasks` puts them next to each other), at most :data:`MAX_TASK` more."""
    batch: list[Config] = []
    while len(batch) < size and (c := stream.pop()) is not None:
        batch.append(c)
    extra = 0
    while batch and batch[-1].mode != "compute" and extra < MAX_TASK:
        nxt = stream.peek()
        if nxt is None or _bundle(nxt) != _bundle(batch[-1]):
            break
        batch.append(nxt)
        stream.pop()
        extra += 1
    return batch


def _encode(row: dict) -> dict:
    return {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
            for k, v in row.items()}


def dask_rows(client: Any, todo: Iterator[Config], jobs: int) -> Iterator[list[tuple]]:
    """Rows (value tuples) of the configurations run on the cluster, as they arrive.

    The grid is streamed: each window of configurations slowest first (:func:`.pool.tasks`,
    count mode grouped by locality), two tasks per worker in flight.  A task holds as many
    configurations as take about :data:`TASK_S` seconds by the rows seen so far (1 to
    :data:`MAX_TASK`), so fast count-mode rows share a task while slow rows travel (and are
    committed) one at a time; a count-mode task ends between workloads (:func:`take`)."""
    from distributed import as_completed

    workers = max(1, len(client.scheduler_info().get("workers", {})) or jobs)
    stream = _Peekable(itertools.chain.from_iterable(tasks(todo, ordered=True)))
    size, per_row = 4, None  # configurations per task; seconds per row (a running mean)
    pending = as_completed()
    inflight = 0

    def submit() -> bool:
        batch = take(stream, size)
        if batch:
            pending.add(client.submit(run_batch, batch, pure=False))
        return bool(batch)

    while inflight < 2 * workers and submit():
        inflight += 1
    for fut in pending:
        inflight -= 1
        rows = fut.result()
        times = [r["wall_s"] for r in rows if isinstance(r.get("wall_s"), (int, float))]
        if times:
            mean = sum(times) / len(times)
            per_row = mean if per_row is None else 0.5 * (per_row + mean)
            size = max(1, min(MAX_TASK, int(TASK_S / max(per_row, 1e-6))))
        while inflight < 2 * workers and submit():
            inflight += 1
        yield [row_values(_encode(r)) for r in rows]
