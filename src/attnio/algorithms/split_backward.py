"""The backward pass in two passes: dK, dV with K/V blocks stationary, then dQ with Q blocks
stationary (no dQ read-modify-write per step).

FlashAttention-2's backward keeps dK_j, dV_j in fast memory and reads and writes dQ_i at every
(i, j) step: per key block it moves ``(4d + 2)`` words per query row.  Splitting the gradient
into two passes, each with its accumulator stationary, moves ``(2d + 2)`` per query row and key
block in the first and ``2d`` per key row and query block in the second::

    for each query head, each query block:  load O_i, dO_i; D_i = rowsum(dO_i ∘ O_i); write D_i
    pass 1, per key/value block j (Bc rows):
        if no query sees block j: write dK_j = dV_j = 0; continue
        load K_j, V_j;  dK_j = dV_j = 0 in fast memory
        for each query head, each query block i (Br1 rows) that sees block j:
            load Q_i, dO_i, L_i, D_i
            P = exp(scale·Q_i K_jᵀ − L_i) (masked: 0);  dS = P ∘ (dO_i V_jᵀ − D_i)
            dV_j += Pᵀ dO_i;  dK_j += scale·dSᵀ Q_i
        write dK_j, dV_j
    pass 2, per query head, query block i (Br2 rows):
        if block i sees no key: write dQ_i = 0; continue
        load Q_i, dO_i, L_i, D_i;  dQ_i = 0 in fast memory
        for each key/value block j (Bc2 rows) that block i sees:
            load K_j, V_j;  P, dS as above;  dQ_i += scale·dS K_j
        write dQ_i

Closed form per key/value head with g query heads.  Pass 1 is FlashAttention-2's backward loop
without dQ: with ``R₁ = Σ_j rows_j`` and ``C = Σ_j vis_j·Bc_j`` over the key blocks
(:func:`attnio.core.masks.key_block_sums` at (Br1, Bc): ``width`` and ``size_seen``).  Pass 2 is
FlashAttention-2's forward loop: with ``S₂ = Σ_i [seen_i]·rows_i`` and ``W₂ = Σ_i cov_i`` over the
query blocks (:func:`attnio.core.masks.query_block_sums` at (Br2, Bc2))::

    reads  = g·2·Nq·d + 2·d·C + g·(2d + 2)·R₁ + g·((2d + 2)·S₂ + 2·d·W₂)
    writes = g·Nq + 2·Nkv·d + g·Nq·d

Unmasked, N = Nq = Nkv, one head, Tc = ⌈N/Bc⌉ and Tr = ⌈N/Br2⌉:
``2Nd + N + 2Nd + Tc·N(2d + 2) + N(2d + 2) + 2·Tr·Nd + 2Nd + Nd``.  With Bc ≈ M/(4d) and
Br2 ≈ M/(3d) this is about ``14·N²d²/M`` against FlashAttention-2's ``16·N²d²/M``.

Fast memory: pass 1 holds K_j, V_j, dK_j, dV_j (4·Bc·d), Q_i, dO_i (2·Br1·d), L_i, D_i (2·Br1),
P and dS (2·Br1·Bc); pass 2 holds Q_i, dO_i, dQ_i (3·Br2·d), L_i, D_i (2·Br2), K_j, V_j
(2·Bc2·d), P and dS (2·Br2·Bc2).  ``footprint`` is the larger; M >= 7d + 4.

Tiling.  The count is the sum of the two passes' and each pass has its own tile sizes, so the
candidates pair the best few of each pass (scored apart), every pair that fits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range, q_range
from . import _kernels as K_
from . import mapper
from .base import BackwardSchedule, block_sizes
from .common import fp_split_pass1
from .flash2_backward import probabilities, store_row_sums


@dataclass(frozen=True)
class SplitBackwardTiling:
    """Pass 1 (dK, dV): Bc key rows held, Br1 query rows per step; pass 2 (dQ): Br2 query rows
    held, Bc2 key rows per step."""

    Bc: int
    Br1: int
    Br2: int
    Bc2: int


def _fp2(d: int, Br2: int, Bc2: int) -> int:
    return 3 * Br2 * d + 2 * Br2 + 2 * Bc2 * d + 2 * Br2 * Bc2


def dkdv_pass(mem: TwoLevelMemory, qv: dict[str, list[SlowArray]], kv: dict[str, SlowArray], *,
              shape: Shape, Bc: int, Br1: int, scale: float) -> None:
    """Pass 1 on one K/V head (``qv``, ``kv`` of :func:`~attnio.algorithms.base.kv_head_groups`):
    dK, dV with K_j, V_j (Bc rows) stationary, Q, dO, L, D of every query head of the group
    streamed past them in blocks of Br1 rows (D already in slow memory).  Moves
    ``2·d·C + g·(2d + 2)·R₁`` reads and ``2·Nkv·d`` writes (:meth:`SplitBackward._pass1`)."""
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    band = masks.Band.keys(shape) if shape.causal else None
    for kb in mem.blocks(Nkv, Bc, band=band):
        qlo, qhi = q_range(shape, kb.start, kb.stop)
        dKj = mem.alloc((kb.size, d), 0.0, label="dK_j")
        dVj = mem.alloc((kb.size, d), 0.0, label="dV_j")
        if qhi > qlo:
            Kj = mem.load(kv["K"], kb, label="K_j")
            Vj = mem.load(kv["V"], kb, label="V_j")
            for g in range(len(qv["Q"])):
                for qb in mem.blocks(Nq, Br1, lo=qlo, hi=qhi, band=band):
                    Qi = mem.load(qv["Q"][g], qb, label="Q_i")
                    dOi = mem.load(qv["dO"][g], qb, label="dO_i")
                    Li = mem.load(qv["L"][g], qb, label="L_i")
                    Di = mem.load(qv["D"][g], qb, label="D_i")
                    P = mem.alloc((qb.size, kb.size), label="P_ij")
                    dS = mem.alloc((qb.size, kb.size), label="dS_ij")
                    mk = K_.mask_of(shape, qb, kb)

                    def step1(P: np.ndarray, dS: np.ndarray, dK: np.ndarray, dV: np.ndarray,
                              Q: np.ndarray, dO: np.ndarray, L: np.ndarray, D: np.ndarray,
                              Kj: np.ndarray, Vj: np.ndarray, mk: object = mk) -> None:
                        probabilities(P, dS, Q, dO, L, D, Kj, Vj, scale, mk)  # type: ignore[arg-type]
                        dV += P.T @ dO
                        dK += scale * (dS.T @ Q)

                    mem.compute(step1, P, dS, dKj, dVj, Qi, dOi, Li, Di, Kj, Vj, writes=4)
                    mem.free(Qi, dOi, Li, Di, P, dS)
            mem.free(Kj, Vj)
        mem.store(dKj, kv["dK"], kb)
        mem.store(dVj, kv["dV"], kb)
        mem.free(dKj, dVj)


class SplitBackward(BackwardSchedule[SplitBackwardTiling]):
    """dK, dV with K/V blocks stationary, then dQ with Q blocks stationary."""

    name = "split_backward"
    summary = ("backward in two passes: dK, dV with K/V blocks stationary, then dQ with Q blocks "
               "stationary (no dQ read-modify-write)")
    Tiling = SplitBackwardTiling
    supports_window = True

    def footprint(self, shape: Shape, t: SplitBackwardTiling) -> int:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        return max(fp_split_pass1(d, min(t.Bc, Nkv), min(t.Br1, Nq)),
                   _fp2(d, min(t.Br2, Nq), min(t.Bc2, Nkv)))

    def min_M(self, shape: Shape) -> int:
        return max(fp_split_pass1(shape.d, 1, 1), _fp2(shape.d, 1, 1))

    def steps(self, shape: Shape, t: SplitBackwardTiling) -> int:
        return (cdiv(shape.Nq, t.Br1) * cdiv(shape.Nkv, t.Bc)
                + cdiv(shape.Nq, t.Br2) * cdiv(shape.Nkv, t.Bc2))

    # ------------------------------------------------------------------ counts
    def _pass1(self, shape: Shape, Bc: int, Br1: int) -> IOCount:
        d, g = shape.d, shape.group
        s = masks.key_block_sums(shape.Nq, shape.Nkv, Br1, Bc, shape.offset, shape.window,
                                 shape.causal)
        return IOCount(2 * d * s.size_seen + g * (2 * d + 2) * s.width, 2 * shape.Nkv * d)

    def _pass2(self, shape: Shape, Br2: int, Bc2: int) -> IOCount:
        d, g = shape.d, shape.group
        s = masks.query_block_sums(shape.Nq, shape.Nkv, Br2, Bc2, shape.offset, shape.window,
                                   shape.causal)
        return IOCount(g * ((2 * d + 2) * s.size_seen + 2 * d * s.width), g * shape.Nq * d)

    def _total(self, shape: Shape, t: SplitBackwardTiling) -> IOCount:
        d, g, Nq = shape.d, shape.group, shape.Nq
        prep = IOCount(g * 2 * Nq * d, g * Nq)
        io = prep + self._pass1(shape, t.Bc, t.Br1) + self._pass2(shape, t.Br2, t.Bc2)
        return io.scaled(shape.n_kv_heads)

    def candidate_tilings(self, shape: Shape, M: int) -> list[SplitBackwardTiling]:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        ones: list[tuple[int, int, int]] = []  # (words, Bc, Br1)
        twos: list[tuple[int, int, int]] = []  # (words, Br2, Bc2)
        b = 1
        while b <= Nq:  # pass 1: Br1 a power of two, the widest Bc that fits
            bc = min(Nkv, (M - 2 * b * d - 2 * b) // (4 * d + 2 * b))
            if bc >= 1:
                ones.append((self._pass1(shape, bc, b).total, bc, b))
            b *= 2
        br_max = min(Nq, (M - 2 * d) // (3 * d + 4))
        for br in block_sizes(Nq, br_max):  # pass 2: the widest Bc2 that fits
            bc2 = min(Nkv, (M - 3 * br * d - 2 * br) // (2 * d + 2 * br))
            if br <= br_max and bc2 >= 1:
                twos.append((self._pass2(shape, br, bc2).total, br, bc2))
        # the passes' words add up: the mapper's declared cut keeps each pass's best 3 (by words,
        # then sides), and their product is the candidate list
        return [SplitBackwardTiling(bc, br1, br2, bc2)
                for _, bc, br1 in mapper.preranked(ones, None, 3)
                for _, br2, bc2 in mapper.preranked(twos, None, 3)]

    # ------------------------------------------------------------------ the schedule
    def one_kv_head(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                     kv: dict[str, SlowArray], *, shape: Shape, tiling: SplitBackwardTiling,
                     scale: float) -> None:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        Bc, Br1 = min(tiling.Bc, Nkv), min(tiling.Br1, Nq)
        Br2, Bc2 = min(tiling.Br2, Nq), min(tiling.Bc2, Nkv)
        G = len(qv["Q"])
        for g in range(G):  # preprocessing: D = rowsum(dO ∘ O)
            store_row_sums(mem, qv, g, Nq, Br2)

        dkdv_pass(mem, qv, kv, shape=shape, Bc=Bc, Br1=Br1, scale=scale)

        # pass 2: dQ with Q_i stationary
        qband = masks.Band.queries(shape) if shape.causal else None
        for g in range(G):
            for qb in mem.blocks(Nq, Br2, band=qband):
                lo, hi = kv_range(shape, qb.start, qb.stop)
                dQi = mem.alloc((qb.size, d), 0.0, label="dQ_i")
                if hi > lo:
                    Qi = mem.load(qv["Q"][g], qb, label="Q_i")
                    dOi = mem.load(qv["dO"][g], qb, label="dO_i")
                    Li = mem.load(qv["L"][g], qb, label="L_i")
                    Di = mem.load(qv["D"][g], qb, label="D_i")
                    for kb in mem.blocks(Nkv, Bc2, lo=lo, hi=hi, band=qband):
                        Kj = mem.load(kv["K"], kb, label="K_j")
                        Vj = mem.load(kv["V"], kb, label="V_j")
                        P = mem.alloc((qb.size, kb.size), label="P_ij")
                        dS = mem.alloc((qb.size, kb.size), label="dS_ij")
                        mk = K_.mask_of(shape, qb, kb)

                        def step2(P: np.ndarray, dS: np.ndarray, dQ: np.ndarray, Q: np.ndarray,
                                  dO: np.ndarray, L: np.ndarray, D: np.ndarray, Kj: np.ndarray,
                                  Vj: np.ndarray, mk: object = mk) -> None:
                            probabilities(P, dS, Q, dO, L, D, Kj, Vj, scale, mk)  # type: ignore[arg-type]
                            dQ += scale * (dS @ Kj)

                        mem.compute(step2, P, dS, dQi, Qi, dOi, Li, Di, Kj, Vj, writes=3)
                        mem.free(Kj, Vj, P, dS)
                    mem.free(Qi, dOi, Li, Di)
                mem.store(dQi, qv["dQ"][g], qb)
                mem.free(dQi)


BACKWARD = SplitBackward()
