"""The algorithm registry: name -> :class:`Algorithm`.

The CLI, the planner and the sweeps iterate this registry instead of naming algorithms.  A new
schedule registers itself with :func:`register` (see ``base.py`` for the protocol).

>>> sorted(names())[:3]
['flash1', 'flash2', 'standard']
"""

from __future__ import annotations

import sys
import types

from ..errors import UnknownNameError
from .base import Algorithm, IOCount, Shape

_REGISTRY: dict[str, Algorithm] = {}


def register(alg: Algorithm) -> Algorithm:
    """Add an algorithm to the registry under ``alg.name`` (replacing none)."""
    if alg.name in _REGISTRY:
        raise ValueError(f"algorithm {alg.name!r} is already registered")
    _REGISTRY[alg.name] = alg
    return alg


def get(name: str) -> Algorithm:
    """The registered algorithm called ``name`` (UnknownNameError suggests close names)."""
    if isinstance(name, Algorithm):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise UnknownNameError("algorithm", str(name), _REGISTRY) from None


def names(kind: str | None = "attention") -> list[str]:
    """Registered names, of one kind ("attention", "matmul") or all (kind=None)."""
    return [n for n, a in _REGISTRY.items() if kind is None or a.kind == kind]


def all_algorithms(kind: str | None = "attention") -> list[Algorithm]:
    return [_REGISTRY[n] for n in names(kind)]


def _register_builtins() -> None:
    from . import approx_poly, flash1, flash2, flash_decoding, matmul, square_tiling, standard

    for mod in (standard, flash1, flash2, flash_decoding, matmul, square_tiling, approx_poly):
        register(mod.ALGORITHM)


_register_builtins()


class _CallableModule(types.ModuleType):
    """Lets ``attnio.algorithms()`` list the names while ``attnio.algorithms.get`` stays a module."""

    def __call__(self, kind: str | None = "attention") -> list[str]:
        return names(kind)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["Algorithm", "IOCount", "Shape", "all_algorithms", "get", "names", "register"]
