"""The library's exceptions.

Every error attnio raises on purpose derives from :class:`AttnioError`, so callers can catch the
library's own failures in one clause.  Bad parameters raise :class:`ParameterError`, which is also
a :class:`ValueError`, and its message names the parameter, the value given and the allowed range.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class AttnioError(Exception):
    """Base class of every error raised by attnio on purpose."""


class ParameterError(AttnioError, ValueError):
    """A parameter is outside its allowed range (names the parameter, the value and the range).

    ``param`` (optional) is the argument's API name (``"kv_heads"``); the command line uses it to
    print the flag the user typed (``--kv-heads``) instead.
    """

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.param = param


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
        if occupancy == 0:  # refused up front: nothing is resident yet
            msg = f"{step} needs {needed:,} words of fast memory, more than M={M}"
        else:
            msg = (f"{step} needs {needed:,} more words but fast memory already holds "
                   f"{occupancy:,} of M={M} words ({occupancy + needed:,} > {M})")
        super().__init__(msg)


class ScheduleError(AttnioError):
    """A schedule broke a rule of the simulator (use after free, a bulk loop that leaks tiles, ...)."""


class UnknownNameError(ParameterError, KeyError):
    """An unknown name (algorithm, bound, device); the message suggests the closest known ones.

    ``param`` is the argument that took the name (default: ``kind``)."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, param: str | None = None):
        known = sorted(known)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        self.name = name
        self.known = known
        self.param = param or kind
        msg = f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})"
        ValueError.__init__(self, msg)

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class MissingExtraError(AttnioError, ImportError):
    """An optional dependency is not installed; the message names the extra and the pip command."""

    def __init__(self, module: str, extra: str, purpose: str):
        self.module, self.extra, self.purpose = module, extra, purpose
        super().__init__(
            f"{purpose} needs {module}, which is not installed: pip install 'attnio[{extra}]'"
        )
