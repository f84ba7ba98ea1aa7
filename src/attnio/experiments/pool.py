"""The local process pool of a sweep: ``jobs`` workers, each on its own pipe.

No queues, locks or semaphores, so nothing leaks when workers are terminated.  A worker dies with
its parent: it closes every inherited pipe end but its own (so the parent's death closes its pipe
and the worker sees end-of-file), and on Linux it also asks the kernel for SIGKILL when the parent
dies (``prctl(PR_SET_PDEATHSIG)``).  Workers ignore SIGINT and SIGTERM: Ctrl-C or a SIGTERM to
the process group reaches every process, and only the parent acts on it (it kills the workers,
writes what arrived and exits), so a worker never prints a traceback.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from ..core.errors import AttnioError
from . import row as _row
from .grid import Config

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

__all__ = ["MAX_JOBS", "Pool", "tasks"]

#: The most worker processes a sweep starts (``jobs`` beyond it is refused).
MAX_JOBS = 256

#: Configurations per task: count mode runs a configuration in about a millisecond, so tasks of
#: 64 keep the pipes quiet; compute mode sends them one at a time.
_TASK_COUNT, _TASK_COMPUTE = 64, 1
#: Configurations sorted at a time with several workers (slowest first, count mode by locality:
#: :func:`tasks`); the first window too, so that a grid's algorithms (its outermost loop) meet.
_WINDOW = 4096
#: A worker sends the rows of its task so far once this many seconds have passed since it last
#: sent (a task of slow rows does not hold them back until its end).
PART_S = 0.25
_clock = time.monotonic  # the workers' clock (replaceable in tests)


def cost(c: Config) -> float:
    """A rough cost estimate, to start the slowest configurations first (shorter tail)."""
    s = c.shape
    work = s.n_heads * s.Nq * s.Nkv * s.d / math.sqrt(c.M)
    return work * (50.0 if c.mode == "compute" else 1.0) * (8.0 if s.causal else 1.0)


def _by_locality(window: list[Config]) -> list[list[Config]]:
    """Count mode: the window's configurations in bundles that share (workload, M) (the same
    certificate: the same required pairs, d and M), ordered by d (the blocks of one d slowest
    first), then M (increasing), then workload (as they came).  The bundles of one worker's tasks
    then share the bounds' caches: a certificate computed once for every algorithm of the
    bundle, and the tables per (d, M) of :mod:`attnio.bounds.segments` for neighbouring M."""
    bundles: dict[tuple, list[Config]] = {}
    for c in window:
        bundles.setdefault((c.shape, c.M, c.mode, c.backward), []).append(c)
    blocks: dict[tuple, list[list[Config]]] = {}
    for (shape, _, mode, backward), b in bundles.items():
        blocks.setdefault((shape.d, mode, backward), []).append(b)
    out: list[list[Config]] = []
    ranked = sorted(blocks.values(), key=lambda bl: sum(cost(c) for b in bl for c in b),
                    reverse=True)
    for bl in ranked:
        out.extend(sorted(bl, key=lambda b: b[0].M))  # (stable: the workloads as they came)
    return out


def tasks(todo: Iterator[Config], ordered: bool) -> Iterator[list[Config]]:
    """Batches of configurations from the stream; with ``ordered``, each window of
    :data:`_WINDOW` configurations slowest first, count-mode ones grouped by locality
    (:func:`_by_locality`: the configurations that share a certificate in one task, those that
    share d and M next to each other), a task cut only between such bundles."""
    while True:
        window = list(itertools.islice(todo, _WINDOW))
        if not window:
            return
        if ordered:
            window.sort(key=cost, reverse=True)
            count = [c for c in window if c.mode != "compute"]
            bundles = [[c] for c in window if c.mode == "compute"]
            bundles += _by_locality(count) if count else []
        else:
            bundles = [[c] for c in window]
        batch: list[Config] = []
        for b in bundles:
            limit = _TASK_COMPUTE if b[0].mode == "compute" else _TASK_COUNT
            if batch and len(batch) + len(b) > limit:
                yield batch
                batch = []
            batch.extend(b)
        if batch:
            yield batch


def _die_with_parent(parent_pid: int) -> None:
    """Linux: SIGKILL this process when its parent dies (and now, if it already has)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        PR_SET_PDEATHSIG = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(0)


