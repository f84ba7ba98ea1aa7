"""The progress bar of a sweep: rate and ETA on stderr, only when stderr is a terminal.

The rate and the ETA come from the rows that actually ran (:meth:`SweepProgress.finished`):
the configurations the database already holds and those stored as skipped pass in an instant
(:meth:`SweepProgress.passed`), so counting them would make a resumed sweep look many times
faster than it is; the configurations still ahead are assumed to cost what the finished ones
did.

>>> t = [0.0]
>>> bar = SweepProgress(100, False, clock=lambda: t[0])
>>> bar.start(); bar.passed(50)      # 50 held by the database: no time spent
>>> t[0] = 10.0; bar.finished(10)    # 10 rows ran in 10 s
>>> bar.rate(), bar.eta()            # 40 left at 1 row/s
(1.0, 40.0)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["SweepProgress"]


class SweepProgress:
    """A rich progress bar with rate and ETA on stderr, shown only when stderr is a terminal
    (and ``enabled``); the counts, :meth:`rate` and :meth:`eta` are kept either way.
    ``clock`` (seconds) can be replaced in tests."""

    def __init__(self, total: int, enabled: bool, clock: Callable[[], float] = time.monotonic):
        self.total = total
        self.enabled = enabled and total > 0 and _isatty(sys.stderr)
        self.clock = clock
        self.done_run = 0    # rows that ran in this sweep (ok, skipped at run time, error)
        self.done_passed = 0  # configurations held already or stored as skipped unrun
        self.t0: float | None = None
        self._p: Progress | None = None

    @property
    def done(self) -> int:
        return self.done_run + self.done_passed

    def rate(self) -> float | None:
        """Rows run per second since :meth:`start` (None before the first one)."""
        if self.t0 is None or not self.done_run:
            return None
        el = self.clock() - self.t0
        return self.done_run / el if el > 0 else None

    def eta(self) -> float | None:
        """Seconds left: the configurations not done yet at :meth:`rate` (None while unknown)."""
        r = self.rate()
        return None if r is None else max(0, self.total - self.done) / r

    def start(self) -> None:
        if self.t0 is None:
            self.t0 = self.clock()
        if self.enabled and self._p is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.text import Text

            bar = self

            class Rate(ProgressColumn):
                def render(self, task):
                    s = bar.rate()
                    return Text(f"{s:,.1f} cfg/s" if s else "- cfg/s")

            class Eta(ProgressColumn):
                def render(self, task):
                    s = bar.eta()
                    if s is None:
                        return Text("ETA -:--:--")
                    s = round(s)
                    return Text(f"ETA {s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}")

            self._p = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), Rate(),
                               TimeElapsedColumn(), Eta(), console=Console(stderr=True),
                               transient=True)
            self._p.start()
            self._task = self._p.add_task("sweep", total=self.total)

    def finished(self, n: int) -> None:
        """``n`` rows ran (they set the rate)."""
        self.done_run += n
        self._advance(n)

    def passed(self, n: int) -> None:
        """``n`` configurations needed no run (held by the database, or stored as skipped)."""
        self.done_passed += n
        self._advance(n)

    def _advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def stop(self) -> None:
        if self._p is not None:
            p, self._p = self._p, None
            p.stop()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
