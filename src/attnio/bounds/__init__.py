"""Every lower bound on the I/O of attention that attnio knows, one module per family.

Each function returns a :class:`Bound` and raises :class:`~attnio.core.errors.ParameterError` (a
``ValueError``) naming the violated precondition when called outside it.  Counts are in words
(reads + writes between slow and fast memory), as the simulator counts them.

``explicit=True`` means the value is a proven lower bound with every constant spelled out, so a
measured count may be compared with it; ``explicit=False`` means an asymptotic statement Ω(f) or
Θ(f) reported as ``f`` with constant 1: it says how the cost scales, never that a count must
exceed that number.  The derivations are in ``docs/bounds.md``.

* :mod:`.exact`: the explicit bounds for exact attention (trivial, large cache, small cache);
* :mod:`.asymptotic`: Saha & Ye's Θ/Ω statements (standard matmul, fast matmul over F_q, binary);
* :mod:`.matmul`: the matmul building block (C written);
* :mod:`.approximate`: approximate attention (derived).

This package never names an algorithm: it bounds every schedule, and the tests hold every
registered schedule to its explicit bounds.

>>> [b.name for b in applicable(4096, 64, 65536)]
['trivial', 'standard_matmul_large_cache', 'standard_matmul_small_cache', 'standard_matmul']
>>> best(applicable(4096, 64, 16384)).name
'standard_matmul_large_cache'
"""

from __future__ import annotations

from collections.abc import Iterable

from ..core.errors import ParameterError
from ..core.workload import Shape
from .approximate import (
    alman_song_degree,
    approx_trivial,
    approx_w_stationary,
    seth_entry_threshold,
)
from .asymptotic import binary_inputs, fast_matmul_field, standard_matmul, standard_matmul_for
from .base import SAHA_YE, Bound, attention_shape, check_M
from .exact import (
    large_cache_for,
    required_pairs,
    small_cache_for,
    standard_matmul_large_cache,
    standard_matmul_small_cache,
    trivial,
    trivial_for,
)
from .matmul import matmul, matmul_cosma

__all__ = [
    "SAHA_YE",
    "Bound",
    "alman_song_degree",
    "applicable",
    "applicable_to",
    "approx_trivial",
    "approx_w_stationary",
    "best",
    "binary_inputs",
    "fast_matmul_field",
    "matmul",
    "matmul_cosma",
    "required_pairs",
    "seth_entry_threshold",
    "standard_matmul",
    "standard_matmul_large_cache",
    "standard_matmul_small_cache",
    "trivial",
]


def applicable_to(shape: Shape, M: int, *, q: int | None = None,
                  binary: bool = False) -> list[Bound]:
    """Every attention bound whose preconditions hold for the workload ``shape`` (all its heads).

    The score-counting bounds hold for grouped-query attention too (a score still needs its query
    row and key row); the trivial bound counts K and V once per key/value head.  The fast-matmul
    bounds are stated for square, unmasked attention and need their input model: Theorem 4.8
    only when ``q`` (a prime power > N) is given, Theorem 4.14 only when ``binary=True`` (N >= 2).
    """
    M = check_M(M)
    out = [trivial_for(shape), large_cache_for(shape, M), small_cache_for(shape, M),
           standard_matmul_for(shape, M)]
    square = shape.Nkv == shape.Nq and not shape.causal
    if q is not None:
        if not square:
            raise ParameterError("q: Theorem 4.8 is stated for square unmasked attention (Nkv = N, "
                                 "causal=False)", param="q")
        out.append(fast_matmul_field(shape.Nq, shape.d, M, q, heads=shape.n_heads))
    if binary:
        if not square:
            raise ParameterError("binary: Theorem 4.14 is stated for square unmasked attention "
                                 "(Nkv = N, causal=False)", param="binary")
        out.append(binary_inputs(shape.Nq, shape.d, M, heads=shape.n_heads))
    return out


def applicable(N: int, d: int, M: int, *, Nkv: int | None = None, causal: object = False,
               heads: int = 1, kv_heads: int | None = None, window: int | None = None,
               q: int | None = None, binary: bool = False) -> list[Bound]:
    """Every attention bound whose preconditions hold for these sizes (see :func:`applicable_to`).

    ``heads`` independent query heads (batch folded in) share ``kv_heads`` key/value heads;
    ``causal`` is False, True / "bottom_right" or "top_left"; ``window`` a sliding window.
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return applicable_to(shape, M, q=q, binary=binary)


def best(bounds: Iterable[Bound]) -> Bound:
    """The largest explicit bound among ``bounds`` (asymptotic ones have no usable constant)."""
    ex = [b for b in bounds if b.explicit]
    if not ex:
        raise ParameterError("best: no explicit bound among the given bounds", param="bounds")
    return max(ex, key=lambda b: b.value)
