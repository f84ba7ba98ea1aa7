"""Progress on long work: one display every layer can use.

Long loops of the library (the simulator's tile steps, cache replays, trace recording, the
pebbling search) report through a plain callback, ``report(done, total)``, that costs nothing
when absent.  :class:`Progress` is such a callback that draws a bar (rich) on stderr:

* only when stderr is a terminal (or ``enabled=True``), never with ``enabled=False`` (the CLI's
  ``--quiet``);
* only once the work has run for ``delay`` seconds (default 1), so quick work prints nothing;
* transient: the bar is erased when the work ends, leaving the command's own output alone.

rich is imported only when a bar is drawn.

>>> with Progress("counting", total=10, enabled=False) as p:
...     for i in range(10):
...         p(i + 1)
>>> p.done, p.shown
(10, False)
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

__all__ = ["Progress", "ProgressCallback"]

#: A progress report: ``report(done, total)``; ``total`` may be 0 when unknown.
ProgressCallback = Callable[[int, int], None]


def _on_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress bar on stderr for work that may take more than a couple of seconds.

    Call the object (``p(done)`` or ``p(done, total)``) to report; :meth:`describe` changes the
    label (a new phase).  ``total=None`` (or 0) draws a spinner with the elapsed time instead of
    a bar.  ``enabled=None`` shows the bar when ``stream`` (default stderr) is a terminal;
    ``ATTNIO_PROGRESS=0`` in the environment turns every bar off.  ``clock=True`` makes the bar
    show the seconds elapsed out of ``total`` seconds (work with a time limit that cannot report,
    such as a solver running in C).
    """

    def __init__(self, description: str, total: float | None = None, *,
                 enabled: bool | None = None, delay: float = 1.0, unit: str = "",
                 stream: IO[str] | None = None, clock: bool = False):
        self.description = description
        self.total = total or None
        self.unit = unit
        self.delay = float(delay)
        self._stream = stream if stream is not None else sys.stderr
        if enabled is None:
            enabled = (_on_terminal(self._stream)
                       and os.environ.get("ATTNIO_PROGRESS", "1") != "0")
        self.enabled = bool(enabled)
        self.done: float = 0
        self.shown = False
        self._bar: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._clock = clock
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ context
    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        if self.enabled:
            if self.delay <= 0:
                self._start()
            else:
                self._timer = threading.Timer(self.delay, self._start)
                self._timer.daemon = True
                self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the display (erasing the bar); further reports are ignored."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
            if self._bar is not None:
                self._bar.stop()
                self._bar = None

    # ------------------------------------------------------------------ reporting
    def __call__(self, done: float, total: float | None = None) -> None:
        self.done = done
        if total:
            self.total = total
        bar = self._bar
        if bar is not None:
            bar.update(self._task, completed=done, total=self.total)

    def advance(self, n: float = 1) -> None:
        self(self.done + n)

    def describe(self, description: str, total: float | None = None, unit: str = "") -> None:
        """A new phase: another label (and total and unit), the count starting again at 0."""
        self.description = description
        self.done = 0
        self.total = total or None
        self.unit = unit
        bar = self._bar
        if bar is not None:
            bar.reset(self._task, total=self.total, description=description, unit=unit)

    # ------------------------------------------------------------------ drawing
    def _start(self) -> None:
        with self._lock:
            if self._closed or self._bar is not None:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            console = Console(file=self._stream, force_terminal=True if self.enabled else None)
            self._bar = RichProgress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
                TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)
            self._task = self._bar.add_task(self.description, total=self.total,
                                            completed=self.done, unit=self.unit)
            self._bar.start()
            self.shown = True
            if self._clock:
                threading.Thread(target=self._tick_clock, daemon=True).start()

    def _tick_clock(self) -> None:
        while not self._closed:
            elapsed = time.monotonic() - self._t0
            self(min(elapsed, self.total) if self.total else elapsed)
            time.sleep(0.25)
