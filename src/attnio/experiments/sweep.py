"""Sweeps: grids of configurations run into a results database (:mod:`attnio.experiments.store`).

The rooms of a sweep, each its own module:

* :mod:`.values` parses value lists (``"256:16384:x2"``, ``"16,64,128"``), masks, windows and
  algorithm names; :mod:`.grid` holds :class:`Grid`, :class:`Config` (an algorithm, a
  :class:`~attnio.core.workload.Shape`, ``M``) and their expansion into meaningful
  configurations; :mod:`.presets` the named sweeps and TOML grids;
* :mod:`.row` runs one configuration into one row (counts, closed form, certificate, verify);
* :mod:`.pool` (local worker processes), :mod:`.cluster` (Dask), :mod:`.writer` (transactions)
  and :mod:`.progress` (the progress bar) run many;
* this module: :func:`run_sweep` and :func:`dry_run`, which stream the grids, skip what the
  database already holds, and survive Ctrl-C, SIGTERM and SIGKILL without losing or duplicating
  a row.  The names above are importable from here too.

>>> [c.M for c in expand(Grid(N=(64,), d=(8,), M=parse_values("M", "64:256:x2"),
...                          algorithms=("flash2",))).configs]
[64, 128, 256]
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ParameterError
from . import row as _row
from .cluster import check_scheduler, dask_client, dask_rows
from .grid import (
    DEFAULT_MAX_CONFIGS,
    Config,
    Expansion,
    Grid,
    check_grid_size,
    checked_size,
    expand,
    iter_expand,
    iter_plans,
    plans,
)
from .pool import MAX_JOBS, Pool, tasks
from .presets import PRESETS, grid_from_mapping, grids_from_toml, override_grid
from .progress import SweepProgress
from .row import (
    FORWARD_ONLY,
    VERIFY_MAX_EVENTS,
    bounds_for,
    run_batch,
    run_config,
    skipped_row,
    verify_columns,
)
from .store import COLUMN_NAMES, ResultsStore, decode_row, row_values
from .values import parse_algorithms, parse_causal, parse_values, parse_window
from .writer import Writer

__all__ = [
    "DEFAULT_MAX_CONFIGS",
    "FORWARD_ONLY",
    "MAX_JOBS",
    "PRESETS",
    "VERIFY_MAX_EVENTS",
    "Config",
    "DryRun",
    "Expansion",
    "Grid",
    "SweepInterrupted",
    "SweepSummary",
    "bounds_for",
    "check_grid_size",
    "dry_run",
    "expand",
    "grid_from_mapping",
    "override_grid",
    "grids_from_toml",
    "iter_expand",
    "parse_algorithms",
    "parse_causal",
    "parse_values",
    "parse_window",
    "run_batch",
    "run_config",
    "run_sweep",
    "skipped_row",
    "verify_columns",
]


@dataclass
class SweepSummary:
    total: int          # configurations in the grid
    already: int        # present in the database before this run
    ran: int            # run now (ok, skipped at run time or error)
    skipped: int        # skipped rows written now (expansion + run time)
    errors: int
    wall_s: float
    db: str

    def __str__(self) -> str:
        return (f"{self.total} configurations: {self.already} already in {self.db}, "
                f"{self.ran} run now, {self.skipped} stored as skipped with a reason, "
                f"{self.errors} errors ({self.wall_s:.1f} s)")


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a sweep: every row that had arrived is in the database
    (``summary`` says how many), the workers are gone, and rerunning the same sweep resumes it."""

    def __init__(self, summary: SweepSummary, written: int = 0):
        super().__init__(str(summary))
        self.summary = summary
        self.written = written

    def line(self) -> str:
        """One line for the command line."""
        s = self.summary
        return (f"interrupted: {self.written:,} rows written to {s.db} by this run "
                f"({s.already:,} were there before); rerun the same command to resume")


@dataclass(frozen=True)
class DryRun:
    """What :func:`run_sweep` would do (:func:`dry_run`): nothing is written."""

    total: int       # configurations of the grids
    already: int     # rows the database already holds (ok or skipped): not run again
    to_run: int      # configurations that would run
    skipped: int     # configurations that would be stored as skipped (new ones)
    db: str
    examples: list[tuple[Config, str]] = field(default_factory=list)  # a few skip reasons
    #: every new skip, counted by (algorithm, reason): the sum of the counts is ``skipped``
    reasons: dict[tuple[str, str], int] = field(default_factory=dict)

    def __str__(self) -> str:
        held = f"{self.already:,} already in {self.db}" if self.already else \
            f"none in {self.db} yet"
        return (f"{self.total:,} configurations: {held}, {self.to_run:,} to run, "
                f"{self.skipped:,} to store as skipped with a reason")


