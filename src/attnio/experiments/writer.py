"""The results writer of a sweep: rows buffered and committed many per transaction, and never
left waiting: a row that has arrived is committed within :data:`COMMIT_EVERY_S` seconds (twice
that at worst), however long the next row or batch takes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .store import ResultsStore

__all__ = ["COMMIT_EVERY_S", "Writer"]

#: Seconds between two commits while rows arrive; a row is never buffered much longer.
COMMIT_EVERY_S = 0.2
_MAX_BUFFER = 2048  # rows: committed at once beyond this


class Writer:
    """Buffers rows (value tuples) and commits them, many per transaction, at least every
    ``every_s`` seconds while rows arrive (:meth:`add`).  With :meth:`start`, a background
    thread also commits rows that have waited ``every_s`` when nothing else arrives (the sweep
    is busy with a slow row or waits for a worker's batch), so the database keeps up with the
    rows finished, whatever the batch size.  ``written`` counts the rows committed,
    ``commits`` the transactions; ``clock`` (seconds) can be replaced in tests.

    Every commit is one transaction (all its rows or none); a commit interrupted (Ctrl-C in the
    main thread) is rolled back and its rows stay buffered, so :meth:`close` writes them."""

    def __init__(self, store: ResultsStore, every_s: float = COMMIT_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.store, self.every_s, self.clock = store, every_s, clock
        self.buf: list[tuple] = []
        self.last = clock()            # the last commit (or the start)
        self.oldest: float | None = None  # when the oldest buffered row arrived
        self.written = 0
        self.commits = 0
        # re-entrant: a Ctrl-C that lands between acquiring and entering a ``with`` cannot
        # leave the main thread locked out of its own final flush
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def add(self, rows: list[tuple]) -> None:
        """Buffer ``rows``; commit the buffer if the last commit is ``every_s`` old (or it is
        large).  An error of the background commit is raised here."""
        with self._lock:
            self._raise()
            if rows:
                if self.oldest is None:
                    self.oldest = self.clock()
                self.buf.extend(rows)
            if self.buf and (self.clock() - self.last >= self.every_s
                             or len(self.buf) >= _MAX_BUFFER):
                self._flush()

    def flush(self) -> None:
        """Commit every buffered row now."""
        with self._lock:
            self._raise()
            self._flush()

    def _flush(self) -> None:
        if self.buf:
            self.store.insert_values(self.buf)  # interrupted: rolled back, and still buffered
            self.written += len(self.buf)
            self.commits += 1
            self.buf = []
            self.oldest = None
        self.last = self.clock()

    def due(self) -> bool:
        """Whether buffered rows have waited ``every_s`` (the background thread commits them)."""
        return self.oldest is not None and self.clock() - self.oldest >= self.every_s

    def tick(self) -> None:
        """Commit the buffer if it is :meth:`due` (what the background thread does)."""
        with self._lock:
            if self._error is None and self.due():
                self._flush()

    # ------------------------------------------------------------ the background commits
    def start(self) -> None:
        """Start the background thread (after any worker process is forked)."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="attnio-sweep-writer",
                                            daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s / 2):
            try:
                self.tick()
            except BaseException as e:  # noqa: BLE001 - raised in the main thread by add/flush
                self._error = e
                return

    def stop(self) -> None:
        """Stop the background thread (a commit it has begun completes first)."""
        if self._thread is not None:
            thread, self._thread = self._thread, None
            self._stop.set()
            thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            e, self._error = self._error, None
            raise e
