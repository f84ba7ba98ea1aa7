"""The library's exceptions.

Every error attnio raises on purpose derives from :class:`AttnioError`, so callers can catch the
library's own failures in one clause.  Bad parameters raise :class:`ParameterError`, which is also
a :class:`ValueError`, and its message names the parameter, the value given and the allowed range.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

import numpy as np


class AttnioError(Exception):
    """Base class of every error raised by attnio on purpose."""


class ParameterError(AttnioError, ValueError):
    """A parameter is outside its allowed range (names the parameter, the value and the range)."""


class CapacityError(AttnioError):
    """A step would make fast memory hold more than M words.

    Attributes
    ----------
    step : str
        The step that was refused (e.g. ``"load K[0:64, 0:64]"``).
    occupancy : int
        Words resident in fast memory before the step.
    needed : int
        Words the step would add.
    M : int
        The capacity of fast memory in words.
    """

    def __init__(self, step: str, occupancy: int, needed: int, M: int):
        self.step = step
        self.occupancy = occupancy
        self.needed = needed
        self.M = M
        super().__init__(
            f"{step} needs {needed} more words but fast memory already holds {occupancy} "
            f"of M={M} words ({occupancy + needed} > {M})"
        )


class ScheduleError(AttnioError):
    """A schedule broke a rule of the simulator (use after free, a bulk loop that leaks tiles, ...)."""


class UnknownNameError(ParameterError, KeyError):
    """An unknown name (algorithm, bound, device); the message suggests the closest known ones."""

    def __init__(self, kind: str, name: str, known: Iterable[str]):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        self.name = name
        self.known = known
        msg = f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"
        ValueError.__init__(self, msg)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


def check_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ParameterError naming ``name`` and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, (int,)) and not _is_integral(value):
        rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ParameterError(f"{name} must be an integer {rng}, got {value!r}")
    v = int(value)  # type: ignore[arg-type]
    if v < minimum or (maximum is not None and v > maximum):
        rng = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ParameterError(f"{name} must be an integer {rng}, got {v}")
    return v


def _is_integral(value: object) -> bool:
    return isinstance(value, np.integer)