def _done_sets(store: ResultsStore, any_verify: bool) -> tuple[set, set]:
    plain = store.done_hashes()
    return plain, (store.done_hashes(verify=True) if any_verify else plain)


def _held(cfg: Config, why: str | None, plain: set, verified: set) -> bool:
    """Whether the database already holds this configuration's row (with its verify columns
    when the grid asks for them)."""
    return cfg.hash() in (verified if cfg.verify and not why else plain)


def dry_run(grids: Grid | Iterable[Grid], db: str | os.PathLike | None = None, *,
            max_configs: int | None = DEFAULT_MAX_CONFIGS, examples: int = 10) -> DryRun:
    """Count what :func:`run_sweep` would run against ``db`` (read, never written; None or a
    missing file: an empty database), streaming the grid (memory does not grow with it)."""
    ps = plans(grids)
    checked_size(ps, max_configs)
    any_verify = any(p.g.verify for p in ps)
    plain: set[str]
    verified: set[str]
    plain = verified = set()
    path = "(no database)" if db is None else os.fspath(db)
    if db is not None and os.path.exists(path) and os.path.getsize(path) > 0:
        with ResultsStore(path, readonly=True) as st:
            plain, verified = _done_sets(st, any_verify)
    total = already = to_run = skipped = 0
    shown: list[tuple[Config, str]] = []
    reasons: dict[tuple[str, str], int] = {}
    for cfg, why in iter_plans(ps):
        total += 1
        if (plain or verified) and _held(cfg, why, plain, verified):
            already += 1
        elif why:
            skipped += 1
            key = (cfg.algorithm, why)
            reasons[key] = reasons.get(key, 0) + 1
            if len(shown) < examples:
                shown.append((cfg, why))
        else:
            to_run += 1
    return DryRun(total, already, to_run, skipped, path, shown, reasons)


def check_jobs(jobs: Any) -> int:
    """``jobs`` as an int in [1, :data:`MAX_JOBS`] (None: every core), else a ParameterError."""
    if jobs is None:
        return min(os.cpu_count() or 1, MAX_JOBS)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or not 1 <= jobs <= MAX_JOBS:
        raise ParameterError(f"jobs must be an integer in [1, {MAX_JOBS}] (worker processes), "
                             f"got {jobs!r}", param="jobs")
    return jobs


def _say_dashboard(url: str) -> None:
    """One line on stderr: where the Dask dashboard of this sweep is (it answers while it runs)."""
    print(f"Dask dashboard: {url}", file=sys.stderr, flush=True)


def run_sweep(
    grids: Grid | Iterable[Grid],
    db: str | os.PathLike = "attnio-results.sqlite",
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    dask: bool = False,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
    max_configs: int | None = DEFAULT_MAX_CONFIGS,
) -> SweepSummary:
    """Run every configuration of ``grids`` that ``db`` does not hold yet.

    ``jobs``: local worker processes, at most :data:`MAX_JOBS` and never more than the grid has
    configurations (default: all cores; 1 runs in this process).
    ``scheduler="tcp://HOST:PORT"``: run on that Dask distributed scheduler; ``dask=True``: start a
    local Dask cluster of ``jobs`` workers.  The grid is streamed (never held in memory) and the
    rows are written as they go, many per transaction: a worker sends the rows of its task every
    :data:`~attnio.experiments.pool.PART_S` seconds while it runs, and a row that has arrived is
    committed within :data:`~attnio.experiments.writer.COMMIT_EVERY_S` seconds (twice that at
    worst) even while the next rows take minutes, so a sweep killed at any instant loses no row
    that had arrived and a rerun resumes it.  Ctrl-C (or SIGTERM, in the main thread)
    stops the workers at once, writes the rows that had arrived and raises
    :class:`SweepInterrupted`; workers die with this process whatever kills it.  Invalid input
    (unknown algorithm, empty grid, a grid of more than ``max_configs`` configurations, an
    unusable db) raises before anything is written.  ``progress``: a progress bar on stderr when
    it is a terminal.
    """
    t0 = time.perf_counter()
    ps = plans(grids)
    total = checked_size(ps, max_configs)
    jobs = min(check_jobs(jobs), max(1, total))
    check_scheduler(scheduler)
    # the first configuration: an expansion error (a bad workload) raises before anything is open
    stream = iter_plans(ps)
    first = next(stream, None)
    if first is None:
        raise ParameterError("grid: it expands to no configuration (an empty grid)")
    ResultsStore.check(db)  # refuse a foreign/old/unwritable db before connecting anywhere
    run = _Run(total, os.fspath(db), t0, on_row)
    with _sigterm_as_interrupt(), dask_client(scheduler, jobs, dask, _say_dashboard) as client:
        run.open(any(p.g.verify for p in ps), progress)
        try:
            if client is None and jobs > 1:
                run.pool = Pool(jobs)  # before the progress bar's thread: workers are forked
            run.bar.start()
            run.writer.start()  # commits what waits while a slow row or batch runs
            run.consume(_execute(run.todo(itertools.chain([first], stream)), jobs=jobs,
                                 client=client, pool=run.pool))
        except KeyboardInterrupt:
            with _no_interrupts():  # a second Ctrl-C does not break the clean-up
                run.close()
            raise SweepInterrupted(run.summary(), run.writer.written) from None
        finally:
            run.close()
    return run.summary()


