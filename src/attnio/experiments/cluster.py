"""Dask distributed execution of a sweep: a client (a remote scheduler or a local cluster) and
the rows of the configurations, run as tasks of :func:`attnio.experiments.row.run_batch`."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from typing import Any

from ..core.errors import AttnioError, ParameterError
from ..core.extras import require
from .grid import Config
from .pool import cost
from .row import run_batch
from .store import row_values

__all__ = ["check_scheduler", "dask_client", "dask_rows"]

_SCHEMES = ("tcp://", "tls://", "inproc://", "ucx://", "ws://", "wss://")


def check_scheduler(scheduler: str | None) -> None:
    """A ParameterError unless ``scheduler`` is None or an address like ``tcp://HOST:PORT``."""
    if scheduler is not None and not str(scheduler).startswith(_SCHEMES):
        raise ParameterError(f"scheduler must be an address like tcp://HOST:PORT, got "
                             f"{scheduler!r}", param="scheduler")


@contextlib.contextmanager
def dask_client(scheduler: str | None, jobs: int, dask: bool) -> Iterator[Any]:
    """A Dask distributed client (remote scheduler or a local cluster), or None."""
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
            yield client
        return
    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _encode(row: dict) -> dict:
    return {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
            for k, v in row.items()}


def dask_rows(client: Any, todo: Iterator[Config], jobs: int) -> Iterator[list[tuple]]:
    """Rows (value tuples) of the configurations run on the cluster, as they arrive; tasks of
    up to 32 configurations, the slowest first."""
    from distributed import as_completed

    cfgs = sorted(todo, key=cost, reverse=True)
    workers = max(1, len(client.scheduler_info().get("workers", {})) or jobs)
    size = max(1, min(32, math.ceil(len(cfgs) / (workers * 16))))
    futures = client.map(run_batch, [cfgs[i:i + size] for i in range(0, len(cfgs), size)],
                         pure=False)
    for fut in as_completed(futures):
        yield [row_values(_encode(r)) for r in fut.result()]
