"""The progress bar of a sweep: rate and ETA on stderr, only when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["SweepProgress"]


class SweepProgress:
    """A rich progress bar with rate and ETA on stderr, shown only when stderr is a terminal
    (and ``enabled``)."""

    def __init__(self, total: int, enabled: bool):
        self.total = total
        self.enabled = enabled and total > 0 and _isatty(sys.stderr)
        self._p: Progress | None = None

    def start(self) -> None:
        if self.enabled and self._p is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            class Rate(ProgressColumn):
                def render(self, task):
                    el = task.elapsed
                    s = task.completed / el if el else None
                    return Text(f"{s:,.1f} cfg/s" if s else "- cfg/s")

            self._p = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), Rate(),
                               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                               console=Console(stderr=True), transient=True)
            self._p.start()
            self._task = self._p.add_task("sweep", total=self.total)

    def advance(self, n: int) -> None:
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
