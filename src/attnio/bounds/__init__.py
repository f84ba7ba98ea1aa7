"""Every lower bound on the I/O of attention that attnio knows, one module per family.

Each function returns a :class:`Bound` and raises :class:`~attnio.core.errors.ParameterError` (a
``ValueError``) naming the violated precondition when called outside it.  Counts are in words
(reads + writes between slow and fast memory), as the simulator counts them.

``explicit=True`` means the value is a proven lower bound with every constant spelled out, so a
measured count may be compared with it; ``explicit=False`` means an asymptotic statement Ω(f) or
Θ(f) reported as ``f`` with constant 1: it says how the cost scales, never that a count must
exceed that number.  The derivations are in ``docs/bounds.md``.

* :mod:`.forward`: the explicit forward bounds that charge the P·V products too (Theorem A,
  ``pv_segment``, large cache; Theorem B, ``qkpv_pooled``, small cache);
* :mod:`.levelled`: Theorem B′, ``qkpv_levelled``: Theorem B with a potential by level, its
  per-segment maxima certified offline and tabulated (M <= 4d²);
* :mod:`.reread`: Theorem F, ``reread_cut``: the trivial reads and writes plus the values one
  cut of the execution forces to be re-read or stored (large M, prefix masks);
* :mod:`.exact`: the first explicit bounds (trivial; large and small cache, superseded by
  :mod:`.forward` but still valid);
* :mod:`.asymptotic`: Saha & Ye's Θ/Ω statements (standard matmul, fast matmul over F_q, binary);
* :mod:`.backward`: the backward pass (trivial, Theorems D and E, Li et al.'s Θ);
* :mod:`.sparse`: block-sparse attention (FlashAttention's Prop. 4; every other bound reads a
  Shape's block mask through :func:`attnio.core.masks.row_counts`);
* :mod:`.matmul`: the matmul building block (C written): Theorem C, Smith et al., COSMA;
* :mod:`.approximate`: approximate attention (derived);
* :mod:`.segments`, :mod:`.params`: the machinery and tabulated parameters of Theorems A-E.

This package never names an algorithm: it bounds every schedule, and the tests hold every
registered schedule to its explicit bounds.

>>> [b.name for b in applicable(N=4096, d=64, M=65536)]  # doctest: +NORMALIZE_WHITESPACE
['trivial', 'pv_segment', 'qkpv_pooled', 'qkpv_levelled', 'reread_cut',
 'standard_matmul_large_cache', 'standard_matmul_small_cache', 'standard_matmul']
>>> best(applicable(N=4096, d=64, M=16384)).name
'pv_segment'
>>> best(applicable(N=4096, d=256, M=1024)).name
'qkpv_levelled'
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..core.blockmask import BlockMask
from ..core.errors import ParameterError
from ..core.workload import Shape
from .approximate import (
    alman_song_degree,
    approx_trivial,
    approx_w_stationary,
    seth_entry_threshold,
)
from .asymptotic import (
    binary_inputs,
    binary_min_d,
    fast_matmul_field,
    standard_matmul,
    standard_matmul_for,
)
from .backward import (
    backward_accum,
    backward_applicable,
    backward_applicable_to,
    backward_inputs,
    backward_pooled,
    backward_trivial,
    li_backward,
)
from .base import SAHA_YE, Bound, attention_shape, check_M, keyword_sizes, regime_of
from .exact import (
    large_cache_for,
    required_pairs,
    small_cache_for,
    standard_matmul_large_cache,
    standard_matmul_small_cache,
    trivial,
    trivial_for,
)
from .forward import (
    pv_segment,
    pv_segment_for,
    pv_segment_pairs,
    qkpv_pooled,
    qkpv_pooled_for,
    qkpv_pooled_pairs,
)
from .levelled import qkpv_levelled, qkpv_levelled_for, qkpv_levelled_pairs
from .matmul import matmul, matmul_cosma, matmul_potential, matmul_smith
from .reread import reread_cut, reread_cut_for
from .sparse import flash_block_sparse_for

__all__ = [
    "SAHA_YE",
    "Bound",
    "BoundListing",
    "alman_song_degree",
    "applicable",
    "applicable_to",
    "approx_trivial",
    "approx_w_stationary",
    "backward_accum",
    "backward_applicable",
    "backward_applicable_to",
    "backward_inputs",
    "backward_pooled",
    "backward_trivial",
    "best",
    "binary_inputs",
    "binary_min_d",
    "fast_matmul_field",
    "flash_block_sparse_for",
    "li_backward",
    "listing",
    "matmul",
    "matmul_cosma",
    "matmul_potential",
    "matmul_smith",
    "pv_segment",
    "pv_segment_pairs",
    "prepare",
    "qkpv_levelled",
    "qkpv_levelled_pairs",
    "qkpv_pooled",
    "qkpv_pooled_pairs",
    "regime_of",
    "required_pairs",
    "reread_cut",
    "seth_entry_threshold",
    "standard_matmul",
    "standard_matmul_large_cache",
    "standard_matmul_small_cache",
    "trivial",
]


def prepare(workloads: Iterable[tuple[Shape, int]], *, backward: bool = False) -> None:
    """Evaluate the few-segment searches of :func:`applicable_to` (``backward=True``: of
    :func:`~attnio.bounds.backward.backward_applicable_to`) for many (shape, M) at once, in
    batches (Theorems A and B, and D and E: each step of their searches for all the workloads
    at once, :meth:`~attnio.bounds.segments.PairsTheorem.prepare`): the later
    calls at these workloads take the results, the same values.  A sweep calls it with the
    workloads of each task; arguments out of range are left to the later calls."""
    from .backward import backward_accum_prepare, backward_pooled_prepare
    from .base import pairs_of
    from .forward import pv_segment_prepare, qkpv_pooled_prepare

    items = []
    for shape, M in workloads:
        try:
            items.append((pairs_of(shape), shape.d, M))
        except (ParameterError, AttributeError, TypeError, ValueError):
            continue
    pv_segment_prepare(items)
    qkpv_pooled_prepare(items)
    if backward:
        backward_accum_prepare(items)
        backward_pooled_prepare(items)


def applicable_to(shape: Shape, M: int, *, q: int | None = None,
                  binary: bool = False) -> list[Bound]:
    """Every attention bound whose preconditions hold for the workload ``shape`` (all its heads).

    The explicit ones: :func:`trivial`, Theorems A (:func:`pv_segment`), B
    (:func:`qkpv_pooled`), B′ (:func:`qkpv_levelled`, tabulated for M <= 4d²) and F
    (:func:`reread_cut`, prefix masks), and the first-generation large- and small-cache bounds (superseded,
    still valid); then Saha & Ye's asymptotic Θ form.  The score-counting bounds depend on the
    mask only through the required pairs and hold for grouped-query attention too (a product
    still needs its query row and key row); the trivial bound counts K and V once per key/value
    head.  A block-sparse Shape (``shape.block_mask``) is one more mask: the counts come from
    its layout, and FlashAttention's Proposition 4 (asymptotic, :func:`flash_block_sparse_for`) is
    added where d <= M <= N·d.  The fast-matmul bounds are stated for square, unmasked attention
    and need their input model: Theorem 4.8 only when ``q`` (a prime power > N) is given, Theorem
    4.14 only when ``binary=True`` (d >= ⌈log2(N + 1)⌉).  O(1) in N for the causal and window
    masks (O(blocks) for a layout); each bound is cached on its pair count.
    """
    M = check_M(M)
    out = [trivial_for(shape), pv_segment_for(shape, M), qkpv_pooled_for(shape, M),
           qkpv_levelled_for(shape, M), reread_cut_for(shape, M), large_cache_for(shape, M),
           small_cache_for(shape, M), standard_matmul_for(shape, M)]
    if shape.block_mask is not None and shape.d <= M <= shape.Nq * shape.d:
        out.append(flash_block_sparse_for(shape, M))
    square = shape.Nkv == shape.Nq and not shape.causal and shape.block_mask is None
    if q is not None:
        if not square:
            raise ParameterError("q: Theorem 4.8 is stated for square unmasked attention (Nkv = N, "
                                 "causal=False, no block mask)", param="q")
        out.append(fast_matmul_field(N=shape.Nq, d=shape.d, M=M, q=q, heads=shape.n_heads))
    if binary:
        if not square:
            raise ParameterError("binary: Theorem 4.14 is stated for square unmasked attention "
                                 "(Nkv = N, causal=False, no block mask)", param="binary")
        out.append(binary_inputs(N=shape.Nq, d=shape.d, M=M, heads=shape.n_heads))
    return out


@keyword_sizes()
def applicable(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
               heads: int = 1, kv_heads: int | None = None, window: int | None = None,
               q: int | None = None, binary: bool = False,
               block_mask: BlockMask | None = None) -> list[Bound]:
    """Every attention bound whose preconditions hold for these sizes (see :func:`applicable_to`).

    ``heads`` independent query heads (batch folded in) share ``kv_heads`` key/value heads;
    ``causal`` is False, True / "bottom_right" or "top_left"; ``window`` a sliding window;
    ``block_mask`` a block-sparse layout (:class:`~attnio.core.BlockMask`).
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window, block_mask=block_mask)
    return applicable_to(shape, M, q=q, binary=binary)


