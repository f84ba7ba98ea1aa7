"""Which fitted parameters a generation's devices use: its own, a user's, or (with a warning)
another generation's.

The time model's parameters are fitted per architecture generation (``calibration.json``, by
``benchmarks/calibrate_gpu.py``).  A generation without a fit of its own borrows the nearest one
in :data:`BORROW` (sm86 and sm89, Ampere-style ``mma.sync`` kernels like the A100's, borrow
sm80; sm100 borrows sm90), and says so: :func:`choose` issues a :class:`FitWarning` naming both
generations, once per generation and process.  A user's own fit (``attnio gpu calibrate``, a
file of the same layout as ``calibration.json``) replaces the stored one for the generations it
holds inside :func:`using`.

This module holds no parameters itself (:mod:`.timing` reads ``calibration.json`` and asks
:func:`choose` which entry to use), so it imports nothing of the model.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["BORROW", "FitWarning", "active", "borrowed", "choose", "using"]

#: Generation without a fit -> the generation whose fit it borrows (the nearest in kernel
#: structure: FA2's ``mma.sync`` on Ampere and Ada; Blackwell runs Hopper's FA2 tiles).
BORROW = {"sm86": "sm80", "sm89": "sm80", "sm100": "sm90"}


class FitWarning(UserWarning):
    """A device's generation has no fitted time-model parameters: another's are used."""


_USER: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar(
    "attnio_user_fit", default=None)


@contextlib.contextmanager
def using(generations: Mapping[str, Any]) -> Iterator[None]:
    """Inside the block, ``generations`` (name -> ``{"params": {...}, ...}``, the layout of
    ``calibration.json``'s ``generations``) replace the stored fits they name."""
    token = _USER.set(dict(generations))
    try:
        yield
    finally:
        _USER.reset(token)


def active() -> Mapping[str, Any]:
    """The user's fits in force (empty outside :func:`using`)."""
    return _USER.get() or {}


def borrowed(gen: str, stored: Mapping[str, Any]) -> str | None:
    """The generation whose fit ``gen`` uses when it has none (None: it has its own)."""
    if gen in active() or gen in stored:
        return None
    b = BORROW.get(gen)
    return b if b in stored else ("sm90" if "sm90" in stored else next(iter(stored)))


def choose(gen: str, stored: Mapping[str, Any], device: str = "") -> dict[str, Any]:
    """The entry (``{"params": {...}, ...}``) ``gen``'s devices use: the user's, the stored one,
    or a borrowed one with a :class:`FitWarning` (one line naming both generations)."""
    user = active()
    if gen in user:
        return dict(user[gen])
    if gen in stored:
        return dict(stored[gen])
    b = borrowed(gen, stored)
    assert b is not None
    who = f"device {device} ({gen})" if device else gen
    warnings.warn(f"{who} has no fitted time-model parameters: it borrows {b}'s fit, so its "
                  f"times are uncalibrated (fit your own: attnio gpu calibrate)", FitWarning,
                  stacklevel=3)
    return dict(stored[b])
