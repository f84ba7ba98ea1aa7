"""FlashAttention-2 (Dao 2023): Q blocks outside, accumulators kept in fast memory.

Schedule (Algorithm 1 of arXiv 2307.08691, forward pass, without writing the logsumexp)::

    for each query block Q_i (Br rows):                 # outer loop
        load Q_i;  O_i = 0, l_i = 0, m_i = -inf in fast memory
        for each key/value block j visible to Q_i:     # inner loop (Bc rows)
            load K_j, V_j
            S_ij = scale * Q_i K_j^T  (masked when causal)
            m_new = max(m_i, rowmax S_ij);  P = exp(S_ij - m_new)
            l_i = e^{m_i - m_new} l_i + rowsum P;  O_i = e^{m_i - m_new} O_i + P V_j
        O_i = diag(l_i)^-1 O_i;  write O_i

Closed form.  With ``Tr = ceil(Nq/Br)`` query blocks, each block i loads Q_i once (Br_i·d words),
then K and V over the keys it can see: ``hi_i = Nkv`` without a mask, and with the bottom-right
causal mask ``hi_i = clip(r1_i + Nkv - Nq, 0, Nkv)`` (r1_i the block's last row + 1) rounded up to
whole Bc blocks, ``cov_i = min(Nkv, ceil(hi_i/Bc)·Bc)``.  A block that sees no key (hi_i = 0)
loads nothing and writes zeros.  So

    reads  = sum_i [hi_i > 0] · (Br_i·d + 2·d·cov_i)       (= Nq·d + 2·Tr·Nkv·d unmasked)
    writes = Nq·d

Fast memory: Q_i, O_i (2·Br·d), K_j, V_j (2·Bc·d), S_ij (Br·Bc) and the vectors m, l and a
temporary (3·Br): ``footprint = 2·Br·d + 2·Bc·d + Br·Bc + 3·Br`` with Br, Bc clamped to Nq, Nkv,
so the least workable M is 4d + 4 (Br = Bc = 1).

Tiling.  Unmasked, the count depends on Tr only, so the best tiling takes the largest Br that fits
with Bc = 1, then the fewest query blocks' smallest Br, then the largest Bc that still fits (fewer,
larger steps at equal I/O).  Causal counts depend on Bc too; a small grid of candidates is scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory import SlowArray, TwoLevelMemory
from . import _kernels as K_
from .base import Algorithm, IOCount, Shape, cdiv, kv_visible_hi


@dataclass(frozen=True)
class Flash2Tiling:
    """Br query rows and Bc key/value rows per block."""

    Br: int
    Bc: int


def _fp(d: int, Br: int, Bc: int) -> int:
    return 2 * Br * d + 2 * Bc * d + Br * Bc + 3 * Br


class Flash2(Algorithm):
    name = "flash2"
    summary = "FlashAttention-2: Q blocks outer, O, l, m kept in fast memory, O written once"
    Tiling = Flash2Tiling

    def footprint(self, shape: Shape, tiling: Flash2Tiling, causal: bool = False) -> int:
        return _fp(shape.d, min(tiling.Br, shape.Nq), min(tiling.Bc, shape.Nkv))

    def min_M(self, shape: Shape, causal: bool = False) -> int:
        return _fp(shape.d, 1, 1)

    def _bc_max(self, shape: Shape, M: int, Br: int) -> int:
        d = shape.d
        return min(shape.Nkv, (M - Br * (2 * d + 3)) // (2 * d + Br))

    def candidate_tilings(self, shape: Shape, M: int, causal: bool = False):
        d, Nq = shape.d, shape.Nq
        br_max = min(Nq, (M - 2 * d) // (2 * d + 4))
        if br_max < 1:
            return []
        tr_min = cdiv(Nq, br_max)
        brs = {cdiv(Nq, t) for t in range(tr_min, min(Nq, tr_min + 8) + 1)}
        b = 1
        while b <= br_max:
            brs.add(b)
            b *= 2
        brs.add(br_max)
        out = []
        for Br in sorted(brs):
            if Br > br_max:
                continue
            bc = self._bc_max(shape, M, Br)
            if bc < 1:
                continue
            bcs = {bc}
            if causal:
                c = 1
                while c < bc:
                    bcs.add(c)
                    c *= 2
                bcs.update({min(bc, Br), min(bc, max(1, Br // 2))})
            out.extend(Flash2Tiling(Br, c) for c in sorted(bcs))
        return out

    def steps(self, shape: Shape, tiling: Flash2Tiling, causal: bool = False) -> int:
        return cdiv(shape.Nq, tiling.Br) * cdiv(shape.Nkv, tiling.Bc)

    def _predict(self, shape: Shape, tiling: Flash2Tiling, causal: bool) -> IOCount:
        d = shape.d
        starts, stops = K_.block_counts(shape.Nq, tiling.Br)
        hi = K_.visible_hi(shape, stops, causal)
        _, cov = K_.covered(hi, tiling.Bc, shape.Nkv)
        seen = hi > 0
        reads = int(np.sum(np.where(seen, (stops - starts) * d + 2 * d * cov, 0)))
        return IOCount(reads=reads, writes=shape.Nq * d)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: Flash2Tiling, causal: bool,
                 scale: float) -> None:
        d, off = shape.d, shape.offset
        for qb in mem.blocks(shape.Nq, tiling.Br, uniform=not causal):
            hi = kv_visible_hi(shape, qb.stop, causal)
            Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
            if hi == 0:  # every row of the block is masked: its output is 0
                mem.store(Oi, O, qb)
                mem.free(Oi)
                continue
            Qi = mem.load(Q, qb, label="Q_i")
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            t = mem.alloc((qb.size,), 0.0, label="tmp")
            for kb in mem.blocks(shape.Nkv, tiling.Bc, hi=hi):
                Kj = mem.load(K, kb, label="K_j")
                Vj = mem.load(V, kb, label="V_j")
                S = mem.alloc((qb.size, kb.size), label="S_ij")
                mem.matmul(S, Qi, Kj, transpose_b=True, alpha=scale)
                if K_.tile_needs_mask(shape, qb.start, kb.stop, causal):
                    r0, c0 = qb.start, kb.start
                    mem.compute(lambda s, r0=r0, c0=c0: K_.apply_causal_mask(s, r0, c0, off), S,
                                writes=1)
                mem.compute(K_.online_update_fa2, S, m, l, t, Oi, Vj, writes=5)
                mem.free(S, Kj, Vj)
            mem.compute(K_.normalise_rows, Oi, l, writes=1)
            mem.store(Oi, O, qb)
            mem.free(Qi, m, l, t, Oi)


ALGORITHM = Flash2()


def predicted_io(N, d, M, causal=False, tiling=None, Nkv=None) -> IOCount:
    """Closed-form count of ``flash2`` for Nq = N (Nkv = N unless given)."""
    return ALGORITHM.predicted_io(Shape(N, N if Nkv is None else Nkv, d), M, tiling=tiling,
                                  causal=causal)
