"""FlashAttention-2's backward pass (Algorithm 2 of arXiv 2307.08691) on the two-level memory.

Inputs in slow memory: Q, K, V, the forward output O, its gradient dO and the logsumexp L the
forward wrote (``flash2`` with ``backward=True``).  Outputs: dQ, dK, dV.  Per key/value head, with
its ``g = heads/kv_heads`` query heads (dK, dV of a shared head sum over its query heads)::

    for each query head, each query block i:  load O_i, dO_i; D_i = rowsum(dO_i ∘ O_i); write D_i
    for each query head, each query block i:  write dQ_i = 0
    for each key/value block j (Bc rows):
        if no query sees block j: write dK_j = dV_j = 0; continue
        load K_j, V_j;  dK_j = dV_j = 0 in fast memory
        for each query head, each query block i that sees block j (Br rows):
            load Q_i, dO_i, L_i, D_i, dQ_i
            P = exp(scale·Q_i K_jᵀ − L_i)  (masked entries 0)
            dV_j += Pᵀ dO_i;  dS = P ∘ (dO_i V_jᵀ − D_i)
            dQ_i += scale·dS K_j;  write dQ_i
            dK_j += scale·dSᵀ Q_i
        write dK_j, dV_j

Closed form per key/value head.  With ``rows_j`` the rows of the Br blocks that see key block j
(all Nq unmasked; causal/window as in ``flash1``) and ``vis_j`` whether any does:

    reads  = g·2·Nq·d + 2·d·sum_j [vis_j]·Bc_j + g·(3d + 2)·sum_j rows_j
    writes = g·Nq + g·Nq·d + 2·Nkv·d + g·d·sum_j rows_j

times ``batch·kv_heads``.  Unmasked, N = Nq = Nkv, one head: ``2Nd + 2Nd + N + Nd + 2Nd +
ceil(N/Bc)·N·(4d + 2)``, Θ(N²d²/M) when Bc ∝ M/d.  Fast memory: K_j, V_j, dK_j, dV_j (4·Bc·d), Q_i,
dO_i, dQ_i (3·Br·d), L_i, D_i (2·Br), P and dS (2·Br·Bc):
``footprint = 4·Bc·d + 3·Br·d + 2·Br·Bc + 2·Br``, so M >= 7d + 4.

Block-sparse (``shape.block_mask``): key tile j meets the query tiles i whose Br x Bc tile meets
a kept block of the layout; the others are skipped (neither loaded nor counted), and ``rows_j``,
``vis_j`` are summed over the layout's tiles (:func:`attnio.core.masks.layout_sums`), so the same
closed form holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, q_range
from . import _kernels as K_
from .base import BackwardSchedule


@dataclass(frozen=True)
class BackwardTiling:
    """Br query rows and Bc key/value rows per block of the backward pass."""

    Br: int
    Bc: int


def _fp(d: int, Br: int, Bc: int) -> int:
    return 4 * Bc * d + 3 * Br * d + 2 * Br * Bc + 2 * Br


def store_row_sums(mem: TwoLevelMemory, qv: dict[str, list[SlowArray]], g: int, Nq: int,
                   Br: int) -> None:
    """Query head ``g``'s D = rowsum(dO ∘ O), block by block of ``Br`` rows: O and dO read,
    D written (2d + 1 words a row)."""
    for qb in mem.blocks(Nq, Br):
        Oi = mem.load(qv["O"][g], qb, label="O_i")
        dOi = mem.load(qv["dO"][g], qb, label="dO_i")
        Di = mem.alloc((qb.size,), label="D_i")
        mem.compute(K_.row_sum_dot, Di, dOi, Oi, writes=1)
        mem.store(Di, qv["D"][g], qb)
        mem.free(Oi, dOi, Di)


def _backward_step(P: np.ndarray, dS: np.ndarray, dQ: np.ndarray, dK: np.ndarray, dV: np.ndarray,
                   Q: np.ndarray, dO: np.ndarray, L: np.ndarray, D: np.ndarray, Kj: np.ndarray,
                   Vj: np.ndarray, *, scale: float,
                   mask: tuple[int, int, int, int | None] | None = None,
                   block: tuple[np.ndarray, int, int, int, int] | None = None) -> None:
    """One (i, j) step: P from the saved logsumexp, then dV, dS, dQ, dK (Algorithm 2, l. 11-20)."""
    probabilities(P, dS, Q, dO, L, D, Kj, Vj, scale, mask, block)
    dV += P.T @ dO
    dQ += scale * (dS @ Kj)
    dK += scale * (dS.T @ Q)


def probabilities(P: np.ndarray, dS: np.ndarray, Q: np.ndarray, dO: np.ndarray, L: np.ndarray,
                  D: np.ndarray, Kj: np.ndarray, Vj: np.ndarray, scale: float,
                  mask: tuple[int, int, int, int | None] | None,
                  block: tuple[np.ndarray, int, int, int, int] | None = None) -> None:
    """P = exp(scale·Q Kᵀ − L) (masked entries 0) and dS = P ∘ (dO Vᵀ − D), in place."""
    np.matmul(Q, Kj.T, out=P)
    P *= scale
    if mask is not None:
        K_.apply_causal_mask(P, *mask)
    if block is not None:
        K_.apply_block_mask(P, *block)
    np.subtract(P, np.where(np.isfinite(L), L, np.inf)[:, None], out=P)  # L = -inf: P = 0
    np.exp(P, out=P)
    np.matmul(dO, Vj.T, out=dS)
    dS -= D[:, None]
    dS *= P


def aligned_sizes(b: int, limit: int) -> set[int]:
    """Tile sizes <= ``limit`` aligned with blocks of ``b``: b·2^k, the largest multiple of b,
    and b/2, b/4 (a block split in halves or quarters)."""
    out = set()
    k = 1
    while k * b <= limit:
        out.add(k * b)
        k *= 2
    if limit >= b:
        out.add((limit // b) * b)
    out.update(c for c in (b // 2, b // 4) if 1 <= c <= limit)
    return out


class Flash2Backward(BackwardSchedule[BackwardTiling]):
    """FlashAttention-2's backward: key/value blocks outer, dK_j, dV_j kept in fast memory."""

    name = "flash2_backward"
    summary = ("FlashAttention-2's backward: K/V blocks outer, dK, dV kept in fast memory, "
               "dQ read and written per step")
    Tiling = BackwardTiling
    supports_window = True
    supports_block_mask = True

    def footprint(self, shape: Shape, t: BackwardTiling) -> int:
        return _fp(shape.d, min(t.Br, shape.Nq), min(t.Bc, shape.Nkv))

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1)

    def candidate_tilings(self, shape: Shape, M: int) -> list[BackwardTiling]:
        d = shape.d
        out: list[BackwardTiling] = []
        brs: set[int] = set()
        br = 1
        while br <= shape.Nq:
            brs.add(br)
            br *= 2
        bm = shape.block_mask
        if bm is not None:  # tiles aligned with the layout's blocks skip exactly its zeros
            brs.update(aligned_sizes(bm.bq, shape.Nq))
        for br in sorted(brs):
            bc = min(shape.Nkv, (M - 3 * br * d - 2 * br) // (4 * d + 2 * br))
            if bc < 1:
                continue
            out.append(BackwardTiling(br, bc))
            if bm is not None:
                cs = aligned_sizes(bm.bk, bc)
                out.extend(BackwardTiling(br, c) for c in sorted(cs) if c != bc)
        return out

    def _total(self, shape: Shape, t: BackwardTiling) -> IOCount:
        d, g, Nq = shape.d, shape.group, shape.Nq
        if shape.block_mask is not None:
            s = masks.layout_sums(shape.block_mask, Nq, shape.Nkv, t.Br, t.Bc, keys=True)
        else:
            s = masks.key_block_sums(Nq, shape.Nkv, t.Br, t.Bc, shape.offset, shape.window,
                                     shape.causal)
        R = s.width  # sum_j rows_j, in O(log N)
        reads = g * 2 * Nq * d + 2 * d * s.size_seen + g * (3 * d + 2) * R
        writes = g * Nq + g * Nq * d + 2 * shape.Nkv * d + g * d * R
        return IOCount(reads, writes).scaled(shape.n_kv_heads)

    def steps(self, shape: Shape, t: BackwardTiling) -> int:
        return cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc)

    def one_kv_head(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                     kv: dict[str, SlowArray], *, shape: Shape, tiling: BackwardTiling,
                     scale: float) -> None:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        Br, Bc = tiling.Br, tiling.Bc
        for g in range(len(qv["Q"])):  # preprocessing: D = rowsum(dO ∘ O); dQ = 0
            store_row_sums(mem, qv, g, Nq, Br)
            for qb in mem.blocks(Nq, Br):
                z = mem.alloc((qb.size, d), 0.0, label="dQ_init")
                mem.store(z, qv["dQ"][g], qb)
                mem.free(z)
        band = masks.Band.keys(shape) if shape.causal else None  # the queries each block meets
        bm = shape.block_mask
        tiles = None if bm is None else bm.tiles(Nq, Nkv, Br, Bc).T  # key tile -> query tiles
        for kb in mem.blocks(Nkv, Bc, band=band, uniform=tiles is None):
            qlo, qhi = q_range(shape, kb.start, kb.stop)
            if tiles is not None:
                qlo, qhi = 0, int(tiles[kb.index].any())
            dKj = mem.alloc((kb.size, d), 0.0, label="dK_j")
            dVj = mem.alloc((kb.size, d), 0.0, label="dV_j")
            if qhi > qlo:
                Kj = mem.load(kv["K"], kb, label="K_j")
                Vj = mem.load(kv["V"], kb, label="V_j")
                for g in range(len(qv["Q"])):
                    if tiles is not None:
                        qbs = K_.sparse_blocks(mem, Nq, Br, tiles[kb.index])
                    else:
                        qbs = mem.blocks(Nq, Br, lo=qlo, hi=qhi, band=band)
                    for qb in qbs:
                        Qi = mem.load(qv["Q"][g], qb, label="Q_i")
                        dOi = mem.load(qv["dO"][g], qb, label="dO_i")
                        Li = mem.load(qv["L"][g], qb, label="L_i")
                        Di = mem.load(qv["D"][g], qb, label="D_i")
                        dQi = mem.load(qv["dQ"][g], qb, label="dQ_i")
                        P = mem.alloc((qb.size, kb.size), label="P_ij")
                        dS = mem.alloc((qb.size, kb.size), label="dS_ij")
                        mask = block = None
                        if K_.tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
                            mask = (qb.start, kb.start, shape.offset, shape.window)
                        if bm is not None and not K_.block_tile_is_full(
                                shape, qb.start, qb.stop, kb.start, kb.stop):
                            block = (bm.layout, bm.bq, bm.bk, qb.start, kb.start)
                        mem.compute(lambda *a, mask=mask, block=block: _backward_step(
                                        *a, scale=scale, mask=mask, block=block),
                                    P, dS, dQi, dKj, dVj, Qi, dOi, Li, Di, Kj, Vj, writes=5)
                        mem.store(dQi, qv["dQ"][g], qb)
                        mem.free(Qi, dOi, Li, Di, dQi, P, dS)
                mem.free(Kj, Vj)
            mem.store(dKj, kv["dK"], kb)
            mem.store(dVj, kv["dV"], kb)
            mem.free(dKj, dVj)


BACKWARD = Flash2Backward()
