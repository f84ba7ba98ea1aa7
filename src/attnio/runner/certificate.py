"""The certificate of a count: how far from optimal it can be.

One function, :func:`certificate`, puts a measured (or predicted) count over the best explicit
lower bound that applies to its workload; ``attnio plan``, ``attnio run`` (and
:func:`attnio.run`, which attaches it to its Result) and the sweep's rows all call it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from .. import bounds as _bounds
from ..bounds.backward import backward_applicable_to
from ..bounds.base import regime_of
from ..core.workload import Shape

__all__ = ["Certificate", "certificate"]


@dataclass(frozen=True)
class Certificate:
    """How far from optimal a count is: the bounds that apply to the workload, the best explicit
    one, and the ratio of the count to it (None for an approximate algorithm, which exact
    bounds do not bind), with the cache regime of (d, M)."""

    bounds: tuple[_bounds.Bound, ...]
    best_bound: _bounds.Bound
    ratio: float | None
    regime: str

    def to_dict(self, prefix: str = "") -> dict[str, Any]:
        """``{bound, bound_name, ratio}`` with ``prefix`` (``"backward_"``) on each key."""
        return {f"{prefix}bound": self.best_bound.value, f"{prefix}bound_name": self.best_bound.name,
                f"{prefix}ratio": self.ratio}


def _approximate_bounds(shape: Shape, M: int, features: int | None) -> tuple[_bounds.Bound, ...]:
    """The explicit bounds of :mod:`attnio.bounds.approximate` that bind an approximate count:
    ``approx_w_stationary`` for one unmasked head without a window, given the feature count r
    (the setting it is proved in); none otherwise."""
    if (features is None or shape.causal or shape.window is not None
            or shape.block_mask is not None or shape.n_heads != 1):
        return ()
    from ..bounds import approximate as _ab

    return (_ab.approx_w_stationary(N=shape.Nq, Nkv=shape.Nkv, d=shape.d, M=M, r=int(features)),)


@functools.lru_cache(maxsize=1024)
def _exact_bounds(shape: Shape, M: int, backward: bool) -> tuple[_bounds.Bound, ...]:
    """The exact bounds of (shape, M), forward or backward (cached: a sweep asks again for each
    algorithm of one workload; a Bound is immutable)."""
    return tuple(backward_applicable_to(shape, M) if backward else _bounds.applicable_to(shape, M))


def certificate(shape: Shape, M: int, total: int, *, exact: bool = True,
                backward: bool = False, features: int | None = None) -> Certificate:
    """The certificate of ``total`` words moved on ``shape`` with ``M`` words of fast memory: the
    one place the measured (or predicted) count meets the bounds, for ``attnio plan``, ``attnio
    run`` and the sweep.

    The bounds are :func:`attnio.bounds.applicable_to` (forward) or
    :func:`attnio.bounds.backward.backward_applicable_to` (``backward=True``, the backward pass's
    count); the best is the largest explicit one; ``exact=False`` (an approximate algorithm)
    is held to the approximate bounds instead (``approx_w_stationary``, given its feature count
    ``features`` = r, for one unmasked head without a window, where it is proved); where none
    applies, the exact bounds are listed and the ratio is None, since exact bounds do not bind
    approximate attention.

    >>> c = certificate(Shape(4096, 4096, 64), 65536, 2 * 10**7)
    >>> c.best_bound.explicit, c.ratio == 2 * 10**7 / c.best_bound.value
    (True, True)
    """
    approx = () if exact or backward else _approximate_bounds(shape, M, features)
    if approx:
        bnds = approx
    elif type(M) is int and type(shape) is Shape:  # (cached only where the key is exact)
        bnds = _exact_bounds(shape, M, backward)
    else:
        bnds = tuple(backward_applicable_to(shape, M) if backward else
                     _bounds.applicable_to(shape, M))
    best = _bounds.best(bnds)
    binds = exact or bool(approx)
    ratio = total / best.value if binds and best.value > 0 else None
    return Certificate(bnds, best, ratio, regime_of(shape.d, M))
