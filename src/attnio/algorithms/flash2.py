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

Grouped-query attention.  With ``heads = g·kv_heads``, a tiling with ``group = G`` (G divides g)
runs the G query heads of a group together: each K/V tile is loaded once for all of them, so the
group moves ``sum_i [hi_i > 0]·(G·Br_i·d + 2·d·cov_i)`` reads and ``G·Nq·d`` writes, and there are
``batch·heads/G`` groups; fast memory then holds ``G·(2·Br·d + 3·Br) + 2·Bc·d + Br·Bc`` words
(one score tile at a time).  ``group = 1`` is the per-head schedule.  The default tiling scores
every divisor G.

Sliding window.  With ``window = W`` (causal), block i sees keys ``[lo_i, hi_i)`` with
``lo_i = max(0, r0_i + offset - W + 1)``; ``cov_i`` is then the width of the Bc blocks meeting
``[lo_i, hi_i)``.  Skipped tiles are neither loaded nor counted.

Block-sparse attention (``shape.block_mask``, FlashAttention's block-sparse algorithm).  Query
tile i visits only the key tiles j whose Br x Bc tile meets a kept block of the layout (masked
blocks are neither loaded nor counted); inside a visited tile the entries of masked blocks are
-inf.  So ``reads = sum_i [seen_i]·G·Br_i·d + 2·d·sum_i sum_j kept_ij·Bc_j``,
``writes = G·Nq·d``, summed over the layout's tiles (:func:`attnio.core.masks.layout_sums`,
O(tiles)): with tiles aligned with the layout's blocks (Br a multiple or a half/quarter of bq,
Bc of bk, as the candidate tilings are) this is ``Θ(Nd + s·N²d²/M)`` for a layout of density s.
Any tiling runs; a misaligned one visits every tile that meets a kept block.

Tiling.  Unmasked, the count depends on Tr only, so the best tiling takes the largest Br that fits
with Bc = 1, then the fewest query blocks' smallest Br, then the largest Bc that still fits (fewer,
larger steps at equal I/O).  Causal counts depend on Bc too; a small grid of candidates is scored,
each with a lower bound on its count (``_families``) for the mapper's branch and bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from .base import GroupedAlgorithm, divisors_upto
from .common import HeadGroup, row_stream_lower
from .flash2_backward import BACKWARD, aligned_sizes
from .protocol import Families


@dataclass(frozen=True)
class Flash2Tiling:
    """Br query rows and Bc key/value rows per block; ``group`` query heads share each K/V tile."""

    Br: int
    Bc: int
    group: int = 1


def _fp(d: int, Br: int, Bc: int, G: int = 1) -> int:
    return G * (2 * Br * d + 3 * Br) + 2 * Bc * d + Br * Bc


