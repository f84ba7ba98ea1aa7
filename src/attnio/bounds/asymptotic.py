"""Asymptotic lower bounds (Θ/Ω forms reported with constant 1, ``explicit=False``).

They say how the cost scales, never that a count must exceed the number: no test compares a
count with them.

>>> b = standard_matmul(N=4096, d=64, M=65536)
>>> b.regime, b.explicit, int(b.value)  # 4Nd (reading Q, K, V, writing O) + N²d²/M
('large cache (M >= d^2)', False, 2097152)
"""

from __future__ import annotations

import math

from ..core import masks
from ..core.errors import ParameterError
from ..core.workload import Shape
from .base import SAHA_YE, Bound, attention_shape, check_M, keyword_sizes, regime_of
from .exact import trivial_for

__all__ = ["binary_inputs", "binary_min_d", "fast_matmul_field", "standard_matmul",
           "standard_matmul_for"]


@keyword_sizes()
def standard_matmul(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
                    heads: int = 1, window: int | None = None) -> Bound:
    """Saha & Ye Theorem 3.1 with the input term: Θ(Nd + min(N²d/√M, N²d²/M)).

    The large-cache part (M >= d²) is Lemmas 3.3/3.4 (red-blue pebbling, Hong–Kung); the small-cache
    part (M < d²) is Theorem 3.7 (reduction to Hong–Kung's matmul bound, Corollary 6.2, paying N²
    to write QKᵀ).  The Nd term is reading the inputs and writing the output (the trivial bound;
    the paper's Θ is stated where the quadratic term dominates it: without it the form fell below
    4Nd when M > Nd).  Reported with constant 1 (asymptotic).  With ``Nkv`` or ``causal`` the N²
    is read as the number of scores that must be computed (derived extension, not the paper's).
    """
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, window=window)
    return standard_matmul_for(shape, check_M(M))


def standard_matmul_for(shape: Shape, M: int) -> Bound:
    """:func:`standard_matmul` of a Shape (all its query heads)."""
    d = shape.d
    P = masks.row_counts(shape).pairs2
    small, large = P * d / math.sqrt(M), P * d * d / M
    assumptions = ["S = QKᵀ computed with the standard algorithm (sums of d products)",
                   "red-blue pebble game, recomputation allowed",
                   "Nd term: the trivial bound (inputs read, output written)"]
    if shape.Nkv != shape.Nq or shape.causal:
        assumptions.append("N² read as the number of scores computed (derived extension)")
    return Bound(trivial_for(shape).value + shape.n_heads * min(small, large),
                 f"{SAHA_YE}, Theorem 3.1 (Lemmas 3.3-3.4, Thm 3.7)", tuple(assumptions), False,
                 name="standard_matmul", regime=regime_of(d, M), constant=1.0)