def _worker(conn, inherited: list, parent_pid: int) -> None:
    """A pool worker: tasks in, rows out, over one pipe, until the pipe closes."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    for c in inherited:  # the parent's ends of every pipe: without them, its death is EOF here
        with contextlib.suppress(OSError):
            c.close()
    _die_with_parent(parent_pid)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed): so is the work
            return
        if task is None:
            return
        try:
            _run_task(conn, task)
        except (BrokenPipeError, OSError):
            return
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
            try:
                conn.send(("error", f"{type(e).__name__}: {e}"))
            except OSError:
                return


def _run_task(conn, task: list[Config]) -> None:
    """Run one task: its rows go back as ``("part", rows)`` messages every :data:`PART_S`
    seconds while it runs, then ``("ok", rows)`` with the rest (the task is done)."""
    rows: list[tuple] = []
    last = _clock()
    _row.prepare(task)
    for i, cfg in enumerate(task):
        rows.append(_row.run_encoded(cfg))
        if i + 1 < len(task) and _clock() - last >= PART_S:
            conn.send(("part", rows))
            rows, last = [], _clock()
    conn.send(("ok", rows))


def _may_fork() -> bool:
    """Whether workers are forked: where the platform can, and while this process runs no
    other thread (a thread's lock held at the fork would stay held in the worker)."""
    import multiprocessing as mp
    import threading

    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


class Pool:
    """``jobs`` worker processes, each on its own pipe.  Workers are forked where the platform
    allows it (this process has imported everything already), with SIGINT and SIGTERM blocked
    while they start so that a signal at that instant reaches only the parent; a worker keeps
    two tasks in flight."""

    def __init__(self, jobs: int):
        import multiprocessing as mp

        fork = _may_fork()
        self.ctx: Any = mp.get_context("fork") if fork else mp.get_context("spawn")
        self.procs: list = []
        self.conns: list = []
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        masked = hasattr(signal, "pthread_sigmask")
        sigs = {signal.SIGINT, signal.SIGTERM}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs) if masked else None
        try:
            for _ in range(jobs):
                parent, child = self.ctx.Pipe(duplex=True)
                # a forked worker holds copies of the parent's ends (its own and the earlier
                # workers'): it closes them; a spawned one inherits none
                inherited = [*self.conns, parent] if fork else []
                proc = self.ctx.Process(target=_worker, args=(child, inherited, os.getpid()),
                                        daemon=True)
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.terminate()
            raise
        finally:
            if old is not None:  # set exactly when masked
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def map(self, work: Iterator[list[Config]]) -> Iterator[list[tuple]]:
        """The rows of every task, as they arrive (not in task order; a long task's in several
        parts)."""
        from multiprocessing.connection import wait

        inflight = {c: 0 for c in self.conns}
        exhausted = False

        def feed(c) -> None:
            nonlocal exhausted
            while not exhausted and inflight[c] < 2:
                task = next(work, None)
                if task is None:
                    exhausted = True
                    return
                c.send(task)
                inflight[c] += 1

        for c in self.conns:
            feed(c)
        while any(inflight.values()):
            # wait returns the objects it was given: the pipe ends in self.conns
            for c in cast("list[Connection]", wait([c for c, n in inflight.items() if n])):
                try:
                    kind, payload = c.recv()
                except (EOFError, OSError):
                    proc = self.procs[self.conns.index(c)]
                    proc.join(0.5)
                    raise AttnioError(f"a sweep worker died (exit code {proc.exitcode}); the rows "
                                      "that arrived are saved: rerun the sweep to resume") from None
                if kind == "part":
                    yield payload
                    continue
                inflight[c] -= 1
                if kind != "ok":
                    raise AttnioError(f"a sweep worker failed: {payload}")
                feed(c)
                if payload:
                    yield payload
        self.close()

    def close(self) -> None:
        """Let the workers finish (they exit when their pipe closes)."""
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.send(None)
            c.close()
        for p in self.procs:
            p.join(2)
            if p.is_alive():
                p.kill()
                p.join(0.5)
        self.procs, self.conns = [], []

    def terminate(self) -> None:
        """Stop every worker now (SIGKILL: they ignore SIGTERM): their work in progress is not
        in the database and runs again on resume."""
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.kill()
        for c in self.conns:
            with contextlib.suppress(Exception):
                c.close()
        deadline = time.monotonic() + 2.0
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.join(max(0.0, deadline - time.monotonic()))
        self.procs, self.conns = [], []
