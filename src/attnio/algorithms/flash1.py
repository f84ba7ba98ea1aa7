"""FlashAttention-1 (Dao et al. 2022, Algorithm 1 of arXiv 2205.14135), with its published tiles.

Schedule::

    Bc = ceil(M'/(4d)),  Br = min(Bc, d)                       # line 1 (M' explained below)
    write O = 0, l = 0, m = -inf to slow memory                  # line 2
    for each key/value block j (Bc rows):                        # line 5
        load K_j, V_j                                            # line 6
        for each query block i that sees some key of block j:   # line 7
            load Q_i, O_i, l_i, m_i                              # line 8
            S_ij = scale * Q_i K_j^T (masked when causal)        # line 9
            m_new = max(m_i, rowmax S_ij); P = exp(S_ij - m_new); l_new = e^{m_i-m_new} l_i + rowsum P
            O_i = diag(l_new)^-1 (diag(l_i) e^{m_i - m_new} O_i + P V_j)     # lines 10-12
            write O_i, l_new, m_new                              # lines 12-13

(Lines 10-11 of the paper subtract the tile's own max m~ and rescale by e^{m~ - m_new}; subtracting
m_new directly is the same arithmetic and moves the same words.)

The tile rule and M'.  As published, the rule can need more than M words: K_j, V_j take about M/2,
Q_i and O_i up to M/2 when Br = Bc (M <= 4d²), S_ij up to M/4, plus l_i, m_i.  Under an enforced
capacity we apply the rule to the largest M' <= M whose tiles fit and report M' in the tiling
(``M_rule``).  Fast memory holds K_j, V_j (2·Bc·d), Q_i, O_i (2·Br·d), S_ij (Br·Bc) and four vectors
of Br words (l_i, m_i, m_new, l_new): ``footprint = 2·Bc·d + 2·Br·d + Br·Bc + 4·Br``, so M >= 4d + 5.

Closed form.  Let ``Tc = ceil(Nkv/Bc)``; for key block j starting at c0 the query rows that see it
are ``[lo_j, Nq)`` with ``lo_j = clip(c0 - (Nkv - Nq), 0, Nq)`` (``lo_j = 0`` unmasked), and the
visited query blocks cover ``rows_j = Nq - floor(lo_j/Br)·Br`` rows.  Then

    reads  = 2·Nkv·d + sum_j rows_j·(2d + 2)            # K, V once; Q_i, O_i, l_i, m_i per visit
    writes = Nq·(d + 2) + sum_j rows_j·(d + 2)          # initialisation; O_i, l_i, m_i per visit

With a sliding window of W keys the rows are ``[lo_j, hi_j)``, ``hi_j = clip(c1_j - 1 + W -
offset, 0, Nq)``, ``rows_j`` the width of the Br blocks meeting it, and a key block no query sees is
not loaded (its 2·Bc·d reads drop out).

Unmasked: ``reads + writes = 2·Nkv·d + Nq·(d + 2) + Tc·Nq·(3d + 4)``.  The issue's estimate
``2Nd + (N/Bc)·N·(3d + 4)`` omits the initialisation ``N·(d + 2)`` (line 2 writes O, l, m to slow
memory); on N = 4096, d = 64, M = 65536 (Bc = 256, Br = 64, Tc = 16) the exact count is 13,639,680
against the estimate's 13,369,344, 2.0% more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, q_range
from . import _kernels as K_
from .base import Algorithm, largest_true


@dataclass(frozen=True)
class Flash1Tiling:
    """Block sizes, and the M' the published rule was applied to (None for a hand-made tiling)."""

    Br: int
    Bc: int
    M_rule: int | None = None


def _fp(d: int, Br: int, Bc: int) -> int:
    return 2 * Bc * d + 2 * Br * d + Br * Bc + 4 * Br


def published_rule(M: int, d: int) -> tuple[int, int]:
    """FlashAttention-1's tile rule: Bc = ceil(M/(4d)), Br = min(Bc, d)."""
    Bc = cdiv(M, 4 * d)
    return min(Bc, d), Bc