class _Run:
    """The state of one :func:`run_sweep`: the store, the writer, the progress bar, the pool
    and the counts."""

    def __init__(self, total: int, db: str, t0: float, on_row: Callable[[dict], None] | None):
        self.db, self.t0, self.on_row = db, t0, on_row
        self.counts = {"total": 0, "already": 0, "ran": 0, "skipped": 0, "errors": 0}
        self.bar = SweepProgress(total, False)
        self.pool: Pool | None = None
        self.store: ResultsStore | None = None

    def open(self, any_verify: bool, progress: bool) -> None:
        self.store = ResultsStore(self.db)
        self.store.record_provenance()
        self.writer = Writer(self.store)
        self.bar = SweepProgress(self.bar.total, progress)
        self.plain, self.verified = _done_sets(self.store, any_verify)

    def todo(self, configs: Iterator[tuple[Config, str | None]]) -> Iterator[Config]:
        """The configurations to run; those held are counted, the skipped ones written."""
        counts, bar = self.counts, self.bar
        for cfg, why in configs:
            counts["total"] += 1
            if _held(cfg, why, self.plain, self.verified):
                counts["already"] += 1
                bar.passed(1)
            elif why:
                self.writer.add([row_values(skipped_row(cfg, why))])
                counts["skipped"] += 1
                bar.passed(1)
            else:
                yield cfg

    def consume(self, batches: Iterator[list[tuple]]) -> None:
        counts = self.counts
        for rows in batches:
            for r in rows:
                status = r[_STATUS]
                counts["ran"] += 1
                counts["skipped"] += status == "skipped"
                counts["errors"] += status == "error"
                if self.on_row:
                    self.on_row(decode_row(dict(zip(COLUMN_NAMES, r))))
            self.writer.add(rows)
            self.bar.finished(len(rows))
        self.writer.flush()

    def close(self) -> None:
        """Stop the workers and the bar, write the rows that had arrived, close the store
        (idempotent: the interrupt path and the normal path both end here)."""
        if self.pool is not None:
            pool, self.pool = self.pool, None
            pool.terminate()
        self.bar.stop()
        if self.store is not None:
            store, self.store = self.store, None
            try:
                self.writer.stop()
                self.writer.flush()
            finally:
                store.close()

    def summary(self) -> SweepSummary:
        c = self.counts
        return SweepSummary(c["total"], c["already"], c["ran"], c["skipped"], c["errors"],
                            time.perf_counter() - self.t0, self.db)


_STATUS = COLUMN_NAMES.index("status")


def _execute(todo: Iterator[Config], *, jobs: int, client: Any = None,
             pool: Pool | None = None) -> Iterator[list[tuple]]:
    """Rows (value tuples) of the configurations, as they arrive."""
    if client is not None:
        yield from dask_rows(client, todo, jobs)
    elif pool is None:  # in this process, one configuration at a time
        for c in todo:
            yield [_row.run_encoded(c)]
    else:
        yield from pool.map(tasks(todo, ordered=True))


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM handled as Ctrl-C inside (main thread only): the rows that arrived are written
    and the sweep stops with :class:`SweepInterrupted`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM ignored inside (main thread only): the clean-up after an interrupt
    runs to its end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)