#: The largest q :func:`fast_matmul_field` takes (2**80): the Miller-Rabin test on the first
#: twelve primes as bases is deterministic below 3.3e24 > 2**81, so the prime-power test is
#: exact and takes microseconds, however large q.
MAX_Q = 1 << 80
_MR_BASES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for 2 <= n < 3.3e24."""
    if n < 2:
        return False
    for p in _MR_BASES:
        if n % p == 0:
            return n == p
    r, m = 0, n - 1
    while m % 2 == 0:
        r, m = r + 1, m // 2
    for a in _MR_BASES:
        x = pow(a, m, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _iroot(q: int, k: int) -> int:
    """The integer k-th root of q >= 1 (the largest r with r**k <= q), by bisection on exact
    integers (a float root is off by far more than 1 beyond 2**53)."""
    lo, hi = 1, 1 << (q.bit_length() // k + 1)  # lo**k <= q < hi**k
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid ** k <= q:
            lo = mid
        else:
            hi = mid
    return lo


def _is_prime_power(q: int) -> bool:
    """Whether q is p**k for a prime p and k >= 1 (q < 3.3e24), in O(log q) root extractions."""
    return any(_is_prime(r) and r ** k == q
               for k in range(1, q.bit_length() + 1) if (r := _iroot(q, k)) >= 2)


@keyword_sizes()
def fast_matmul_field(*, N: int, d: int, M: int, q: int, heads: int = 1) -> Bound:
    """Saha & Ye Theorem 4.8: Ω(min(N²d²/M, N²)) with any matrix multiplication, Q, K over F_q.

    Precondition: q is a prime power (a finite field F_q exists) and q > N (the Vandermonde
    construction of Lemma 4.7).  Asymptotic; words are field elements, not reals.
    """
    shape = attention_shape(N, d, heads=heads)
    N, d, M, heads = shape.Nq, shape.d, check_M(M), shape.n_heads
    if isinstance(q, bool) or not isinstance(q, int):
        raise ParameterError(f"q must be an integer prime power > N={N}, got {q!r}", param="q")
    if q > MAX_Q:
        raise ParameterError(f"q must be a prime power in (N, 2**80] (the field test is exact "
                             f"up to 2**80), got q={q}", param="q")
    if q <= N:
        raise ParameterError.worded(f"{{q}} must be > {{N}} (Theorem 4.8 needs a field F_q with "
                                    f"q > N={N}), got q={q}", param="q")
    if not _is_prime_power(q):
        raise ParameterError(f"q must be a prime power (F_q must be a field), got q={q}", param="q")
    value = heads * min(N * N * d * d / M, float(N * N))
    return Bound(value, f"{SAHA_YE}, Theorem 4.8", (
        f"Q, K have entries in the finite field F_q, q = {q} > N", "any matrix multiplication",
        "the algorithm computes every entry of QKᵀ (not necessarily writes it)",
        "I/O counted in field elements"), False, name="fast_matmul_field",
        regime=regime_of(d, M), constant=1.0)


def binary_min_d(N: int) -> int:
    """The least head dimension for which Theorem 4.14's construction exists: ⌈log2(N + 1)⌉."""
    return (N).bit_length()  # = ⌈log2(N + 1)⌉ for N >= 1


@keyword_sizes()
def binary_inputs(*, N: int, d: int, M: int, heads: int = 1) -> Bound:
    """Saha & Ye Theorem 4.14: Ω(min(N²d²/(M log²N), N²)) with any matmul, binary Q, K.

    Preconditions: N >= 2 (log N > 0; log base 2) and d >= ⌈log2(N + 1)⌉.  The proof needs a
    binary K in which every ``2d/log2(N + 1) - 1`` rows are linearly independent (Lemma 4.9); its
    construction takes the parity-check matrix of a binary BCH code of length 2^m - 1 >= N,
    m = ⌈log2(N + 1)⌉, whose ⌈(s-1)/2⌉ blocks of m rows each make any s - 1 columns independent:
    with fewer than m rows there is no block at all.  (``d > log2(N + 1)/2`` is only where the
    count 2d/log2(N + 1) - 1 turns positive; d >= log2(N + 1) is where it reaches one.)  Asymptotic.
    """
    shape = attention_shape(N, d, heads=heads)
    N, d, M, heads = shape.Nq, shape.d, check_M(M), shape.n_heads
    if N < 2:
        raise ParameterError(f"N must be >= 2 for Theorem 4.14 (its bound divides by log²N), got N={N}",
                             param="N")
    if d < binary_min_d(N):
        raise ParameterError(f"d must be >= ⌈log2(N + 1)⌉ = {binary_min_d(N)} for Theorem 4.14 "
                             f"(the BCH construction of Lemma 4.9 needs one block of "
                             f"⌈log2(N + 1)⌉ rows), got d={d}", param="d")
    lg = math.log2(N)
    value = heads * min(N * N * d * d / (M * lg * lg), float(N * N))
    return Bound(value, f"{SAHA_YE}, Theorem 4.14", (
        "Q, K in {0, 1}^{N×d}", f"d >= ⌈log2(N + 1)⌉ = {binary_min_d(N)}",
        "any matrix multiplication", "the algorithm computes every entry of QKᵀ",
        "I/O counted in bits"), False,
        name="binary_inputs", regime=regime_of(d, M), constant=1.0)
