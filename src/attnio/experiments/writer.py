"""The results writer of a sweep: rows buffered and committed many per transaction."""

from __future__ import annotations

import time

from .store import ResultsStore

__all__ = ["Writer"]


class Writer:
    """Buffers rows (value tuples) and commits them, many per transaction, at least every
    0.2 s; ``written`` counts the rows committed."""

    def __init__(self, store: ResultsStore, every_s: float = 0.2):
        self.store, self.every_s = store, every_s
        self.buf: list[tuple] = []
        self.last = time.monotonic()
        self.written = 0

    def add(self, rows: list[tuple]) -> None:
        self.buf.extend(rows)
        if time.monotonic() - self.last >= self.every_s or len(self.buf) >= 2048:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.store.insert_values(self.buf)  # interrupted: rolled back, and still buffered
            self.written += len(self.buf)
            self.buf = []
        self.last = time.monotonic()

