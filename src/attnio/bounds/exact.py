"""Explicit lower bounds on the I/O of exact attention (every constant proven: docs/bounds.md).

``explicit=True`` means the value is a proven lower bound with every constant spelled out, so a
measured count may be compared with it (``tests/bounds/test_bounds.py`` holds every exact algorithm to
it).  Counts are in words (reads + writes between slow and fast memory), as the simulator counts
them.

* :func:`trivial`: every input word the output depends on is read, every output word written;
* :func:`standard_matmul_large_cache`: Saha & Ye's Lemma 3.3 argument (dominator sets of
  summation trees), redone on segments of K I/Os: ``Q >= max_K K·(⌈P/T(M+K)⌉ - 1)`` with
  ``T(m) = max(m, ⌊m²/(4d²)⌋)`` score trees finished per segment; at least ``N²d²/M - M`` for
  M >= 2d² (K = M, always evaluated);
* :func:`standard_matmul_small_cache`: a Loomis–Whitney segment argument that needs no
  reduction to matmul (the scores need not be written): about ``√2·N²d/√M - 4M`` for M << d².

Both charge only the QKᵀ products; :mod:`attnio.bounds.forward` (Theorems A and B) charges the
P·V products too and supersedes them (about 3.35·N²d²/M and 2.8·N²d/√M).  They are kept: still
explicit and valid, and the planner reports the largest bound that applies.

>>> trivial(N=4096, d=64).value
1048576
>>> b = standard_matmul_large_cache(N=4096, d=64, M=65536)
>>> b.value >= 4096 ** 2 * 64 ** 2 // 65536 - 2 * 65536
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..core import masks
from ..core.checks import check_int
from ..core.workload import Shape
from .base import (
    SAHA_YE,
    Bound,
    attention_shape,
    check_M,
    keyword_sizes,
    pairs_of,
    segment_max,
)

__all__ = ["large_cache_for", "large_cache_raw_for", "required_pairs", "small_cache_for",
           "standard_matmul_large_cache",
           "standard_matmul_small_cache", "trivial", "trivial_for"]

#: What the first-generation bounds assume (they charge the QKᵀ products only).
_QK_ASSUMPTIONS = (
    "each score S_ij is a sum of the d products q_il·k_jl (standard matmul), any order",
    "recomputation allowed; fast memory holds <= M words between operations",
)


@keyword_sizes("Nq, Nkv")
def required_pairs(*, N: int, Nkv: int | None = None, causal: object = False,
                   window: int | None = None) -> int:
    """Scores S_ij an exact algorithm must compute: visible pairs of rows that see >= 2 keys.

    A row that sees exactly one key outputs that key's value whatever the score, so its score
    need not be computed (and a row that sees none outputs 0).
    """
    N = check_int("N", N, minimum=1)
    return masks.row_counts(Shape.make(N, 1, Nkv=Nkv, causal=causal, window=window)).pairs2


@keyword_sizes("Nq, Nkv, d")
def trivial(*, N: int, d: int, Nkv: int | None = None, causal: object = False, heads: int = 1,
            kv_heads: int | None = None, window: int | None = None) -> Bound:
    """Read every input word the output depends on once, write every output word once.

    Unmasked with Nkv >= 2 this is ``(Nq + 2·Nkv)·d + Nq·d`` per head.  Exceptions (exact): a
    query row that sees fewer than two keys outputs a value independent of its query, so its Q row
    need not be read; a key no row with two or more visible keys sees need not be read from K, and
    a key no row sees at all not from V.  ``heads`` query heads share ``kv_heads`` key/value heads
    (grouped-query attention; default ``kv_heads = heads``), so K and V count once per kv head.
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return trivial_for(shape)


def trivial_for(shape: Shape) -> Bound:
    """:func:`trivial` of a :class:`~attnio.core.workload.Shape` (all its heads)."""
    rc = masks.row_counts(shape)
    d, Nq = shape.d, shape.Nq
    value = shape.n_heads * (rc.rows2 * d + Nq * d) + shape.n_kv_heads * (rc.k_rows + rc.v_rows) * d
    return Bound(
        value, "trivial: inputs read once, output written once",
        ("every word of O is written at least once",
         "every input word O depends on (generic inputs) is read at least once"),
        True, name="trivial", regime="any M",
    )