class Flash1(Algorithm[Flash1Tiling]):
    name = "flash1"
    summary = "FlashAttention-1: K/V blocks outer, O, l, m re-read and re-written per block"
    Tiling = Flash1Tiling
    supports_window = True

    def footprint(self, shape: Shape, tiling: Flash1Tiling) -> int:
        return _fp(shape.d, min(tiling.Br, shape.Nq), min(tiling.Bc, shape.Nkv))

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1)

    def rule_tiling(self, shape: Shape, M: int) -> Flash1Tiling:
        """The published rule applied to the largest M' <= M whose tiles fit in M."""

        def fits(mp: int) -> bool:
            Br, Bc = published_rule(mp, shape.d)
            return self.footprint(shape, Flash1Tiling(Br, Bc)) <= M

        lo = largest_true(fits, 1, M)  # fits(1) holds when M >= min_M; footprint grows with M'
        Br, Bc = published_rule(lo, shape.d)
        return Flash1Tiling(Br, Bc, lo)

    def candidate_tilings(self, shape: Shape, M: int) -> list[Flash1Tiling]:
        return [self.rule_tiling(shape, M)]

    def steps(self, shape: Shape, tiling: Flash1Tiling) -> int:
        return cdiv(shape.Nq, tiling.Br) * cdiv(shape.Nkv, tiling.Bc)

    def _predict(self, shape: Shape, tiling: Flash1Tiling) -> IOCount:
        d, Nq = shape.d, shape.Nq
        if shape.causal:
            s = masks.key_block_sums(Nq, shape.Nkv, tiling.Br, tiling.Bc, shape.offset,
                                     shape.window)  # O(log N)
            visits, kv_words = s.width, s.size_seen  # sum_j rows_j, sum_j [vis_j]·Bc_j
        else:  # every key block visits every query row
            visits, kv_words = cdiv(shape.Nkv, tiling.Bc) * Nq, shape.Nkv
        reads = 2 * kv_words * d + visits * (2 * d + 2)
        writes = Nq * (d + 2) + visits * (d + 2)
        return IOCount(reads, writes)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: Flash1Tiling, scale: float) -> None:
        d, Nq = shape.d, shape.Nq
        Br, Bc = tiling.Br, tiling.Bc
        ell = mem.scratch("l", (Nq,))
        mx = mem.scratch("m", (Nq,))
        # line 2: initialise O, l, m in slow memory
        for qb in mem.blocks(Nq, Br):
            z = mem.alloc((qb.size, d), 0.0, label="O_init")
            zl = mem.alloc((qb.size,), 0.0, label="l_init")
            zm = mem.alloc((qb.size,), -np.inf, label="m_init")
            mem.store(z, O, qb)
            mem.store(zl, ell, qb)
            mem.store(zm, mx, qb)
            mem.free(z, zl, zm)
        band = masks.Band.keys(shape) if shape.causal else None  # the queries each block meets
        for kb in mem.blocks(shape.Nkv, Bc, band=band):  # line 5
            qlo, qhi = q_range(shape, kb.start, kb.stop)
            if qhi <= qlo:  # no query sees this block (sliding window): skip it
                continue
            Kj = mem.load(K, kb, label="K_j")  # line 6
            Vj = mem.load(V, kb, label="V_j")
            for qb in mem.blocks(Nq, Br, lo=qlo, hi=qhi, band=band):  # line 7
                Qi = mem.load(Q, qb, label="Q_i")  # line 8
                Oi = mem.load(O, qb, label="O_i")
                li = mem.load(ell, qb, label="l_i")
                mi = mem.load(mx, qb, label="m_i")
                S = mem.alloc((qb.size, kb.size), label="S_ij")
                t1 = mem.alloc((qb.size,), label="m_new")
                t2 = mem.alloc((qb.size,), label="l_new")
                mem.matmul(S, Qi, Kj, transpose_b=True, alpha=scale)  # line 9
                K_.mask_tile(mem, S, shape, qb, kb)
                mem.compute(K_.online_update_fa1, S, mi, li, t1, t2, Oi, Vj, writes=6)  # lines 10-12
                mem.store(Oi, O, qb)  # lines 12-13
                mem.store(li, ell, qb)
                mem.store(mi, mx, qb)
                mem.free(Qi, Oi, li, mi, S, t1, t2)
            mem.free(Kj, Vj)


ALGORITHM = Flash1()


def predicted_io(N: int, d: int, M: int, causal: object = False, tiling: object = None,
                 Nkv: int | None = None) -> IOCount:
    """Closed-form count of ``flash1`` for Nq = N (Nkv = N unless given)."""
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    return ALGORITHM.cost(shape, ALGORITHM.coerce_tiling(shape, M, tiling)).io
