"""The small-cache backward with its score phases fused: P stays beside dP, D stays beside the tiles.

``small_cache_backward`` forms D = rowsum(dO ∘ O) in a pass of its own (O and dO read, D
written), writes each P tile in phase 1 and reads it back in phase 2 to form dS, and loads L and
D once per tile.  When two score tiles fit at once (M up to about d², where this family is the
planner's pick, e.g. N = 300, d = 160, M = 13,615, causal), this schedule keeps them together::

    per query head, per query block I (bm rows) that sees a key:
        D_I = Σ_l dO[I,l] ∘ O[I,l]   (bk-wide slices; D_I stays resident, never written)
        load L_I                      (resident for the row of tiles)
        for each key block J (bn keys) that I sees:
            T1 = Σ_l Q[I,l] K[J,l]ᵀ;  T1 = exp(s·T1 − L_I) (masked entries 0);  write T1 to P[I,J]
            T2 = Σ_l dO[I,l] V[J,l]ᵀ; T2 = T1 ∘ (T2 − D_I);                    write T2 to dS[I,J]
    then phases 3-5 of small_cache_backward unchanged: dV = Σ_h P_hᵀ dO_h, dQ = s·dS K,
    dK = s·Σ_h dS_hᵀ Q_h, output-stationary (the tiling's ba, bc, br).

Closed form.  With small_cache_backward's sums over the visible bm x bn tiles (``SC``, ``W``,
``SW``, ``Tc``, ``Xk``, ``Xq``: its module docstring) and ``S = Σ_I [I sees a key]·rows_I``
(:func:`attnio.core.masks.query_block_sums`' ``size_seen``), a key/value head with g query heads
moves::

    reads  = g·[(2d + 1)·S                              (O, dO for D; L: once per seen block)
               + 2d·(SC + W)                            (Q, K; dO, V: per visible tile)
               + 3·Tc·SW + d·(2·Xk + Xq)]               (phases 3-5, as small_cache_backward)
    writes = g·(2·SW + Nq·d) + 2·Nkv·d                  (P and dS; dQ; dK and dV)

times ``batch·kv_heads``.  Derivation: small_cache_backward's reads less its phase 0 (2·Nq·d),
its per-tile L and D (2·SC) and its phase-2 reading of P (SW), plus the D formation of the seen
blocks ((2d)·S) and their L (S); its writes less D (Nq).  Where both run the same tiles this is
``g·(2·Nq·d + 2·SC + SW − (2d + 1)·S)`` reads fewer (≥ g·(SC + SW) > 0 when a tile is visible:
S ≤ Nq and S ≤ SC) and ``g·Nq`` writes fewer, but the score phase holds two tiles, so at the same M its tiles are smaller (about √2 per side): the
planner scores both by closed form.

Fast memory: the score phase holds D_I and L_I (2·bm), the two tiles (2·bm·bn) and two slices
(bk·(bm + bn)); while D_I is formed, D_I (bm) and a dO and an O slice (2·bm·bk).  Phases 3-5 as
small_cache_backward::

    footprint = max(2·bm + 2·bm·bn + bk·(bm + bn), bm + 2·bm·bk,
                    max over phases 3-5 of a·bc + r·(a + bc))

so M >= 6.  Masks (causal of both alignments, sliding windows) and grouped-query attention as
small_cache_backward; block-sparse layouts are not supported (use ``flash2_backward``).
"""

from __future__ import annotations

import math

from ..core import masks
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from .small_cache_backward import Sides, SmallCacheBackward, SmallCacheTiling, tile_sides

__all__ = ["BACKWARD", "FusedSmallCacheBackward"]


def _fp_scores(bm: int, bn: int, bk: int) -> int:
    """The score phase's footprint: two tiles, D_I and L_I, two slices (or D_I being formed)."""
    return max(2 * bm + 2 * bm * bn + bk * (bm + bn), bm + 2 * bm * bk)


