"""Lower bounds for the matmul building block C = A·B (C written), :mod:`attnio.blocks.matmul`."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.checks import check_int
from ..core.workload import MAX_M
from .base import Bound, segment_max

__all__ = ["matmul", "matmul_cosma"]


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


def matmul(m: int, k: int, n: int, M: int) -> Bound:
    """C = A·B (A m×k, B k×n, standard algorithm, C written): explicit, derived.

    ``max(mk + kn + mn, max_K K·(⌈mnk/E(K)⌉ - 1))`` with ``E(K)`` the Loomis–Whitney count of
    products per segment of K I/Os (docs/bounds.md §5); about ``√2·mnk/√M - 4M``.  COSMA's
    Theorem 1 (``2mnk/√M + mn``) is :func:`matmul_cosma`: it is not marked explicit here because
    its statement fails for small k (docs/bounds.md §6 gives a schedule that beats it).
    """
    m = check_int("m", m, minimum=1)
    k = check_int("k", k, minimum=1)
    n = check_int("n", n, minimum=1)
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    lw, K = _matmul_lw(m, k, n, M)
    floor = m * k + k * n + m * n
    return Bound(max(lw, floor), "derived: Loomis–Whitney segment argument (docs/bounds.md §5)", (
        "standard algorithm: C_ij is a sum of the k products a_il·b_lj, any order",
        "C must end in slow memory; recomputation allowed",
        f"segments of K = {K} I/Os" if lw > floor else "the input/output floor mk + kn + mn"),
        True, name="matmul", regime="any M")


def matmul_cosma(m: int, k: int, n: int, M: int) -> Bound:
    """COSMA (Kwasniewski et al., SC'19, arXiv 1908.09606) Theorem 1: ``2mnk/√M + mn``.

    Stated for the red-blue pebbling of the classical matmul CDAG with mnk multiplications (no
    recomputation).  Not marked explicit: the statement fails when k is small against √M (e.g.
    m = n = 100, k = 1, M = 100: a schedule with 10,300 I/Os exists, the formula says 12,000;
    docs/bounds.md §6), so it is reported as an asymptotic form.
    """
    m = check_int("m", m, minimum=1)
    k = check_int("k", k, minimum=1)
    n = check_int("n", n, minimum=1)
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    return Bound(2.0 * m * n * k / math.sqrt(M) + m * n, "COSMA (arXiv 1908.09606), Theorem 1", (
        "classical matmul CDAG, exactly mnk multiplications (no recomputation)", "C written",
        "fails for small k (docs/bounds.md §6): not used as an explicit bound"), False,
        name="matmul_cosma", regime="any M", constant=1.0)
