"""The attention schedules, one per module, and their registry: name -> :class:`Algorithm`.

The CLI, the planner and the sweeps iterate this registry instead of naming algorithms.  A new
schedule registers itself with :func:`register` (see ``base.py`` for the protocol).  Building
blocks that are not attention (the blocked matmul) live in :mod:`attnio.blocks`, not here.

>>> names()[:3]
['standard', 'flash1', 'flash2']
>>> get("flash2").summary.startswith("FlashAttention-2")
True
"""

from __future__ import annotations

import warnings

from ..core.errors import UnknownNameError
from . import approx_poly, flash1, flash2, flash_decoding, square_tiling, standard
from .base import Algorithm, Choice

__all__ = ["Algorithm", "Choice", "all_algorithms", "get", "names", "register"]

_REGISTRY: dict[str, Algorithm] = {}


def register(alg: Algorithm) -> Algorithm:
    """Add an algorithm to the registry under ``alg.name`` (replacing none)."""
    if not isinstance(alg, Algorithm):
        raise TypeError(f"register takes an Algorithm instance, got {alg!r}")
    if alg.name in _REGISTRY:
        raise ValueError(f"algorithm {alg.name!r} is already registered")
    _REGISTRY[alg.name] = alg
    return alg


def get(name: str | Algorithm) -> Algorithm:
    """The registered algorithm called ``name`` (UnknownNameError suggests close names)."""
    if isinstance(name, Algorithm):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownNameError("algorithm", str(name), _REGISTRY) from None


def _kind(kind: str | None) -> None:
    if kind not in (None, "attention"):
        warnings.warn(f"names(kind={kind!r}): the registry holds attention algorithms only; the "
                      "blocked matmul is attnio.blocks.matmul (the kind argument goes in 0.3)",
                      DeprecationWarning, stacklevel=3)
    elif kind is not None:
        warnings.warn("the kind argument of names()/all_algorithms() goes in 0.3: every "
                      "registered algorithm is attention", DeprecationWarning, stacklevel=3)


def names(kind: str | None = None, *, exact: bool | None = None) -> list[str]:
    """Registered names in registration order (``exact=True``/``False``: only those)."""
    _kind(kind)
    if kind not in (None, "attention"):
        return []
    return [n for n, a in _REGISTRY.items() if exact is None or a.exact == exact]


def all_algorithms(kind: str | None = None, *, exact: bool | None = None) -> list[Algorithm]:
    """Registered algorithms in registration order (``exact=True``/``False``: only those)."""
    _kind(kind)
    if kind not in (None, "attention"):
        return []
    return [_REGISTRY[n] for n in names(exact=exact)]


for _mod in (standard, flash1, flash2, flash_decoding, square_tiling, approx_poly):
    register(_mod.ALGORITHM)
del _mod