class FusedSmallCacheBackward(SmallCacheBackward):
    """small_cache_backward with D, P and dS formed in one pass over the tiles."""

    name = "fused_small_cache_backward"
    summary = ("small-cache backward with fused score phases: P kept beside dP (not re-read), D "
               "formed per query block and kept; then small_cache_backward's matmuls")

    def _sides(self, shape: Shape, t: SmallCacheTiling) -> Sides:
        return tile_sides(shape, t, _fp_scores)

    def min_M(self, shape: Shape) -> int:
        return 6

    # ------------------------------------------------------------------ counts
    def _count(self, shape: Shape, s: Sides,
               sums: tuple[int, int, int, int, int, int, int]) -> IOCount:
        SC, W, SW = sums[:3]
        d, g = shape.d, shape.group
        S = masks.query_block_sums(shape.Nq, shape.Nkv, s.bm, s.bn, shape.offset,
                                   shape.window if shape.causal else None,
                                   shape.causal).size_seen
        base = super()._count(shape, s, sums)  # small_cache_backward on the same tiles
        saved = g * (2 * shape.Nq * d + 2 * SC + SW - (2 * d + 1) * S)
        return IOCount(base.reads - saved * shape.n_kv_heads,
                       base.writes - g * shape.Nq * shape.n_kv_heads)

    def _least_total(self, shape: Shape, bm: int, bn: int, rc: masks.RowCounts,
                     sums: tuple[int, ...] | None = None) -> float:
        """small_cache_backward's bound on this count (S >= the rows that see a key)."""
        d, g = shape.d, shape.group
        if sums is None:
            P = rc.pairs
            SC, W, SW, RK, WQ = P / bn, P / bm, P, P / bn, P / bm
        else:
            SC, W, SW, RK, WQ = sums[0], sums[1], sums[2], sums[3], sums[5]
        reads = g * ((2 * d + 1) * rc.rows1 + 2 * d * (SC + W) + 3 * SW + d * (2 * RK + WQ))
        writes = g * (2 * SW + shape.Nq * d) + 2 * shape.Nkv * d
        return (reads + writes) * shape.n_kv_heads

    def steps(self, shape: Shape, t: SmallCacheTiling) -> int:
        s = self._sides(shape, t)
        return super().steps(shape, t) + cdiv(shape.Nq, s.bm) * cdiv(shape.d, s.bk)

    # ------------------------------------------------------------------ tilings
    def _bm_fits(self, b: int, M: int) -> bool:  # a b x 1 tile pair, one-wide slices
        return 5 * b + 1 <= M

    def _square_side(self, M: int) -> int:  # 2b² + 4b <= M
        b = math.isqrt(M // 2)
        while b > 0 and 2 * b * b + 4 * b > M:
            b -= 1
        return b

    def _bn_max(self, bm: int, M: int) -> int:  # 2bm + 2bm·bn + (bm + bn) <= M
        return (M - 3 * bm) // (2 * bm + 1)

    def _bk_max(self, bm: int, bn: int, M: int) -> int:
        return min((M - 2 * bm - 2 * bm * bn) // (bm + bn), (M - bm) // (2 * bm))

    # ------------------------------------------------------------------ the schedule
    def _score_phases(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                      kv: dict[str, SlowArray], g: int, shape: Shape, s: Sides,
                      scale: float) -> None:
        """D, P and dS of query head g in one pass over its visible tiles (module docstring)."""
        band = masks.Band.queries(shape) if shape.causal else None
        for qb in mem.blocks(shape.Nq, s.bm, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if hi <= lo:  # no key: no P, no dS (phases 3-5 write dQ = 0 there)
                continue
            Di = mem.alloc((qb.size,), 0.0, label="D_i")
            for lb in mem.blocks(shape.d, s.bk):
                a = mem.load(qv["dO"][g], qb, lb, label="dO_i")
                b = mem.load(qv["O"][g], qb, lb, label="O_i")
                mem.compute(K_.row_dot, Di, a, b, writes=1)
                mem.free(a, b)
            Li = mem.load(qv["L"][g], qb, label="L_i")
            for kb in mem.blocks(shape.Nkv, s.bn, lo=lo, hi=hi, band=band):
                T1 = self._tile(mem, qv["Q"][g], kv["K"], qb, kb, s.bk, shape.d, "S_ij")
                mask = None
                if K_.tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
                    mask = (qb.start, kb.start, shape.offset, shape.window)
                mem.compute(lambda t, lv, mask=mask: K_.tile_scores(t, lv, scale=scale, mask=mask),
                            T1, Li, writes=1)
                mem.store(T1, qv["P"][g], qb, kb)
                T2 = self._tile(mem, qv["dO"][g], kv["V"], qb, kb, s.bk, shape.d, "dP_ij")
                mem.compute(K_.tile_dscores, T2, T1, Di, writes=1)
                mem.store(T2, qv["dS"][g], qb, kb)
                mem.free(T1, T2)
            mem.free(Di, Li)

    @staticmethod
    def _tile(mem: TwoLevelMemory, A: SlowArray, B: SlowArray, qb: Block, kb: Block, bk: int,
              d: int, label: str) -> FastTile:
        """A[qb, :] B[kb, :]ᵀ in a fresh fast tile, over bk-wide slices of d."""
        T = mem.alloc((qb.size, kb.size), 0.0, label=label)
        for lb in mem.blocks(d, bk):
            a = mem.load(A, qb, lb, label="A_il")
            b = mem.load(B, kb, lb, label="B_jl")
            mem.matmul(T, a, b, transpose_b=True, accumulate=True)
            mem.free(a, b)
        return T


BACKWARD = FusedSmallCacheBackward()
