"""What a piece of work will cost, checked before anything large is allocated.

Every entry point that allocates in proportion to the workload (compute-mode runs, traces,
replays, the blocked matmul) first estimates the memory and time it is about to spend, from
closed forms, and refuses in one line when that exceeds what the machine has (or
``max_memory``) or the time budget:

>>> need = Cost(bytes=3 * 10**12, seconds=5.0, what="Q, K, V and O")
>>> check_cost(need, subject="N=10000000", instead="use mode='count'", max_memory=10**9)
Traceback (most recent call last):
...
attnio.core.resources.ResourceError: N=10000000 would need about 3 TB of memory (Q, K, V and O), more than max_memory (1 GB); use mode='count'

The refusal is a :class:`ResourceError`, a :class:`~attnio.core.errors.ParameterError` whose
``param`` names the limit that refused (``max_memory`` or ``budget_s``), so the command line
prints it with its own flags (``--max-memory``, ``--budget``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from .checks import check_int, check_real
from .errors import ParameterError

__all__ = ["COPY_SECONDS_PER_WORD", "DEFAULT_BUDGET_S", "FLOPS_PER_SECOND", "STEP_SECONDS",
           "Cost", "Limits", "ResourceError", "available_memory", "check_cost", "fmt_bytes",
           "fmt_count", "fmt_seconds", "parse_bytes"]

#: Work estimated to take longer than this many seconds is refused unless forced.
DEFAULT_BUDGET_S = 300.0
#: The simulator's cost of one tile step in compute mode, in seconds (measured 25-150 us on the
#: project's 2-core machine, idle to loaded).
STEP_SECONDS = 6e-5
#: numpy float64 matmul throughput on small tiles, 2 cores (conservative), per second.
FLOPS_PER_SECOND = 2.0e9
#: Creating, filling and copying a word of a large array (page faults included), in seconds.
COPY_SECONDS_PER_WORD = 3e-8


class ResourceError(ParameterError):
    """The work would need more memory or time than allowed (said before anything is allocated).

    Its parts are kept (``subject``, ``need``: the amount, ``limit``: the allowed amount,
    ``instead``: what to do instead), so a caller speaking other words (the command line's
    flags) rewords it with :meth:`render` and :meth:`instead_of`; ``param`` is the limit that
    refused (``max_memory`` or ``budget_s``)."""

    def __init__(self, subject: str, need: str, limit: str, instead: str, *, param: str,
                 machine: bool = False):
        self.subject, self.need, self.limit, self.instead = subject, need, limit, instead
        self.machine = machine  # the limit is what the machine has, not max_memory
        self.param = param
        super().__init__(self.limit_message(param, "force=True"), param=param)

    def limit_message(self, name: str, force: str) -> str:
        """The message with ``name`` for the limit's parameter and ``force`` for the override."""
        if self.param == "max_memory":
            where = (f"the {self.limit} this machine has available" if self.machine
                     else f"{name} ({self.limit})")
            return f"{self.subject} would need about {self.need}, more than {where}; {self.instead}"
        return (f"{self.subject} would take about {self.need}, more than {name} ({self.limit}); "
                f"{self.instead}, raise {name}, or {force}")

    def instead_of(self, instead: str) -> ResourceError:
        """The same refusal with another suggestion of what to do instead."""
        assert self.param is not None
        return ResourceError(self.subject, self.need, self.limit, instead, param=self.param,
                             machine=self.machine)


@dataclass(frozen=True)
class Cost:
    """An estimate: ``bytes`` of memory at the peak, ``seconds`` of time, and what they are for."""

    bytes: int
    seconds: float
    what: str = ""

    def __add__(self, other: Cost) -> Cost:
        what = ", ".join(w for w in (self.what, other.what) if w)
        return Cost(self.bytes + other.bytes, self.seconds + other.seconds, what)


@dataclass(frozen=True)
class Limits:
    """What a piece of work may spend: ``budget_s`` seconds (None: no time limit) unless
    ``force``, and ``max_memory`` bytes (None: what the machine has available).  Validated on
    construction (a string such as ``budget_s='5'`` or ``force='no'`` is refused)."""

    budget_s: float | None = DEFAULT_BUDGET_S
    force: bool = False
    max_memory: int | None = None

    def __post_init__(self) -> None:
        if self.budget_s is not None:
            object.__setattr__(self, "budget_s", check_real(
                "budget_s", _number("budget_s", self.budget_s), lo=0, what="seconds"))
        if not isinstance(self.force, (bool, np.bool_)):
            raise ParameterError(f"force must be True or False, got {self.force!r}",
                                 param="force")
        object.__setattr__(self, "force", bool(self.force))
        if self.max_memory is not None:
            object.__setattr__(self, "max_memory",
                               check_int("max_memory", self.max_memory, minimum=1))

    def check(self, cost: Cost, *, subject: str, instead: str, timed: bool = True) -> None:
        """:func:`check_cost` under these limits (``timed=False``: memory only)."""
        check_cost(cost, subject=subject, instead=instead, max_memory=self.max_memory,
                   budget_s=self.budget_s if timed else None, force=self.force)


