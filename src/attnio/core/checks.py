"""Validation of scalar parameters: one function per kind, one message format.

Every public entry point validates its arguments with these, so a bad value gets the same
one-line message everywhere: the parameter's name, the value given and the allowed range.

>>> check_int("N", 4)
4
>>> check_real("eps", 0.5, lo=0, hi=1, lo_open=True, hi_open=True)
0.5
>>> check_real("eps", 2, lo=0, hi=1)
Traceback (most recent call last):
...
attnio.core.errors.ParameterError: eps must be a real number in [0, 1], got 2
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from .errors import ParameterError

__all__ = ["check_bool", "check_choice", "check_int", "check_real", "int_range_text"]


def _show_int(v: int) -> str:
    """An int as a reader can take it in: ``2**50`` for a large power of two, ``1e+200 (201
    digits)`` for a huge value."""
    if v >= 1 << 20 and v & (v - 1) == 0:
        return f"2**{v.bit_length() - 1}"
    digits = len(str(abs(v)))
    if digits > 20:
        return f"{float(v):.0e} ({digits} digits)" if digits < 300 else f"a {digits}-digit number"
    return str(v)


def int_range_text(minimum: int, maximum: int | None) -> str:
    return f">= {minimum}" if maximum is None else f"in [{minimum}, {_show_int(maximum)}]"


def check_int(name: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``, or ParameterError naming ``name`` and the range.

    Accepts Python and numpy integers (``numbers.Integral``), never bools or floats.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        shown = maximum if maximum is None or maximum < 1 << 40 else None
        raise ParameterError(
            f"{name} must be an integer {int_range_text(minimum, shown)}, got {value!r}",
            param=name)
    v = int(value)
    if v < minimum or (maximum is not None and v > maximum):
        # a technical ceiling (2**40 and beyond) is named only to a value above it
        shown = maximum if maximum is None or maximum < 1 << 40 or v > maximum else None
        raise ParameterError(
            f"{name} must be an integer {int_range_text(minimum, shown)}, got {_show_int(v)}",
            param=name)
    return v


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is None and hi is None:
        return "a finite real number"
    if hi is None:
        return f"a finite real number {'>' if lo_open else '>='} {lo:g}"
    if lo is None:
        return f"a finite real number {'<' if hi_open else '<='} {hi:g}"
    return (f"a real number in {'(' if lo_open else '['}{lo:g}, {hi:g}"
            f"{')' if hi_open else ']'}")


def check_real(name: str, value: object, *, lo: float | None = None, hi: float | None = None,
               lo_open: bool = False, hi_open: bool = False, what: str = "") -> float:
    """``value`` as a finite float in the interval, or ParameterError naming ``name``.

    ``what`` (optional) says what the parameter means, after the range.
    """
    rng = _interval(lo, hi, lo_open, hi_open)
    tail = f" ({what})" if what else ""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ParameterError(f"{name} must be {rng}{tail}, got {value!r}", param=name)
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ParameterError(f"{name} must be {rng}{tail}, got {value!r}", param=name) from None
    ok = math.isfinite(x)
    if ok and lo is not None:
        ok = x > lo if lo_open else x >= lo
    if ok and hi is not None:
        ok = x < hi if hi_open else x <= hi
    if not ok:
        raise ParameterError(f"{name} must be {rng}{tail}, got {value!r}", param=name)
    return x


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is True or False, else ParameterError."""
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be True or False, got {value!r}", param=name)
    return value


def check_choice(name: str, value: object, choices: Iterable[str]) -> str:
    """``value`` if it is one of ``choices``, else ParameterError listing them."""
    choices = tuple(choices)
    if value not in choices:
        names = [repr(c) for c in choices]
        allowed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise ParameterError(f"{name} must be {allowed}, got {value!r}", param=name)
    return str(value)
