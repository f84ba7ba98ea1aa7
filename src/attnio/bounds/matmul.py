"""Lower bounds for the matmul building block C = A·B (C written), :mod:`attnio.blocks.matmul`.

* :func:`matmul_potential` (Theorem C, explicit): Loomis–Whitney on I/O segments with a potential
  on the C accumulators held at segment boundaries, about ``1.927·mnk/√M``, floor mk + kn + mn;
* :func:`matmul_smith` (explicit, under its precondition): Smith, Lowery, Langou & van de Geijn's
  ``2mnk/√M - 2M`` for C := AB + C computed by fused multiply-adds (FMAs), and
  ``2mnk/√M - 2M - mn`` for C := AB when every C_ij is one chain of multiply-adds;
* :func:`matmul` (explicit, superseded by :func:`matmul_potential`): the first Loomis–Whitney
  segment bound, about ``√2·mnk/√M - 4M``;
* :func:`matmul_cosma` (asymptotic): COSMA's Theorem 1, false for small k (docs/bounds.md §9).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.checks import check_bool, check_int
from ..core.workload import MAX_M
from . import params as _params
from .base import Bound, keyword_sizes, segment_max
from .segments import more_memory, potential_lambdas, segments_bound, tabulated_best

__all__ = ["SMITH", "matmul", "matmul_cosma", "matmul_potential", "matmul_potential_lambdas",
           "matmul_potential_value", "matmul_smith"]

SMITH = "Smith, Lowery, Langou & van de Geijn, arXiv 1702.02017"


def _sizes(m: int, k: int, n: int, M: int) -> tuple[int, int, int, int]:
    return (check_int("m", m, minimum=1), check_int("k", k, minimum=1),
            check_int("n", n, minimum=1), check_int("M", M, minimum=1, maximum=MAX_M))


@functools.lru_cache(maxsize=4096)
def _matmul_lw(m: int, k: int, n: int, M: int) -> tuple[int, int]:
    work = m * k * n

    def products(K):
        # E(K)² = max_R (M+R)²/4 · (M+K-R): R = (M+2K)/3 when K >= M, else R = K
        K = np.asarray(K, dtype=float)
        R = np.where(K >= M, (M + 2 * K) / 3, K)
        return np.sqrt((M + R) ** 2 / 4 * (M + K - R)) * (1 + 1e-12)

    def term(K: int) -> int:
        return K * (math.ceil(work / float(products(K))) - 1)

    def approx(K: np.ndarray) -> np.ndarray:
        return K * (np.ceil(work / products(K)) - 1)

    return segment_max(term, approx, 2 * work + 2)


@keyword_sizes()
def matmul(*, m: int, k: int, n: int, M: int) -> Bound:
    """C = A·B (A m×k, B k×n, standard algorithm, C written): explicit, derived.

    ``max(mk + kn + mn, max_K K·(⌈mnk/E(K)⌉ - 1))`` with ``E(K)`` the Loomis–Whitney count of
    products per segment of K I/Os (docs/bounds.md §8); about ``√2·mnk/√M - 4M``.  Superseded by
    :func:`matmul_potential` (Theorem C), kept: it is still explicit and valid.  COSMA's
    Theorem 1 (``2mnk/√M + mn``) is :func:`matmul_cosma`: it is not marked explicit here because
    its statement fails for small k (docs/bounds.md §9 gives a schedule that beats it).
    """
    m, k, n, M = _sizes(m, k, n, M)
    lw, K = _matmul_lw(m, k, n, M)
    floor = m * k + k * n + m * n
    return Bound(max(lw, floor), "derived: Loomis–Whitney segment argument (docs/bounds.md §8)", (
        "standard algorithm: C_ij is a sum of the k products a_il·b_lj, any order",
        "C must end in slow memory; recomputation allowed",
        f"segments of K = {K} I/Os" if lw > floor else "the input/output floor mk + kn + mn",
        "superseded by matmul_potential (Theorem C)"),
        True, name="matmul", regime="any M")


# ---------------------------------------------------------------------------- Theorem C
_C_BRANCHES = ((0.25, 0.0),)


def matmul_potential_lambdas(M: float, K: float, mu: float) -> tuple[float, float, float]:
    """Theorem C's (Λ, Λ_f, Λ_l): products a middle, first and last segment can do."""
    return potential_lambdas(M, K, mu, _C_BRANCHES)


def matmul_potential_value(m: int, k: int, n: int, M: int, K: int, mu: float) -> int:
    """Theorem C's segment term at segment length K and potential μ >= 0 (any values valid)."""
    return segments_bound(m * n * k, K, *matmul_potential_lambdas(M, K, mu))


@functools.lru_cache(maxsize=4096)
def _potential_at(m: int, k: int, n: int, M: int, refine: bool) -> tuple[int, int, float]:
    kappa, c = _params.matmul()

    def value(K: int, mu: float) -> int:
        return matmul_potential_value(m, k, n, M, K, mu)

    return tabulated_best(value, M, kappa, c * math.sqrt(M), zero_too=True, retry=refine)


@functools.lru_cache(maxsize=4096)
def _potential(m: int, k: int, n: int, M: int) -> tuple[int, int, float, int]:
    # closed under more memory (docs/bounds.md §12.1): the best at M or at a larger M'
    return more_memory(lambda M2, refine: _potential_at(m, k, n, M2, refine), M)