def best(bounds: Iterable[Bound]) -> Bound:
    """The largest explicit bound among ``bounds`` (asymptotic ones have no usable constant)."""
    ex = [b for b in bounds if b.explicit]
    if not ex:
        raise ParameterError("best: no explicit bound among the given bounds", param="bounds")
    return max(ex, key=lambda b: b.value)


@dataclass(frozen=True)
class BoundListing:
    """Every bound that applies to one workload (:func:`listing`): the forward's, the backward's
    (``backward=True``) and eps-approximate attention's (``eps``), each list with its largest
    explicit member, and the regime of M against d² (:func:`regime_of`)."""

    shape: Shape
    M: int
    regime: str
    bounds: tuple[Bound, ...]
    best: Bound
    backward: tuple[Bound, ...] = ()
    backward_best: Bound | None = None
    approximate: tuple[Bound, ...] = ()
    approximate_best: Bound | None = None   # None without an explicit approximate bound
    eps: float | None = None
    entry_bound: float | None = None


def listing(shape: Shape, M: int, *, q: int | None = None, binary: bool = False,
            backward: bool = False, eps: float | None = None,
            entry_bound: float | None = None) -> BoundListing:
    """Every lower bound that applies to ``shape`` with M fast words (``attnio bound``).

    ``q``, ``binary``: as :func:`applicable_to`.  ``backward``: also the backward pass's
    (:func:`backward_applicable_to`).  ``eps`` (with ``entry_bound`` B, the bound on |Q|, |K|
    entries; one unmasked head): also eps-approximate attention's, by the polynomial method: the
    W-stationary feature-space bound at the features r = C(d + g, g) of the least degree g whose
    proven relative error on [-R, R] is at most eps (R = B²·d·scale, the scale 1/√d), the
    degree's asymptotic form and SETH's entry threshold (:mod:`attnio.bounds.approximate`).
    """
    bs = applicable_to(shape, M, q=q, binary=binary)
    top = best(bs)
    bbs = backward_applicable_to(shape, M) if backward else []
    abs_ = _approximate(shape, M, eps, entry_bound)
    return BoundListing(shape, M, regime_of(shape.d, M), tuple(bs), top, tuple(bbs),
                        best(bbs) if bbs else None, tuple(abs_),
                        best(abs_) if any(b.explicit for b in abs_) else None, eps, entry_bound)