@functools.lru_cache(maxsize=4096)
def _large_cache(P: int, d: int, M: int) -> tuple[int, int]:
    dd4 = 4 * d * d

    def term(K: int) -> int:
        m = M + K
        T = max(m, m * m // dd4)  # score trees a segment can finish (docs/bounds.md, step 4)
        return K * (-(-P // T) - 1)

    def approx(K: np.ndarray) -> np.ndarray:  # the same term in floats, to locate the best K
        m = M + K
        T = np.maximum(m, np.floor(m * m / dd4))
        return K * (np.ceil(P / T) - 1)

    best = segment_max(term, approx, P + 1)
    # K = M (the closed form N²d²/M - M for M >= 2d²) and K = 4M are evaluated as well: the fixed
    # grid holds them only when M is on it (docs/bounds.md §3, corrections)
    for K in (M, 4 * M):
        v = max(0, term(K))
        if v > best[0]:
            best = (v, K)
    return best


def _m_of(c: int, D: int) -> int:
    """The largest m with T(m) = max(m, ⌊m²/D⌋) <= c (D = 4d²): m <= c and m² < D·(c + 1)."""
    return min(c, math.isqrt(D * (c + 1) - 1))


def _m_many(cs: np.ndarray, d: int) -> np.ndarray:
    """isqrt(4d²(c + 1) − 1) for each c of an int64 array (c + 1 < 2⁶², d < 2¹²), exactly: the
    largest r with r² < 4d²·u, u = c + 1, from the float root corrected by one either way, each
    test r² < 4d²u written as 4d·a·b + b² < 4d²(u − a²) with r = 2d·a + b (every term < 2⁶³)."""
    u = cs + 1
    r = np.floor(2.0 * d * np.sqrt(u.astype(np.float64))).astype(np.int64) + 1

    def below(r: np.ndarray) -> np.ndarray:  # r² < 4d²u
        a, b = np.divmod(r, 2 * d)
        return 4 * d * a * b + b * b < 4 * d * d * (u - a * a)

    for _ in range(3):  # the float root is within one of the true one
        r = np.where(below(r), r, r - 1)
    return r


#: Below this many candidates the exact maximum of :func:`_large_cache_best` is taken in Python.
_FEW = 48

#: At most this many consecutive candidates are evaluated past the first few (a window around the
#: best found: :func:`_large_cache_best`), and at most :data:`_SCREENED` of them exactly where the
#: float screen is used.
_BUDGET = 1 << 20
_SCREENED = 4096


@functools.lru_cache(maxsize=4096)
def _large_cache_best(P: int, d: int, M: int) -> tuple[int, int]:
    """(value, K): the exact maximum over **every** K >= 1 of K·(⌈P/T(M + K)⌉ − 1), the
    first-generation large-cache bound at its best segment length (docs/bounds.md §12.1).

    It is non-increasing in M and non-decreasing in P (a maximum over one set of K of terms that
    are), never below :func:`_large_cache` (whose K are among them), and it costs O(1) candidates
    where the bound spans many segments.  With Q = P − 1 each term is K·⌊Q/T(M + K)⌋; for
    c = T(M + K) the best K with T(M + K) <= c is m(c) − M (:func:`_m_of`), so the maximum is that
    of g(c) = ⌊Q/c⌋·(m(c) − M) over the integers c in [T(M + 1), Q].  Its envelope
    U(c) = (Q/c)·(min(c, √(D(c + 1))) − M) >= g(c) is quasi-concave (the minimum of Q(1 − M/c),
    increasing, and Q(√(D(c + 1)) − M)/c, whose slope has the sign of M − d(c + 2)/√(c + 1),
    decreasing), so after the best g near U's peak every c with g(c) above it lies in the interval
    where U >= that value: its integers, or the blocks of one ⌊Q/c⌋ in it (each block's largest c),
    whichever are fewer, are evaluated exactly.

    That interval's width grows as about 4d²·P/M^2.5 (where g is flat near its peak, within its
    floors' jitter), past any enumeration for P beyond ~2⁶² at small d and large M.  Where it
    holds more than :data:`_BUDGET` integers (or blocks), only the window of that many around the
    best found is evaluated (and, where P >= 2⁶² needs the float screen, at most
    :data:`_SCREENED` of its candidates by their float estimates): the value is then the best over
    those segment lengths, still a valid bound at M, but no longer proven the exact maximum, so
    its monotonicity in M and N is not guaranteed there (docs/bounds.md §3).  Every shape with
    P < 2⁶¹ met so far stays within the budget."""
    Q, D = P - 1, 4 * d * d
    cmin = max(M + 1, (M + 1) ** 2 // D)  # T(M + 1): the least c with m(c) > M
    if Q < cmin:
        return 0, 0

    def g(c: int) -> int:
        return (Q // c) * (_m_of(c, D) - M)

    def inside(c: int) -> bool:  # U(c) >= best, with room for rounding (a superset)
        u = Q / c * (min(float(c), math.sqrt(D * (c + 1.0))) - M)
        return u * (1.0 + 1e-9) + 1.0 >= best

    # U's peak: the kink c = √(D(c + 1)) or the stationary point of the square-root piece
    peak = (D + math.sqrt(D * D + 4.0 * D)) / 2.0
    if M > 2 * d:
        s = (M + math.sqrt(float(M) * M - 4.0 * d * d)) / (2.0 * d)
        peak = max(peak, s * s - 1.0)
    c0 = int(min(max(peak, cmin), Q))
    best, arg = 0, cmin
    for c in sorted({cmin, Q, *(min(Q, max(cmin, c0 + j)) for j in (-1, 0, 1, 2))}):
        v = g(c)
        if v > best:
            best, arg = v, c

    def edge(a: int, b: int) -> int:  # a inside, b outside: the last inside point towards b
        while abs(b - a) > 1:
            mid = (a + b) // 2
            if inside(mid):
                a = mid
            else:
                b = mid
        return a

    c1 = cmin if inside(cmin) else edge(arg, cmin)
    c2 = Q if inside(Q) else edge(arg, Q)
    n1, n2 = max(1, Q // c2), Q // c1
    if c2 - c1 <= n2 - n1:
        lo, hi, by_block = c1, c2, False
    else:
        lo, hi, by_block = n1, n2, True
    if hi - lo < _FEW:
        for x in range(lo, hi + 1):
            c = Q // x if by_block else x
            if c >= cmin:
                v = g(c)
                if v > best:
                    best, arg = v, c
    else:
        if hi - lo >= _BUDGET:  # a window of _BUDGET around the best found (docstring)
            mid = Q // arg if by_block else arg
            lo = min(max(lo, mid - _BUDGET // 2), hi - _BUDGET + 1)
            hi = lo + _BUDGET - 1
        if Q < 2**62 and d < 2**12:  # exact in int64 (_m_many)
            xs = np.arange(lo, hi + 1, dtype=np.int64)
            cs = Q // xs if by_block else xs
            cs = cs[cs >= cmin]
            vals = (Q // cs) * (np.minimum(cs, _m_many(cs, d)) - M)
            i = int(np.argmax(vals))
            if int(vals[i]) > best:
                best, arg = int(vals[i]), int(cs[i])
        else:  # floats to screen (each within m + ⌊Q/c⌋ + 2 of g), then exact
            off = np.arange(hi - lo + 1, dtype=np.float64)  # x = lo + off (lo may pass int64)
            xf = float(lo) + off
            cf = np.floor(float(Q) / xf) if by_block else xf
            qf = np.floor(Q / cf)
            mf = np.minimum(cf, np.floor(np.sqrt(D * (cf + 1.0))))
            vf = qf * (mf - M)
            keep = np.flatnonzero((vf * (1.0 + 1e-9) + mf + qf + 2.0 >= best) & (cf >= cmin - 1.0))
            if len(keep) > _SCREENED:  # the most promising by their floats (docstring)
                keep = keep[np.argpartition(vf[keep], -_SCREENED)[-_SCREENED:]]
            for j in keep.tolist():
                c = Q // (lo + j) if by_block else lo + j
                if c >= cmin:
                    v = g(c)
                    if v > best:
                        best, arg = v, c
    return best, _m_of(arg, D) - M


@keyword_sizes()
def standard_matmul_large_cache(*, N: int, d: int, M: int, Nkv: int | None = None,
                                causal: object = False, heads: int = 1,
                                window: int | None = None) -> Bound:
    """Explicit form of Saha & Ye's large-cache bound (Lemma 3.3's argument on I/O segments).

    ``Q >= max_K K·(⌈P/T(M+K)⌉ - 1)`` with ``T(m) = max(m, ⌊m²/(4d²)⌋)``, P the number of scores
    that must be computed (N² unmasked), the maximum over every K >= 1 taken exactly (so the
    bound is non-increasing in M and non-decreasing in N: docs/bounds.md §12.1).  With K = M
    this is at least ``N²d²/M - M`` whenever M >= 2d².  Valid for every M; for M <= 2d² it
    degrades to about (N - √M)² ≈ N².  Superseded by :func:`attnio.bounds.pv_segment`
    (Theorem A).  Derivation: docs/bounds.md §3.
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, window=window)
    return large_cache_for(shape, check_M(M))


def large_cache_for(shape: Shape, M: int) -> Bound:
    """:func:`standard_matmul_large_cache` of a Shape (all its query heads): the term at its best
    segment length over every K (:func:`_large_cache_best`), so non-increasing in M and
    non-decreasing in N; never below :func:`large_cache_raw_for`."""
    return _qk_bound(shape, M, _large_cache_best, f"derived from {SAHA_YE}, Lemma 3.3 "
                     "(docs/bounds.md §3)", "pv_segment (Theorem A)",
                     name="standard_matmul_large_cache",
                     regime="any M (tight for a large cache, M >= d^2)")


def large_cache_raw_for(shape: Shape, M: int) -> Bound:
    """The large-cache bound as evaluated before issue 36 (the fixed grid of K plus K = M and
    K = 4M: not monotone in M), kept for tests/data/bound_values.json; never above
    :func:`large_cache_for`."""
    return _qk_bound(shape, M, _large_cache, f"derived from {SAHA_YE}, Lemma 3.3 "
                     "(docs/bounds.md §3)", "pv_segment (Theorem A)",
                     name="standard_matmul_large_cache",
                     regime="any M (tight for a large cache, M >= d^2)")


@functools.lru_cache(maxsize=4096)
def _small_cache(P: int, d: int, M: int) -> tuple[int, int]:
    work = P * d  # products q_il·k_jl that must be computed
    dd = float(d * d)

    def products(K):
        # max over X in [0, M+K] of f(X) = X²/4 · (2M + K - X + X²/(4d²))   (docs/bounds.md §4):
        # at X = M+K or at a root of f'(X) ∝ X·(X²/d² - 3X + 2c) inside the interval
        K = np.asarray(K, dtype=float)
        c, xmax = 2.0 * M + K, M + K
        disc = 9.0 - 8.0 * c / dd
        r = np.sqrt(np.maximum(disc, 0.0))
        f = xmax * xmax / 4.0 * (c - xmax + xmax * xmax / (4 * dd))
        for x in ((3 - r) * dd / 2, (3 + r) * dd / 2):
            ok = (disc >= 0) & (x > 0) & (x < xmax)
            fx = x * x / 4.0 * (c - x + x * x / (4 * dd))
            f = np.where(ok, np.maximum(f, fx), f)
        return np.sqrt(f) * (1 + 1e-12)

    def product(K: int) -> float:
        # products(K) at one K in Python floats: the same operations, in the same order (the
        # root candidates are finite, so max is numpy's maximum), without numpy's 0-d cost
        Kf = float(K)
        c, xmax = 2.0 * M + Kf, M + Kf
        disc = 9.0 - 8.0 * c / dd
        r = math.sqrt(max(disc, 0.0))
        f = xmax * xmax / 4.0 * (c - xmax + xmax * xmax / (4 * dd))
        for x in ((3 - r) * dd / 2, (3 + r) * dd / 2):
            if disc >= 0 and x > 0 and x < xmax:
                f = max(f, x * x / 4.0 * (c - x + x * x / (4 * dd)))
        return math.sqrt(f) * (1 + 1e-12)

    def term(K: int) -> int:
        return K * (math.ceil(work / product(K)) - 1)

    def approx(K: np.ndarray) -> np.ndarray:
        return K * (np.ceil(work / products(K)) - 1)

    return segment_max(term, approx, 2 * work + 2)


@keyword_sizes()
def standard_matmul_small_cache(*, N: int, d: int, M: int, Nkv: int | None = None,
                                causal: object = False, heads: int = 1,
                                window: int | None = None) -> Bound:
    """Explicit small-cache bound, derived (Loomis–Whitney on I/O segments; cf. Theorem 3.7).

    ``Q >= max_K K·(⌈P·d/E(K)⌉ - 1)`` with ``E(K)² = max_{0<=X<=M+K} X²/4·(2M+K-X+X²/(4d²))`` the
    most products a segment of K I/Os can compute; for M << d² this is about ``√2·N²d/√M - 4M``
    (K = 4M).  Unlike Theorem 3.7 it needs no reduction to matmul: a score tree either crosses a
    segment boundary (a word imported or exported) or has all its 2d inputs imported.
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, window=window)
    return small_cache_for(shape, check_M(M))


def small_cache_for(shape: Shape, M: int) -> Bound:
    """:func:`standard_matmul_small_cache` of a Shape (all its query heads)."""
    return _qk_bound(shape, M, _small_cache, "derived: Loomis–Whitney segment argument "
                     f"(docs/bounds.md §4; cf. {SAHA_YE}, Theorem 3.7)", "qkpv_pooled (Theorem B)",
                     name="standard_matmul_small_cache",
                     regime="any M (tight for a small cache, M < d^2)")


def _qk_bound(shape: Shape, M: int, search: Callable[[int, int, int], tuple[int, int]],
              theorem: str, superseded_by: str, *, name: str, regime: str) -> Bound:
    """A first-generation bound of ``shape`` (all its query heads): ``search(P, d, M)`` gives its
    value and segment length."""
    value, K = search(pairs_of(shape), shape.d, check_M(M))
    return Bound(value, theorem, (*_QK_ASSUMPTIONS, f"segments of K = {K} I/Os",
                                  f"superseded by {superseded_by}"),
                 True, name=name, regime=regime)
