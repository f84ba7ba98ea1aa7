"""The small-cache backward pass: five output-stationary blocked matmuls, P and dS written once.

Li, Liang, Shi, Song et al. (*On Fine-Grained I/O Complexity of Attention Backward Passes*, arXiv
2410.09397) prove the backward pass costs Θ(min((N²d² + Nd³)/M, (N²d + Nd²)/√M)) words: FlashAttention-2's
backward attains the large-cache term, and their Theorem 4.3 (Algorithm 6) the small-cache one,
through the equivalence of attention with matrix multiplication.  Their Algorithm 6 could not be
read here; this schedule is our design along that route (docs/backward.md), and it attains the
Θ(N²d/√M) term.

Inputs in slow memory: Q, K, V, O, dO and the logsumexp L the forward wrote; outputs dQ, dK, dV;
workspace in slow memory: D (Nq words a head), P and dS (Nq x Nkv words a head).  With
s = scale and, per query head::

    Phase 0  D_i = Σ_l dO_il O_il                        (rows in chunks, columns in slices)
    Phase 1  for each visible tile (I, J) of bm x bn:    T = Σ_l Q[I,l] K[J,l]ᵀ  (bk-wide slices)
                 load L_I;  T = exp(s·T − L_I) (masked entries 0);  write T to P[I,J]
    Phase 2  for each visible tile (I, J):               T = Σ_l dO[I,l] V[J,l]ᵀ
                 by chunks of rows: load P[rows,J], D_rows;  T = P ∘ (T − D);  write T to dS[I,J]
    Phase 3  dV = Σ_h P_hᵀ dO_h     output-stationary: for each key block J, each sub-block of
             ba keys of J, each column block of bc: accumulate over the query heads h of the key
             head and the query blocks I that see J, in slices of br rows of I; write the block
    Phase 4  dQ = s·dS K            for each query block I, sub-block of ba rows, column block:
             accumulate over the key blocks J that I sees, in slices of br keys of J
    Phase 5  dK = s·Σ_h dS_hᵀ Q_h   as phase 3

Visibility is the mask's, tile by tile: tile (I, J) is visited iff some query of I sees some key
of J (causal masks of either alignment, sliding windows); P and dS are written only there, and
the reductions of phases 3-5 read only written tiles (their blocks are sub-blocks of the bm x bn
grid).  Grouped-query attention: dK, dV of a key/value head sum over its ``g`` query heads inside
one accumulator.  Block-sparse layouts are not supported (use ``flash2_backward``).

Closed form.  Per query head, with the sums of :func:`attnio.core.masks.query_block_sums` over
the bm x bn tiles — ``SC = Σ_vis rows_I``, ``W = Σ_vis bn_J``, ``SW = Σ_vis rows_I·bn_J`` (all
three over the visible tiles) — and ``Tc = ⌈d/bc⌉``, ``Xk = Σ_J ⌈bn_J/a_k⌉·R_J`` (R_J the rows of
the query blocks that see J; ``a_k = min(ba, bn)``), ``Xq = Σ_I ⌈rows_I/a_q⌉·W_I`` (W_I the width
of the key blocks I sees; ``a_q = min(ba, bm)``), a key/value head with g query heads moves

    reads  = g·[2·Nq·d                                  (phase 0: O, dO)
               + d·(SC + W) + SC                        (phase 1: Q, K, L)
               + d·(SC + W) + SW + SC                   (phase 2: dO, V, P, D)
               + 3·Tc·SW + d·(2·Xk + Xq)]               (phases 3-5: P or dS; dO, K or Q)
    writes = g·(Nq + 2·SW + Nq·d) + 2·Nkv·d             (D; P and dS; dQ; dK and dV)

times ``batch·kv_heads``.  Unmasked, N = Nq = Nkv, square tiles bm = bn ≈ ba ≈ bc ≈ √M:
≈ 10·N²d/√M + 3N² + O(N²/√M + Nd), against FlashAttention-2's backward ≈ 16·N²d²/M: a factor
≈ 1.6·d/√M fewer words when M << d² (docs/backward.md measures it).

Fast memory: phases 1-2 hold the tile (bm·bn), two slices (bk·(bm + bn)) or a chunk of rows of
P with their D (rc·(bn + 1), rc = max(1, min(bm, bk·(bm + bn) // (bn + 1)))); phases 3-5 the
accumulator (a·bc) and two slices (r·(a + bc)); phase 0 fits in the larger of the two.  So
``footprint = max(bm·bn + max(bk·(bm + bn), bn + 1), max over phases 3-5 of a·bc + r·(a + bc))``
and the least workable M is 3.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range, q_range
from . import _kernels as K_
from . import mapper
from .base import BackwardSchedule, kv_head_groups
from .protocol import Families


@dataclass(frozen=True)
class SmallCacheTiling:
    """Tile sides: ``bm x bn`` score tiles reduced over ``bk``-wide slices of d (phases 1-2);
    ``ba x bc`` output blocks reduced over ``br``-long slices (phases 3-5)."""

    bm: int
    bn: int
    bk: int
    ba: int
    bc: int
    br: int


@dataclass(frozen=True)
class Sides:
    """A tiling clamped to a shape: the sizes the schedule really uses."""

    bm: int
    bn: int
    bk: int
    bc: int
    ak: int  # output sub-block of a key block (phases 3, 5)
    rk: int  # reduction slice of a query block (phases 3, 5)
    aq: int  # output sub-block of a query block (phase 4)
    rq: int  # reduction slice of a key block (phase 4)
    rc: int  # rows per chunk of phase 2's finalisation
    F: int  # the footprint: the most words resident at once


def tile_sides(shape: Shape, t: SmallCacheTiling,
           fp12: Callable[[int, int, int], int] | None = None) -> Sides:
    """The sides of ``t`` on ``shape``; ``fp12`` the footprint of the score phases (bm, bn, bk)
    when it is not this schedule's (``fused_small_cache_backward``'s)."""
    bm, bn, bk = min(t.bm, shape.Nq), min(t.bn, shape.Nkv), min(t.bk, shape.d)
    bc, ak, rk, aq, rq = min(t.bc, shape.d), min(t.ba, bn), min(t.br, bm), min(t.ba, bm), \
        min(t.br, bn)
    rc = max(1, min(bm, bk * (bm + bn) // (bn + 1)))
    F = max((fp12 or _fp12)(bm, bn, bk), _fp35(ak, bc, rk), _fp35(aq, bc, rq))
    return Sides(bm, bn, bk, bc, ak, rk, aq, rq, rc, F)


def _fp12(bm: int, bn: int, bk: int) -> int:
    return bm * bn + max(bk * (bm + bn), bn + 1)


def _fp35(a: int, c: int, r: int) -> int:
    return a * c + r * (a + c)


@functools.lru_cache(maxsize=4096)
def _tile_sums(Nq: int, Nkv: int, bm: int, bn: int, off: int, window: int | None,
               causal: bool) -> tuple[int, int, int, int, int, int, int]:
    """(SC, W, SW, ΣR_J, R_last, ΣW_I, W_last) of the bm x bn tiles (module docstring)."""
    q = masks.query_block_sums(Nq, Nkv, bm, bn, off, window, causal)
    k = masks.key_block_sums(Nq, Nkv, bm, bn, off, window, causal)
    r_last = w_last = 0
    if Nkv % bn:  # the short last key block: the rows of the query blocks that see it
        lo, hi = masks.q_block(Nq, (Nkv // bn) * bn, Nkv, off, window, causal)
        r_last = masks.meet(lo, hi, bm, Nq)[2]
    if Nq % bm:  # the short last query block: the width of the key blocks it sees
        lo, hi = masks.kv_block(Nkv, (Nq // bm) * bm, Nq, off, window, causal)
        w_last = masks.meet(lo, hi, bn, Nkv)[2]
    return q.size_count, q.width, q.size_width, k.width, r_last, q.width, w_last


def _subblocks(total: int, B: int, a: int, weight_all: int, weight_last: int) -> int:
    """Σ over the B-blocks of [0, total) of ⌈size/a⌉·weight, given the total weight and the short
    last block's (0 when B divides total)."""
    if total % B == 0:
        return cdiv(B, a) * weight_all
    return cdiv(B, a) * (weight_all - weight_last) + cdiv(total % B, a) * weight_last