@keyword_sizes()
def matmul_potential(*, m: int, k: int, n: int, M: int) -> Bound:
    """C = A·B (standard algorithm, C written), Theorem C of docs/bounds.md §8: explicit.

    ``max(mk + kn + mn, K·(h - 1))``, h the least number of segments of K I/Os with
    ``mnk <= Λ_f + Λ_l + (h - 2)·Λ``: a segment with p imported A/B words and q exported C
    accumulators does at most ``(p/2)·√q`` products (Loomis–Whitney), and a potential μ per C
    accumulator held at a segment boundary telescopes.  About ``1.927·mnk/√M``.

    >>> round(matmul_potential(m=512, k=512, n=512, M=1024).value / (512**3 / 1024**0.5), 2)
    1.93
    """
    m, k, n, M = _sizes(m, k, n, M)
    seg, K, mu, M2 = _potential(m, k, n, M)
    floor = m * k + k * n + m * n
    return Bound(max(seg, floor), "Theorem C: products with a potential on the C accumulators "
                 "(docs/bounds.md §8)", (
                     "standard algorithm: C_ij is a sum of the k products a_il·b_lj, any order "
                     "(summation trees; partial sums may be spilled and reloaded)",
                     "C must end in slow memory; recomputation allowed",
                     f"segments of K = {K} I/Os, potential μ = {mu:.4g}"
                     + ("" if M2 == M else f", evaluated at M' = {M2} >= M (a schedule for M "
                        "runs unchanged with more memory)") if seg > floor
                     else "the input/output floor mk + kn + mn"),
                 True, name="matmul_potential", regime="any M")


# ---------------------------------------------------------------------------- Smith et al.
@keyword_sizes()
def matmul_smith(*, m: int, k: int, n: int, M: int, accumulate: bool = False) -> Bound:
    """Smith, Lowery, Langou & van de Geijn (arXiv 1702.02017): ``2mnk/√M - 2M``.

    Only the paper's abstract could be read; the statement is proved in docs/bounds.md §8 in the
    model where it holds: every C_ij is **one chain** of multiply-adds ``c += a_il·b_lj`` (partial
    sums may be spilled and re-read).  Phases of 2M I/Os; a phase's multiply-adds use A, B entries
    and, for each chain it touches, a chain value from before the phase (or the input C_ij), each
    resident at its start or read in it: ``|A_t| + |B_t| + |C_t| <= 3M``, so by Loomis–Whitney it
    does at most ``M^{3/2}`` of them and ``Q >= 2M·(mnk/M^{3/2} - 1)``.

    ``accumulate=True`` (C := AB + C, C read): ``2mnk/√M - 2M``, floor mk + kn + 2mn.
    ``accumulate=False`` (C := AB, our blocked matmul): each chain's start counted as a pseudo-read,
    ``2mnk/√M - 2M - mn``; floor mk + kn + mn.  General summation trees are not covered (a partial
    sum may be born in a phase from two products without any C value entering it):
    :func:`matmul_potential` (Theorem C, about 1.927·mnk/√M) is.
    """
    m, k, n, M = _sizes(m, k, n, M)
    check_bool("accumulate", accumulate)
    lead = 2.0 * m * n * k / math.sqrt(M) - 2.0 * M
    if accumulate:
        floor = m * k + k * n + 2 * m * n
        model = "C := AB + C by scalar FMAs c_ij += a_il·b_lj (C read and written)"
    else:
        lead -= m * n
        floor = m * k + k * n + m * n
        model = ("C := AB with every C_ij one chain of multiply-adds (partial sums may be "
                 "spilled and reloaded); each chain's start counted as a pseudo-read (mn)")
    return Bound(max(float(floor), lead), f"{SMITH} (journal abstract's statement; "
                 "docs/bounds.md §8)", (model, "S = M words of fast memory",
                                        "phases of 2M I/Os, Loomis–Whitney on each",
                                        "proved in docs/bounds.md §8 (the paper's body could not be "
                                        "read here)"),
                 True, name="matmul_smith", regime="any M")


@keyword_sizes()
def matmul_cosma(*, m: int, k: int, n: int, M: int) -> Bound:
    """COSMA (Kwasniewski et al., SC'19, arXiv 1908.09606) Theorem 1: ``2mnk/√M + mn``.

    Stated for the red-blue pebbling of the classical matmul CDAG with mnk multiplications (no
    recomputation).  Not marked explicit: the statement fails when k is small against √M (e.g.
    m = n = 100, k = 1, M = 100: a schedule with 10,300 I/Os exists, the formula says 12,000;
    docs/bounds.md §9), so it is reported as an asymptotic form.
    """
    m, k, n, M = _sizes(m, k, n, M)
    return Bound(2.0 * m * n * k / math.sqrt(M) + m * n, "COSMA (arXiv 1908.09606), Theorem 1", (
        "classical matmul CDAG, exactly mnk multiplications (no recomputation)", "C written",
        "fails for small k (docs/bounds.md §9): not used as an explicit bound"), False,
        name="matmul_cosma", regime="any M", constant=1.0)