def _number(name: str, value: object) -> object:
    """``value`` if it is a real number (a numpy scalar too), else a ParameterError: a string
    that reads as a number is refused, not parsed."""
    if isinstance(value, (str, bytes)):
        raise ParameterError(f"{name} must be a number, got the string {value!r}", param=name)
    return value


def available_memory() -> int:
    """Bytes of memory this process can still use (``MemAvailable``; physical memory if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 1 << 34  # unknown: assume 16 GiB


def fmt_bytes(n: float) -> str:
    """``1.2 GB`` (decimal units, two significant figures at most)."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB", "EB"):
        if abs(n) < 1000 or unit == "EB":
            if unit == "B":
                return f"{n:.0f} B"
            return f"{n:.2g} {unit}" if abs(n) < 10 else f"{n:.0f} {unit}"
        n /= 1000
    return f"{n:.3g} EB"  # pragma: no cover


def fmt_seconds(s: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``, ``2.1e+05 years``."""
    if s < 100:
        return f"{s:.2g} s" if s < 10 else f"{s:.0f} s"
    if s < 6000:
        return f"{s / 60:.0f} min"
    if s < 3.6e5:
        return f"{s / 3600:.2g} h"
    if s < 3.2e8:
        return f"{s / 86400:.3g} days"
    return f"{s / 3.15e7:.2g} years"


def fmt_count(x: float | int) -> str:
    """A count with thousands separators when every digit is meaningful, else 3 significant
    figures (a float beyond 2**53 carries rounding noise in its low digits).

    >>> fmt_count(1234567), fmt_count(1234567.0), fmt_count(1.2345678901234567e30)
    ('1,234,567', '1,234,567', '1.23e+30')
    """
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    if not math.isfinite(x):
        return str(x)
    if abs(x) < 2**53:
        return f"{x:,.0f}"
    return f"{x:.3g}"


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


def parse_bytes(text: str | int | float, name: str = "max_memory") -> int:
    """``8G``, ``512MB``, ``2GiB`` or a number of bytes, as an int > 0."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return int(check_real(name, text, lo=1))
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(num):]
    if unit not in _UNITS:
        raise ParameterError(f"{name} must be a size such as 8G, 512MB or 2GiB, got {text!r}",
                             param=name)
    try:
        value = float(num)
    except ValueError:
        raise ParameterError(f"{name} must be a size such as 8G, 512MB or 2GiB, got {text!r}",
                             param=name) from None
    if not (math.isfinite(value) and value * _UNITS[unit] >= 1):
        raise ParameterError(f"{name} must be a size of at least 1 byte, got {text!r}",
                             param=name)
    return int(value * _UNITS[unit])


#: Without ``max_memory``, a cost under this many bytes is taken to fit without asking the
#: machine (every machine attnio runs on has 64 MiB to spare).
_NEVER_SHORT = 1 << 26


def check_cost(cost: Cost, *, subject: str, instead: str, max_memory: int | None = None,
               budget_s: float | None = None, force: bool = False) -> None:
    """Refuse ``cost`` in one line if it needs more memory than ``max_memory`` (default: what
    the machine has available) or, unless ``force``, more seconds than ``budget_s`` (None: no
    time limit).  ``subject`` says what would run, ``instead`` what to do instead."""
    if max_memory is not None:
        max_memory = check_int("max_memory", max_memory, minimum=1)
    if budget_s is not None:
        budget_s = check_real("budget_s", budget_s, lo=0, what="seconds")
    if max_memory is None and cost.bytes < _NEVER_SHORT:
        limit = _NEVER_SHORT  # no need to read /proc/meminfo (sweeps check every row)
    else:
        limit = available_memory() if max_memory is None else max_memory
    if cost.bytes > limit:
        what = f" ({cost.what})" if cost.what else ""
        raise ResourceError(subject, f"{fmt_bytes(cost.bytes)} of memory{what}", fmt_bytes(limit),
                            instead, param="max_memory", machine=max_memory is None)
    if budget_s is not None and not force and cost.seconds > budget_s:
        raise ResourceError(subject, fmt_seconds(cost.seconds), f"{budget_s:g} s", instead,
                            param="budget_s")