def _output_tiles(mem: TwoLevelMemory, out: SlowArray, span: Block, a: int, d: int, bc: int
                  ) -> Iterator[tuple[slice, Block, FastTile]]:
    """The output-stationary tiles of ``out[span, :]`` (phases 3-5): sub-blocks of ``a`` rows by
    ``bc`` columns, each a zeroed accumulator the caller's loop body adds into, then stored once
    and freed."""
    for ob in mem.blocks(span.size, a):
        rows = slice(span.start + ob.start, span.start + ob.stop)
        for cb in mem.blocks(d, bc):
            acc = mem.alloc((ob.size, cb.size), 0.0, label="acc")
            yield rows, cb, acc
            mem.store(acc, out, rows, cb)
            mem.free(acc)


class SmallCacheBackward(BackwardSchedule[SmallCacheTiling]):
    """The small-cache backward pass: P and dS written once, five output-stationary matmuls."""

    name = "small_cache_backward"
    summary = ("small-cache backward (after Li et al.): P and dS written once, then five "
               "output-stationary blocked matmuls; ~10N²d/√M + 3N² words")
    Tiling = SmallCacheTiling
    supports_window = True
    supports_block_mask = False

    # ------------------------------------------------------------------ fast memory
    def _sides(self, shape: Shape, t: SmallCacheTiling) -> Sides:
        return tile_sides(shape, t)

    def footprint(self, shape: Shape, t: SmallCacheTiling) -> int:
        return self._sides(shape, t).F

    def min_M(self, shape: Shape) -> int:
        return 3

    # ------------------------------------------------------------------ counts
    def _sums(self, shape: Shape, s: Sides) -> tuple[int, int, int, int, int, int, int]:
        return _tile_sums(shape.Nq, shape.Nkv, s.bm, s.bn, shape.offset,
                          shape.window if shape.causal else None, shape.causal)

    def _count(self, shape: Shape, s: Sides,
               sums: tuple[int, int, int, int, int, int, int]) -> IOCount:
        SC, W, SW, RK, r_last, WQ, w_last = sums
        d, g, Nq, Nkv = shape.d, shape.group, shape.Nq, shape.Nkv
        Xk = _subblocks(Nkv, s.bn, s.ak, RK, r_last)
        Xq = _subblocks(Nq, s.bm, s.aq, WQ, w_last)
        Tc = cdiv(d, s.bc)
        reads = g * (2 * Nq * d + 2 * d * (SC + W) + 2 * SC + SW + 3 * Tc * SW
                     + d * (2 * Xk + Xq))
        writes = g * (Nq + 2 * SW + Nq * d) + 2 * Nkv * d
        return IOCount(reads, writes).scaled(shape.n_kv_heads)

    def _total(self, shape: Shape, t: SmallCacheTiling) -> IOCount:
        s = self._sides(shape, t)
        return self._count(shape, s, self._sums(shape, s))

    def workspace(self, shape: Shape) -> int:
        """D, P and dS of every query head."""
        return shape.n_heads * shape.Nq * (1 + 2 * shape.Nkv)

    def steps(self, shape: Shape, t: SmallCacheTiling) -> int:
        s = self._sides(shape, t)
        Tm, Tn = cdiv(shape.Nq, s.bm), cdiv(shape.Nkv, s.bn)
        return (2 * Tm * Tn * cdiv(shape.d, s.bk) + cdiv(shape.d, s.bc)
                * (2 * cdiv(shape.Nkv, s.ak) * cdiv(shape.Nq, s.rk)
                   + cdiv(shape.Nq, s.aq) * cdiv(shape.Nkv, s.rq)))

    # ------------------------------------------------------------------ tilings
    def candidate_tilings(self, shape: Shape, M: int) -> list[SmallCacheTiling]:
        """For each score tile bm x bn (bm a power of two, near-square or splitting Nq evenly;
        bn the largest that fits, near-square or a few smaller), the output block (bc, and ba
        one block of either axis or the largest that fits) of least closed form."""
        return list(_candidates(self, shape, M))

    # the score phases' fit (phases 1-2: one bm x bn tile, two bk-wide slices); a variant that
    # holds more there (fused_small_cache_backward) overrides these four
    def _bm_fits(self, b: int, M: int) -> bool:  # a b x 1 tile
        return 2 * b + 1 <= M

    def _square_side(self, M: int) -> int:  # the square tile: (b + 1)² <= M + 1
        return math.isqrt(M + 1) - 1

    def _bn_max(self, bm: int, M: int) -> int:
        return (M - bm) // (bm + 1)

    def _bk_max(self, bm: int, bn: int, M: int) -> int:
        return (M - bm * bn) // (bm + bn)

    def _candidates(self, shape: Shape, M: int) -> list[SmallCacheTiling]:
        tiles, bcs = self._tiles(shape, M)
        return [t for bm, bn, bk in tiles
                if (t := self._complete(shape, M, bm, bn, bk, bcs)) is not None]

    def _tiles(self, shape: Shape, M: int) -> tuple[list[tuple[int, int, int]], list[int]]:
        """The score tiles (bm, bn, bk) of the candidates, in their order, and the bc sides."""
        if mapper.needs_M(self, shape, M) is not None:
            return [], []
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        fits = functools.partial(self._bm_fits, M=M)
        bms = {b for b in (Nq,) if fits(b)}
        b = 1
        while b <= Nq and fits(b):
            bms.add(b)
            b *= 2
        sq = min(Nq, self._square_side(M))
        if sq >= 1:  # near-square sides, and the sides that split Nq evenly near them
            bms.update(x for x in (sq, sq - 1, sq - 2) if x >= 1)
            t0 = cdiv(Nq, sq)
            bms.update(cdiv(Nq, t) for t in range(t0, t0 + 4))
        bcs = sorted({cdiv(d, t) for t in range(1, d + 1)})  # one bc per number of column blocks
        out: list[tuple[int, int, int]] = []
        for bm in sorted(bms):
            bn_max = min(Nkv, self._bn_max(bm, M))
            if bn_max < 1:
                continue
            bns = {bn_max, cdiv(Nkv, cdiv(Nkv, bn_max)), max(1, bn_max // 2),
                   max(1, bn_max // 4)}
            bns.update(x for x in (sq, sq - 1, sq - 2, bm) if 1 <= x <= bn_max)
            out.extend((bm, bn, min(d, self._bk_max(bm, bn, M))) for bn in sorted(bns))
        return out, bcs

    def _complete(self, shape: Shape, M: int, bm: int, bn: int, bk: int, bcs: list[int]
                  ) -> SmallCacheTiling | None:
        """The candidate of score tile (bm, bn, bk), a partial tiling completed by the mapper
        (:func:`~attnio.algorithms.mapper.completion`) with the output block of least closed
        form: bc, and ba one block of either axis or the largest that fits (None: no block
        fits).  The count is :meth:`_count`'s: a part fixed by (bm, bn) plus
        ``g·(3·Tc·SW + d·(2·Xk + Xq))``, which depends on bc and a alone (not on bk or br), so
        the sides are scored by that part, in the order and with the ties of scoring each
        tiling through :meth:`_count`."""
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        s0 = self._sides(shape, SmallCacheTiling(bm, bn, bk, 1, 1, 1))
        SC, W, SW, RK, r_last, WQ, w_last = self._sums(shape, s0)

        def sides() -> Iterator[tuple[int, int]]:  # (a, bc) whose output block fits
            for bc in bcs:
                a_max = (M - bc) // (bc + 1)
                if a_max < 1:
                    continue
                # one output sub-block per block of either axis, or the largest that fits
                for a in {min(a_max, max(bm, bn)), min(a_max, bm), min(a_max, bn)}:
                    yield a, bc

        by_a: dict[int, int] = {}  # d·(2·Xk + Xq) of each a (most bc share their a's)

        def score(side: tuple[int, int]) -> int:
            a, bc = side
            if a not in by_a:
                by_a[a] = d * (2 * _subblocks(Nkv, s0.bn, min(a, s0.bn), RK, r_last)
                               + _subblocks(Nq, s0.bm, min(a, s0.bm), WQ, w_last))
            return 3 * -(-d // min(bc, d)) * SW + by_a[a]

        best = mapper.completion(sides(), score)
        if best is None:
            return None
        _, (a, bc) = best
        r = min(max(bm, bn), (M - a * bc) // (a + bc))
        return SmallCacheTiling(bm, bn, bk, a, bc, r)

    def _least_total(self, shape: Shape, bm: int, bn: int, rc: masks.RowCounts,
                     sums: tuple[int, ...] | None = None) -> float:
        """A lower bound on :meth:`_total`'s total for every tiling of score tile bm x bn:
        :meth:`_count` with Tc >= 1, Xk >= ΣR_J and Xq >= ΣW_I (each sub-block count at least
        one), and without ``sums`` (the tile sums) also, with P visible pairs, SW >= P,
        SC >= P/bn, W >= P/bm, ΣR_J >= P/bn, ΣW_I >= P/bm (each visible pair lies in a tile of
        at most bn columns and bm rows)."""
        d, g, Nq = shape.d, shape.group, shape.Nq
        if sums is None:
            P = rc.pairs
            SC, W, SW, RK, WQ = P / bn, P / bm, P, P / bn, P / bm
        else:
            SC, W, SW, RK, WQ = sums[0], sums[1], sums[2], sums[3], sums[5]
        reads = g * (2 * Nq * d + 2 * d * (SC + W) + 2 * SC + 4 * SW + d * (2 * RK + WQ))
        writes = g * (Nq + 2 * SW + Nq * d) + 2 * shape.Nkv * d
        return (reads + writes) * shape.n_kv_heads

    def _families(self, shape: Shape, M: int, **options: Any) -> Families[SmallCacheTiling]:
        """The candidates as the mapper's branch and bound takes them: one family per score
        tile (in the candidates' order), bounded by :meth:`_least_total` (refined with the tile
        sums, which completing the tile needs anyway) and completed only when scored.  Every
        candidate the full loop could choose has its bounds at most the least count, so the
        mapper's choice is the same, ties included, as over :meth:`candidate_tilings`
        (tests/planner/test_plan_regression.py)."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        tiles, bcs = self._tiles(shape, M)
        rc = masks.row_counts(shape)
        Nq, Nkv = shape.Nq, shape.Nkv

        def refined(i: int) -> float:
            bm, bn, bk = tiles[i]
            s0 = self._sides(shape, SmallCacheTiling(bm, bn, bk, 1, 1, 1))
            return self._least_total(shape, s0.bm, s0.bn, rc, self._sums(shape, s0))

        def members(i: int) -> list[SmallCacheTiling]:
            t = self._complete(shape, M, *tiles[i], bcs)
            return [] if t is None else [t]

        lower = [self._least_total(shape, min(bm, Nq), min(bn, Nkv), rc) for bm, bn, _ in tiles]
        return Families(lower, members, refined)

    # ------------------------------------------------------------------ the schedule
    def run_schedule(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], *, shape: Shape,
                     tiling: SmallCacheTiling, scale: float) -> None:
        """``arrays``: Q, K, V, O, dO, L (inputs) and dQ, dK, dV (outputs), stacked by head."""
        self.check_shape(shape)
        s = self._sides(shape, tiling)
        for qv, kv in kv_head_groups(mem, arrays, shape, {"P": shape.Nkv, "dS": shape.Nkv}):
            for g in range(shape.group):
                self._score_phases(mem, qv, kv, g, shape, s, scale)
            self._by_keys(mem, qv["P"], qv["dO"], kv["dV"], shape, s, 1.0)  # dV = Σ Pᵀ dO
            for g in range(shape.group):  # dQ = s·dS K
                self._by_queries(mem, qv["dS"][g], kv["K"], qv["dQ"][g], shape, s, scale)
            self._by_keys(mem, qv["dS"], qv["Q"], kv["dK"], shape, s, scale)  # dK = s·Σ dSᵀ Q

    def _score_phases(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                      kv: dict[str, SlowArray], g: int, shape: Shape, s: Sides,
                      scale: float) -> None:
        """Phases 0-2 of query head g: D, then P and dS written tile by tile."""
        self._phase0(mem, qv["dO"][g], qv["O"][g], qv["D"][g], shape, s)
        self._scores(mem, qv, kv, g, shape, s, scale, phase=1)
        self._scores(mem, qv, kv, g, shape, s, scale, phase=2)

    def _phase0(self, mem: TwoLevelMemory, dO: SlowArray, O: SlowArray, D: SlowArray,
                shape: Shape, s: Sides) -> None:
        """D_i = Σ_l dO_il O_il, in the fast memory the other phases use."""
        d, F = shape.d, s.F
        rows, width = (min(shape.Nq, F // (2 * d + 1)), d) if F >= 2 * d + 1 else \
            (1, min(d, (F - 1) // 2))
        for qb in mem.blocks(shape.Nq, rows):
            Di = mem.alloc((qb.size,), 0.0, label="D_i")
            for cb in mem.blocks(d, width):
                a = mem.load(dO, qb, cb, label="dO_i")
                b = mem.load(O, qb, cb, label="O_i")
                mem.compute(K_.row_dot, Di, a, b, writes=1)
                mem.free(a, b)
            mem.store(Di, D, qb)
            mem.free(Di)

    def _scores(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                kv: dict[str, SlowArray], g: int, shape: Shape, s: Sides, scale: float, *,
                phase: int) -> None:
        """Phase 1 (P = exp(s·QKᵀ − L)) or 2 (dS = P ∘ (dO Vᵀ − D)), on the visible tiles."""
        A, B = (qv["Q"][g], kv["K"]) if phase == 1 else (qv["dO"][g], kv["V"])
        out = qv["P"][g] if phase == 1 else qv["dS"][g]
        band = masks.Band.queries(shape) if shape.causal else None
        for qb in mem.blocks(shape.Nq, s.bm, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            for kb in mem.blocks(shape.Nkv, s.bn, lo=lo, hi=hi, band=band):
                T = mem.alloc((qb.size, kb.size), 0.0, label="T_ij")
                for lb in mem.blocks(shape.d, s.bk):
                    a = mem.load(A, qb, lb, label="A_il")
                    b = mem.load(B, kb, lb, label="B_jl")
                    mem.matmul(T, a, b, transpose_b=True, accumulate=True)
                    mem.free(a, b)
                if phase == 1:
                    mask = None
                    if K_.tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
                        mask = (qb.start, kb.start, shape.offset, shape.window)
                    Li = mem.load(qv["L"][g], qb, label="L_i")
                    mem.compute(lambda t, lv, mask=mask: K_.tile_scores(t, lv, scale=scale, mask=mask),
                                T, Li, writes=1)
                    mem.free(Li)
                else:
                    for cb in mem.blocks(qb.size, s.rc):
                        rows = slice(qb.start + cb.start, qb.start + cb.stop)
                        Pc = mem.load(qv["P"][g], rows, kb, label="P_rows")
                        Dc = mem.load(qv["D"][g], rows, label="D_rows")
                        c0, c1 = cb.start, cb.stop
                        mem.compute(lambda t, p, dv, c0=c0, c1=c1: K_.tile_dscores(t[c0:c1], p, dv),
                                    T, Pc, Dc, writes=1)
                        mem.free(Pc, Dc)
                mem.store(T, out, qb, kb)
                mem.free(T)

    def _by_keys(self, mem: TwoLevelMemory, X: list[SlowArray], Y: list[SlowArray],
                 out: SlowArray, shape: Shape, s: Sides, alpha: float) -> None:
        """out[J] = alpha·Σ_h X_h[:, J]ᵀ Y_h, output-stationary over key sub-blocks (phases 3, 5)."""
        band = masks.Band.keys(shape) if shape.causal else None
        for kb in mem.blocks(shape.Nkv, s.bn, band=band):
            qlo, qhi = q_range(shape, kb.start, kb.stop)
            for keys, cb, acc in _output_tiles(mem, out, kb, s.ak, shape.d, s.bc):
                if qhi > qlo:
                    for hb in mem.blocks(len(X), 1):
                        for qb in mem.blocks(shape.Nq, s.bm, lo=qlo, hi=qhi, band=band):
                            for rb in mem.blocks(qb.size, s.rk):
                                rows = slice(qb.start + rb.start, qb.start + rb.stop)
                                x = mem.load(X[hb.start], rows, keys, label="X_rj")
                                y = mem.load(Y[hb.start], rows, cb, label="Y_rc")
                                mem.compute(lambda c, a, b: c.__iadd__(alpha * (a.T @ b)),
                                            acc, x, y, writes=1)
                                mem.free(x, y)

    def _by_queries(self, mem: TwoLevelMemory, X: SlowArray, Y: SlowArray, out: SlowArray,
                    shape: Shape, s: Sides, alpha: float) -> None:
        """out[I] = alpha·X[I, :] Y, output-stationary over query sub-blocks (phase 4)."""
        band = masks.Band.queries(shape) if shape.causal else None
        for qb in mem.blocks(shape.Nq, s.bm, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            for rows, cb, acc in _output_tiles(mem, out, qb, s.aq, shape.d, s.bc):
                if hi > lo:
                    for kb in mem.blocks(shape.Nkv, s.bn, lo=lo, hi=hi, band=band):
                        for rb in mem.blocks(kb.size, s.rq):
                            keys = slice(kb.start + rb.start, kb.start + rb.stop)
                            x = mem.load(X, rows, keys, label="X_ir")
                            y = mem.load(Y, keys, cb, label="Y_rc")
                            mem.compute(lambda c, a, b: c.__iadd__(alpha * (a @ b)),
                                        acc, x, y, writes=1)
                            mem.free(x, y)


@functools.lru_cache(maxsize=1024)
def _candidates(bwd: SmallCacheBackward, shape: Shape, M: int) -> tuple[SmallCacheTiling, ...]:
    return tuple(bwd._candidates(shape, M))


BACKWARD = SmallCacheBackward()