def _groups(shape: Shape, M: int) -> list[int]:
    """The query-head groups G (divisors of heads/kv_heads) whose tiles of one row fit in M:
    G·(2d + 3) + 1 <= M - 2d."""
    return divisors_upto(shape.group, max(0, (M - 2 * shape.d - 1) // (2 * shape.d + 3)))


def _bc_sides(Br: int, bc: int, masked: bool) -> list[int]:
    """The Bc sides of the candidates with Br rows whose widest Bc that fits is bc, ascending:
    bc, and with a mask the powers of two below it, Br and Br/2 (clamped to bc)."""
    if not masked:
        return [bc]
    bcs = {bc, min(bc, Br), min(bc, max(1, Br // 2))}
    bcs.update(1 << i for i in range(bc.bit_length()) if 1 << i < bc)
    return sorted(bcs)


class Flash2(GroupedAlgorithm[Flash2Tiling]):
    name = "flash2"
    summary = "FlashAttention-2: Q blocks outer, O, l, m kept in fast memory, O written once"
    Tiling = Flash2Tiling
    supports_window = True
    supports_backward = True
    supports_block_mask = True
    backward = BACKWARD  # its own backward schedule (flash2_backward.py; others in the registry)

    def footprint(self, shape: Shape, tiling: Flash2Tiling) -> int:
        return _fp(shape.d, min(tiling.Br, shape.Nq), min(tiling.Bc, shape.Nkv), tiling.group)

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1)

    def _bc_max(self, shape: Shape, M: int, Br: int, G: int) -> int:
        d = shape.d
        return min(shape.Nkv, (M - G * Br * (2 * d + 3)) // (2 * d + Br))

    def candidate_tilings(self, shape: Shape, M: int) -> list[Flash2Tiling]:
        """The grid of (Br, Bc, group) worth scoring (module docstring); under a causal mask or
        a window in the order of :meth:`_families`' lower bounds (stable: the mapper's branch
        and bound breaks ties in this order)."""
        if shape.block_mask is not None:
            return self._sparse_tilings(shape, M)
        if shape.causal:
            fams = self._families(shape, M)
            assert fams is not None
            return [t for i in range(len(fams.lower)) for t in fams.members(i)]
        return [Flash2Tiling(Br, c, G) for Br, G, bc in self._grid(shape, M)
                for c in _bc_sides(Br, bc, False)]

    def _grid(self, shape: Shape, M: int) -> list[tuple[int, int, int]]:
        """(Br, group, the widest Bc that fits) of the candidates, in their order; the Bc
        sides of each are :func:`_bc_sides` (made when listed)."""
        d, Nq = shape.d, shape.Nq
        masked = shape.causal
        out: list[tuple[int, int, int]] = []  # tilings are built only for the candidates scored
        for G in _groups(shape, M):
            br_max = min(Nq, (M - 2 * d) // (G * (2 * d + 3) + 1))
            while br_max >= 1 and self._bc_max(shape, M, br_max, G) < 1:
                br_max -= 1
            if br_max < 1:
                continue
            tr_min = cdiv(Nq, br_max)
            brs = {cdiv(Nq, t) for t in range(tr_min, min(Nq, tr_min + 8) + 1)}
            if masked:  # unmasked, reads fall with Tr only: smaller Br are dominated (speed)
                b = 1
                while b <= br_max:
                    brs.add(b)
                    b *= 2
            brs.add(br_max)
            for Br in sorted(brs):
                if Br > br_max:
                    continue
                bc = self._bc_max(shape, M, Br, G)
                if bc >= 1:
                    out.append((Br, G, bc))
        return out

    def _families(self, shape: Shape, M: int, **options: Any) -> Families[Flash2Tiling] | None:
        """Under a causal mask or a window, the candidates of each (Br, group) as one family,
        with a lower bound on their count, least first (stable), for the mapper's branch and
        bound (speed at large N; ties go to the first in this order, as they did when flash2
        pruned its own candidates); None otherwise (every candidate is scored).  With P visible
        pairs and n_seen rows that see a key, a group of G heads reads at least
        ``G·d·n_seen + 2d·P/Br`` (sum_i cov_i >= P/Br) and writes ``G·Nq·d``, whatever Bc;
        without a window the mapper asks, before listing a family, the tighter
        :meth:`_lower_total` (``sum_i cov_i >= sum_i hi_i``, exact where no row is clipped:
        ``refined``), the families' order (and so their ties) unchanged."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        if shape.block_mask is not None or not shape.causal:
            return None
        d, Nq, heads = shape.d, shape.Nq, shape.n_heads
        rc = masks.row_counts(shape)  # O(1)
        pall, nseen = rc.pairs, rc.rows1
        keyed = sorted([((heads // G) * (G * d * nseen + 2 * d * pall / Br + G * Nq * d), Br, G,
                         bc) for Br, G, bc in self._grid(shape, M)],
                       key=lambda c: c[0] * (1 - 1e-9))

        def members(i: int) -> list[Flash2Tiling]:
            _, Br, G, bc = keyed[i]
            return [Flash2Tiling(Br, c, G) for c in _bc_sides(Br, bc, True)]

        tighter = row_stream_lower(shape)  # no window: the keys the blocks see, not P/Br

        def refined(i: int) -> float:
            _, Br, G, _ = keyed[i]
            return max(keyed[i][0], tighter(Br, G)) if tighter is not None else keyed[i][0]

        return Families([c[0] for c in keyed], members,
                        refined=None if tighter is None else refined)

    def _sparse_tilings(self, shape: Shape, M: int) -> list[Flash2Tiling]:
        """Tilings aligned with the layout's blocks (multiples, halves, quarters of bq and bk),
        and the largest Br, Bc that fit."""
        bm = shape.block_mask
        assert bm is not None
        d = shape.d
        out: list[Flash2Tiling] = []
        for G in _groups(shape, M):
            br_max = min(shape.Nq, (M - 2 * d) // (G * (2 * d + 3) + 1))
            while br_max >= 1 and self._bc_max(shape, M, br_max, G) < 1:
                br_max -= 1
            if br_max < 1:
                continue
            for Br in sorted(aligned_sizes(bm.bq, br_max) | {br_max}):
                bc = self._bc_max(shape, M, Br, G)
                if bc >= 1:
                    out.extend(Flash2Tiling(Br, c, G)
                               for c in sorted(aligned_sizes(bm.bk, bc) | {bc}))
        return out

    def steps(self, shape: Shape, tiling: Flash2Tiling) -> int:
        return cdiv(shape.Nq, tiling.Br) * cdiv(shape.Nkv, tiling.Bc)

    def _lower_total(self, shape: Shape) -> Callable[[Flash2Tiling], float] | None:
        """A bound on every tiling's count in O(1), for a search over given tilings (the
        certificate's dense grid) by branch and bound: the count itself unmasked; under a causal
        mask without a window ``G·d·rows1`` of Q (``Σ_i [seen_i]·rows_i`` is at least the rows
        that see a key) and ``2d·Σ_i hi_i`` of K and V (``cov_i >= hi_i``, the keys block i
        sees; :func:`~attnio.algorithms.common.prefix_block_keys`, else 0), plus ``G·Nq·d``
        written, per group (q_stationary_min's bound, its Bc = 1)."""
        lower = row_stream_lower(shape)
        return None if lower is None else (lambda t: lower(t.Br, t.group))

    def _group_count(self, shape: Shape, tiling: Flash2Tiling) -> IOCount:
        """Words moved for one group of ``tiling.group`` query heads sharing K/V tiles."""
        d, G = shape.d, tiling.group
        if shape.block_mask is not None:  # O(tiles): the layout is explicit
            s = masks.layout_sums(shape.block_mask, shape.Nq, shape.Nkv, tiling.Br, tiling.Bc)
            return IOCount(reads=G * d * s.size_seen + 2 * d * s.width, writes=G * shape.Nq * d)
        if not shape.causal:  # every block sees every key: the sum has a closed form
            reads = G * shape.Nq * d + 2 * d * shape.Nkv * cdiv(shape.Nq, tiling.Br)
            return IOCount(reads=reads, writes=G * shape.Nq * d)
        # O(log N): sum_i [seen_i]·rows_i and sum_i cov_i (cov_i = 0 where block i sees nothing)
        s = masks.query_block_sums(shape.Nq, shape.Nkv, tiling.Br, tiling.Bc, shape.offset,
                                   shape.window)
        reads = G * d * s.size_seen + 2 * d * s.width
        return IOCount(reads=reads, writes=G * shape.Nq * d)

    def run_schedule(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], *,
                     shape: Shape, tiling: Flash2Tiling, scale: float) -> None:
        """One head runs on the arrays themselves (no views); more go group by group."""
        if shape.n_heads == 1:
            one = HeadGroup.one(arrays["Q"], arrays["K"], arrays["V"], arrays["O"],
                                arrays.get("L"))
            self.schedule_group(mem, one, shape=shape, tiling=tiling, scale=scale)
            return
        super().run_schedule(mem, arrays, shape=shape, tiling=tiling, scale=scale)

    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: Flash2Tiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head: each K/V tile is loaded
        once for the whole group.  ``heads.lse`` (optional) receives each row's logsumexp, for
        the backward."""
        Qs, K, V, Os, lse = heads.Qs, heads.K, heads.V, heads.Os, heads.lse
        d = shape.d
        band = masks.Band.queries(shape) if shape.causal else None  # the keys each block sees
        bm = shape.block_mask
        tiles = None if bm is None else bm.tiles(shape.Nq, shape.Nkv, tiling.Br, tiling.Bc)
        for qb in mem.blocks(shape.Nq, tiling.Br, band=band, uniform=tiles is None):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if tiles is not None:
                lo, hi = 0, int(tiles[qb.index].any())
            if hi <= lo:  # every row of the block is masked: its output is 0
                K_.store_empty_rows(mem, Os, qb, d, lse)
                continue
            held = []
            for Q in Qs:
                Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
                Qi = mem.load(Q, qb, label="Q_i")
                m = mem.alloc((qb.size,), -np.inf, label="m_i")
                l = mem.alloc((qb.size,), 0.0, label="l_i")
                t = mem.alloc((qb.size,), 0.0, label="tmp")
                held.append((Qi, Oi, m, l, t))
            if tiles is not None:  # block-sparse: the kept key tiles only
                kbs = K_.sparse_blocks(mem, shape.Nkv, tiling.Bc, tiles[qb.index])
            else:
                kbs = mem.blocks(shape.Nkv, tiling.Bc, lo=lo, hi=hi, band=band)
            for kb in kbs:
                Kj = mem.load(K, kb, label="K_j")
                Vj = mem.load(V, kb, label="V_j")
                for Qi, Oi, m, l, t in held:
                    S = mem.alloc((qb.size, kb.size), label="S_ij")
                    mem.matmul(S, Qi, Kj, transpose_b=True, alpha=scale)
                    if tiles is not None:
                        K_.mask_block_tile(mem, S, shape, qb, kb)
                    else:
                        K_.mask_tile(mem, S, shape, qb, kb)
                    mem.compute(K_.online_update_fa2, S, m, l, t, Oi, Vj, writes=5)
                    mem.free(S)
                mem.free(Kj, Vj)
            for g, (Qi, Oi, m, l, t) in enumerate(held):
                if lse is not None:  # logsumexp = m + log l, written for the backward pass
                    mem.compute(K_.logsumexp, t, m, l, writes=1)
                    mem.store(t, lse[g], qb)
                mem.compute(K_.normalise_rows, Oi, l, writes=1)
                mem.store(Oi, Os[g], qb)
                mem.free(Qi, m, l, t, Oi)


ALGORITHM = Flash2()


def predicted_io(N: int, d: int, M: int, causal: object = False, tiling: object = None,
                 Nkv: int | None = None) -> IOCount:
    """Closed-form count of ``flash2`` for Nq = N (Nkv = N unless given)."""
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    return ALGORITHM.cost(shape, ALGORITHM.coerce_tiling(shape, M, tiling)).io