def _approximate(shape: Shape, M: int, eps: float | None,
                 entry_bound: float | None) -> list[Bound]:
    from ..approx import check_eps, feature_dim, polynomial, score_radius

    if eps is None:
        if entry_bound is not None:
            raise ParameterError.worded("{entry_bound} goes with {eps} (the approximate bounds)",
                                        param="entry_bound")
        return []
    eps = check_eps(eps)
    if entry_bound is None:
        raise ParameterError.worded("{eps} needs {entry_bound} B (|Q|, |K| entries <= B): the "
                                    "polynomial's range depends on it", param="eps")
    if shape.causal or shape.window is not None or shape.heads != 1 or shape.batch != 1 \
            or shape.block_mask is not None:
        raise ParameterError.worded("the approximate bounds are for one unmasked head "
                                    "(no {causal}, {window}, {heads}, {batch} or block mask)",
                                    param="approx_eps")
    R = score_radius(shape.d, 1.0 / math.sqrt(shape.d), entry_bound)
    p = polynomial(eps, R)
    r = feature_dim(shape.d, p.degree)
    out = [approx_w_stationary(N=shape.Nq, Nkv=shape.Nkv, d=shape.d, M=M, r=r),
           alman_song_degree(eps, R)]
    if min(shape.Nq, shape.Nkv) >= 2:
        out.append(seth_entry_threshold(max(shape.Nq, shape.Nkv)))
    return out
