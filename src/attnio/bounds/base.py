"""The :class:`Bound` every bound function returns, and what the bound families share.

A bound function takes the workload's sizes (validated by :class:`~attnio.core.workload.Shape`,
the one place they are checked), returns a :class:`Bound`, and raises
:class:`~attnio.core.errors.ParameterError` (a ``ValueError``) naming the violated precondition
when called outside it.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

from ..core import masks
from ..core.blockmask import BlockMask
from ..core.checks import check_int
from ..core.resources import fmt_count
from ..core.workload import MAX_M, Shape

__all__ = ["SAHA_YE", "Bound", "attention_shape", "check_M", "keyword_sizes", "pairs_of",
           "regime_of", "segment_max"]

SAHA_YE = "Saha & Ye, arXiv 2402.07443"


@dataclass(frozen=True)
class Bound:
    """A lower bound: its value (words), where it comes from, under which assumptions.

    ``explicit``: a proven bound with explicit constants (safe to compare a count with);
    otherwise an asymptotic form with ``constant`` 1.  ``regime`` names the cache regime when the
    result distinguishes one; ``name`` is the function that produced it.
    """

    value: float
    theorem: str
    assumptions: tuple[str, ...]
    explicit: bool
    name: str = ""
    regime: str = ""
    constant: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["assumptions"] = list(self.assumptions)
        return d

    def __str__(self) -> str:
        kind = "explicit" if self.explicit else "asymptotic, constant 1"
        reg = f", {self.regime}" if self.regime else ""
        return f"{self.name} >= {fmt_count(self.value)} ({self.theorem}; {kind}{reg})"


_F = TypeVar("_F", bound=Callable[..., Any])


def keyword_sizes(old: str = "") -> Callable[[_F], _F]:
    """Make a public bound function take its sizes by keyword only, uniformly: every attention
    bound names them ``N`` (queries), ``d``, ``M`` (and ``Nkv``, ...), a matmul bound ``m``, ``k``,
    ``n``, ``M``.  A positional call is refused with one TypeError naming the keywords, and, where
    the function used to take another positional order (``old``, e.g. ``trivial``'s
    ``(Nq, Nkv, d)``: ``trivial(16384, 256, 16384)`` meant Nkv = 256, d = 16384), that order too,
    so an old call never silently means something else.  The function itself declares its sizes
    after ``*`` (``help()`` and ``inspect.signature`` show that signature)."""
    def wrap(f: _F) -> _F:
        sig = inspect.signature(f)
        required = [p.name for p in sig.parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty]
        example = ", ".join(f"{n}=..." for n in required)
        was = (f"; its old positional order ({old}) is gone: every bound now takes N, d, M "
               "(and Nkv) by name") if old else ""

        @functools.wraps(f)
        def call(*args: Any, **kwargs: Any) -> Any:
            if args:
                raise TypeError(f"{f.__name__}() takes its sizes by keyword: "
                                f"{f.__name__}({example}, ...), got {len(args)} positional "
                                f"argument(s){was}")
            return f(**kwargs)

        return call  # type: ignore[return-value]

    return wrap


def attention_shape(N: int, d: int, *, Nkv: int | None = None, causal: object = False,
                    heads: int = 1, kv_heads: int | None = None,
                    window: int | None = None, block_mask: BlockMask | None = None) -> Shape:
    """The workload the attention bounds speak of: ``heads`` independent query heads (batch
    folded in) sharing ``kv_heads`` key/value heads, with the mask of ``causal``/``window`` or
    the block-sparse layout ``block_mask``."""
    return Shape.make(N, d, Nkv=Nkv, heads=heads, kv_heads=kv_heads, causal=causal,
                      window=window, block_mask=block_mask)


def check_M(M: int) -> int:
    return check_int("M", M, minimum=1, maximum=MAX_M)


def pairs_of(shape: Shape) -> int:
    """P, the required pairs of ``shape`` over all its query heads: the visible (query, key) pairs
    of rows that see >= 2 keys (:func:`attnio.core.masks.row_counts`)."""
    return shape.n_heads * masks.row_counts(shape).pairs2


def regime_of(d: int, M: int) -> str:
    return "large cache (M >= d^2)" if M >= d * d else "small cache (M < d^2)"


# A fixed grid of segment lengths K (ratio 2^(1/8)), the same for every input: for a fixed K each
# first-generation term is non-decreasing in the work (P·d) and non-increasing in M, so the exact
# maximum over the grid's K <= limit (limit non-decreasing in the work) is monotone too
# (docs/bounds.md §12.1).
_KGRID = tuple(sorted({math.ceil(2 ** (j / 8)) for j in range(0, 8 * 64)}))


_KARR = np.array(_KGRID, dtype=float)


def segment_max(term: Callable[[int], float], approx: Callable[[np.ndarray], np.ndarray],
                limit: int) -> tuple[int, int]:
    """max over the fixed grid of K <= limit of ``term(K)`` (a valid bound for every K), exactly.

    ``approx`` evaluates the term in floating point over the whole grid at once (the same
    operations as ``term`` but the last product, K·(h − 1), rounded: a relative error below
    10⁻¹⁵); the value returned is ``term`` (exact integer arithmetic) at every K whose ``approx``
    is within 10⁻⁹ of the largest, so it is the grid's exact maximum (not only the best of the
    three largest floats: ties and rounding cannot hide it), hence monotone wherever each term is.
    """
    n = int(np.searchsorted(_KARR, limit, side="right"))
    if n == 0:
        return 0, 0
    vals = approx(_KARR[:n])
    top = float(vals.max())
    if not top > 0.0:  # every term <= 0 (the same floats up to the last product): the bound is 0
        return 0, 0
    best, arg = 0, 0
    for i in np.flatnonzero(vals >= top * (1.0 - 1e-9) - 1.0):
        K = _KGRID[int(i)]
        v = max(0, int(term(K)))
        if v > best:
            best, arg = v, K
    return best, arg
