"""Standard attention: materialise S = scale·QKᵀ and P = softmax(S) in slow memory, then O = PV.

This is the baseline FlashAttention beats.  Three phases on one grid of tiles (bm query rows,
bn keys, bk head-dimension columns); with a causal mask only the visible (bm x bn) tiles exist:

1. **scores**: for each visible tile (i, j): ``S_ij = scale · sum_l Q[i, l] K[j, l]^T`` over the
   ceil(d/bk) slices of the head dimension, masked, written to S.
2. **softmax** per query block i, over its visible width ``cov_i``:
   *two-pass* (any M): pass A reads every tile S_ij and folds it into the row max m and row sum l;
   pass B reads every tile again and writes P_ij = exp(S_ij - m)/l.
   *one-pass* (when the block's whole visible row fits): read S[i, :cov_i] once, write P once.
3. **output**: for each query block i and head-dimension slice c: ``O[i, c] = sum_j P_ij V[j, c]``
   over visible j, written once.  A query block that sees no key writes zeros.

Closed form.  Let ``Tr = ceil(Nq/bm)``, ``Tk = ceil(d/bk)``; for block i let ``n_i`` be its number of
visible key blocks and ``cov_i = min(Nkv, n_i·bn)`` their width (n_i = ceil(Nkv/bn), cov_i = Nkv
unmasked; causal: ``hi_i = clip(r1_i + Nkv - Nq, 0, Nkv)``, ``n_i = ceil(hi_i/bn)``), and
``A = sum_i bm_i·cov_i`` the visible area.  Then

    phase 1:  reads d·sum_i (n_i·bm_i + cov_i)     writes A
    phase 2:  reads p·A  (p = 2 two-pass, 1 one-pass)   writes A
    phase 3:  reads Tk·A + d·sum_i cov_i          writes Nq·d

Unmasked, square (Nq = Nkv = N): ``reads = d·N·(ceil(N/bn) + ceil(N/bm)) + (p + Tk + d/...)``; the
sum above is exact in every case.  Fast memory: phases 1 and 3 hold bm·bn + bm·bk + bn·bk words;
phase 2 holds bm·bn + 3·bm (two-pass: tile, m, l, temporary) or bm·cov_max + 3·bm (one-pass).
The least workable M is 4 (all tiles 1 x 1, two-pass).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from . import mapper
from .base import Algorithm
from .protocol import Families


@dataclass(frozen=True)
class StandardTiling:
    """Tiles of bm query rows x bn keys, head-dimension slices of bk; one- or two-pass softmax."""

    bm: int
    bn: int
    bk: int
    onepass: bool = False


def _softmax_rows(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray) -> None:
    """Pass A step of the two-pass softmax: fold a tile into the row max m and row sum l."""
    np.max(S, axis=1, out=t)
    np.maximum(t, m, out=t)
    ts = K_.safe_max(t)
    alpha = np.exp(m - ts)
    l *= alpha
    l += np.exp(S - ts[:, None]).sum(axis=1)
    m[:] = t


def _probabilities(S: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
    """P = exp(S - m) / l in place (rows with l = 0 are fully masked: P = 0)."""
    S -= K_.safe_max(m)[:, None]
    np.exp(S, out=S)
    S /= np.where(l > 0, l, 1.0)[:, None]


def _softmax_full(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray) -> None:
    _softmax_rows(S, m, l, t)
    _probabilities(S, m, l)


class Standard(Algorithm[StandardTiling]):
    name = "standard"
    summary = "standard attention: S = QKᵀ and P = softmax(S) materialised in slow memory"
    Tiling = StandardTiling
    supports_window = True

    def _dims(self, shape: Shape, t: StandardTiling) -> tuple[int, int, int]:
        return min(t.bm, shape.Nq), min(t.bn, shape.Nkv), min(t.bk, shape.d)

    def _row_sums(self, shape: Shape, t: StandardTiling) -> masks.BlockSums:
        """Sums over the bm-row blocks of rows_i·n_i, cov_i and rows_i·cov_i (n_i, cov_i: number
        and width of the bn key blocks block i sees), in O(log N)."""
        return masks.query_block_sums(shape.Nq, shape.Nkv, t.bm, t.bn, shape.offset,
                                      shape.window, shape.causal)

    def footprint(self, shape: Shape, tiling: StandardTiling) -> int:
        bm, bn, bk = min(tiling.bm, shape.Nq), min(tiling.bn, shape.Nkv), min(tiling.bk, shape.d)
        mm = bm * bn + bm * bk + bn * bk
        if tiling.onepass:
            # the widest visible row block is the last one (it sees every key) unless a window
            # or a top-left diagonal with Nkv > Nq narrows it: then it costs O(log N)
            if shape.causal and (shape.window is not None
                                 or shape.causal_align != "bottom_right" and shape.Nkv > shape.Nq):
                width = _max_width(shape, tiling.bm, tiling.bn)
            else:
                width = shape.Nkv
            sm = bm * width + 3 * bm
        else:
            sm = bm * bn + 3 * bm
        return max(mm, sm)

    def min_M(self, shape: Shape) -> int:
        return 4

    def candidate_tilings(self, shape: Shape, M: int) -> list[StandardTiling]:
        """Unmasked, the best tiling of each (bk, onepass) (:meth:`_unmasked_candidates`); under
        a mask, the (bm, bn, bk, onepass) grid whose matmul (and two-pass softmax) tiles fit,
        in :meth:`_families`' order."""
        if not shape.causal:
            sides, bks = _sides(shape, M)
            return self._unmasked_candidates(shape, M, sides, bks)
        fams = self._families(shape, M)
        assert fams is not None
        return [t for i in range(len(fams.lower)) for t in fams.members(i)]

    def _families(self, shape: Shape, M: int, **options: Any) -> Families[StandardTiling] | None:
        """Under a mask, the (bk, bm, bn, onepass) grid in runs, one per (bk, bm, onepass), for
        the mapper's branch and bound (the planner needs N = 10^9 in milliseconds); None
        unmasked (:meth:`_unmasked_candidates` returns the few worth scoring).

        With P the visible (query, key) pairs, every tiling moves at least
        ``d·P/bn + 2d·P/bm + (p + Tk + 2)·P + Nq·d`` words (area >= P, n_i·bn >= cov_i,
        sum_i cov_i >= P/bm, from the closed form above), a head (``member_lower``: every head's).  For fixed
        (bk, bm, onepass) it falls as bn grows, so a run lists its points from the largest bn
        whose matmul (and two-pass softmax) tiles fit down, in bound order, and the mapper stops
        it once the bound exceeds the least count found; a run's ``lower`` is its first point's
        bound.  Nothing is listed before it is reached (a one-pass width costs O(log N)), so the
        grid is never built.  Ties go to the least (one head's bound, grid position)
        (``order``: the order its own heap-merged search kept before the mapper took it)."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        if not shape.causal:
            return None
        import bisect

        sides, bks = _sides(shape, M)
        Nq, Nkv, d, heads = shape.Nq, shape.Nkv, shape.d, shape.n_heads
        pall = masks.row_counts(shape).pairs  # O(1)
        ns = len(sides)

        def bound(bm: int, bn: int, bk: int, onepass: bool) -> float:  # one head's
            p = 1 if onepass else 2
            return d * pall / bn + 2 * d * pall / bm + (p + cdiv(d, bk) + 2) * pall + Nq * d

        runs: list[tuple[int, int, bool, int]] = []  # (ik, im, onepass, index of the largest bn)
        lower: list[float] | None = None
        if max(sides) * max(bks) + 3 * max(sides) + M < 1 << 62:  # int64 holds every product
            runs, lower = self._runs(shape, M, sides, bks, pall)
        for ik, bk in enumerate(bks if lower is None else ()):
            bkc = min(bk, d)
            for im, bm in enumerate(sides):
                bmc = min(bm, Nq)
                # largest bn whose matmul tiles fit (the footprint grows with bn)
                lim = (M - bmc * bkc) // (bmc + bkc)
                top = ns - 1 if Nkv <= lim else bisect.bisect_right(sides, lim) - 1
                for onepass in (False, True):
                    t2 = top
                    if not onepass:  # the two-pass softmax tile bm x bn + 3 bm must fit too
                        while t2 >= 0 and bmc * min(sides[t2], Nkv) + 3 * bmc > M:
                            t2 -= 1
                    if t2 >= 0:
                        runs.append((ik, im, onepass, t2))

        def members(i: int) -> Iterator[StandardTiling]:
            ik, im, onepass, t2 = runs[i]
            return (StandardTiling(sides[im], sides[ib], bks[ik], onepass)
                    for ib in range(t2, -1, -1))

        dp = d * pall

        def order(i: int, j: int, t: StandardTiling) -> tuple[float, int]:
            ik, im, onepass, t2 = runs[i]
            idx = ((ik * ns + im) * ns + t2 - j) * 2 + int(onepass)
            return bound(t.bm, t.bn, t.bk, t.onepass) * (1 - 1e-9), idx

        if lower is None:
            lower = [heads * bound(sides[im], sides[t2], bks[ik], onepass)
                     for ik, im, onepass, t2 in runs]
        lows: list[float] = lower

        def member_lower(i: int, t: StandardTiling) -> float:  # every head's: the run's bound
            rest = lows[i] / heads - dp / sides[runs[i][3]]     # less its first d·P/bn,
            return heads * (dp / t.bn + rest)                   # + d·P/bn

        return Families(lower, members, order=order, member_lower=member_lower)

    @staticmethod
    def _runs(shape: Shape, M: int, sides: list[int], bks: list[int], pall: int
              ) -> tuple[list[tuple[int, int, bool, int]], list[float]]:
        """:meth:`_families`' runs and their bounds over the (bk, bm, onepass) grid at once
        (numpy, where int64 holds every product): the same runs in the same order, (ik, im,
        onepass False then True), each with the index of its largest bn, and each run's
        every-head bound in float64 (within float rounding of the loop's, which the mapper's
        margin covers).  The largest bn whose matmul tiles fit is a bisection of the sides by
        ``(M - bm·bk)/(bm + bk)``; with the two-pass softmax tile ``bm·min(bn, Nkv) + 3·bm <= M``
        too, by ``(M - 3·bm)/bm``."""
        Nq, Nkv, d, heads = shape.Nq, shape.Nkv, shape.d, shape.n_heads
        S = np.array(sides, dtype=np.int64)
        ns = len(sides)
        bkc = np.minimum(np.array(bks, dtype=np.int64), d)[:, None]
        bmc = np.minimum(S, Nq)[None, :]
        lim = (M - bmc * bkc) // (bmc + bkc)
        top = np.where(Nkv <= lim, ns - 1, np.searchsorted(S, lim, side="right") - 1)
        lim2 = (M - 3 * bmc) // bmc
        two = np.minimum(top, np.where(Nkv <= lim2, ns - 1,
                                       np.searchsorted(S, lim2, side="right") - 1))
        t2 = np.stack([two, np.broadcast_to(top, two.shape)], axis=-1)  # onepass False, True
        at = np.indices(t2.shape)
        keep = t2 >= 0
        ik, im, op, t2 = at[0][keep], at[1][keep], at[2][keep].astype(bool), t2[keep]
        Sf = S.astype(np.float64)
        bk_ = np.array(bks, dtype=np.int64)
        tk = (d + bk_ - 1) // bk_  # ⌈d/bk⌉
        lows = heads * (d * pall / Sf[t2] + 2 * d * pall / Sf[im]
                        + (2 - op + tk[ik] + 2).astype(np.float64) * pall + Nq * d)
        runs = list(zip(ik.tolist(), im.tolist(), op.tolist(), t2.tolist()))
        return runs, lows.tolist()

    def _unmasked_candidates(self, shape: Shape, M: int, sides: list[int],
                             bks: list[int]) -> list[StandardTiling]:
        """The best tiling of the (bk, bm, bn, onepass) grid for each (bk, onepass), declared to
        the mapper as two reductions, O(|bks|·|sides|·log|sides|) without evaluating every grid
        point (the planner needs N = 2^20 fast).

        Unmasked, the closed form is ``d·Tc·Nq + 2d·Tr·Nkv + (p + Tk + 2)·Nq·Nkv + Nq·d``
        (Tr, Tc, Tk the block counts): for fixed (bk, bm, onepass) it and the step count are
        non-increasing in bn while the footprint grows, so bn is a dominated dimension (the
        largest that fits, :func:`~attnio.algorithms.mapper.dominated`), and each (bk, onepass)
        is completed with the bm of least (count, steps)
        (:func:`~attnio.algorithms.mapper.completion`, the first on ties): the least-(I/O,
        steps) point of the full grid is among the returned tilings.
        """
        if 3 * shape.d * max(shape.Nq, sides[-1]) * max(shape.Nkv, sides[-1]) + M < 1 << 62:
            return self._unmasked_many(shape, M, sides, bks)  # (int64 holds every product)
        return self._unmasked_loop(shape, M, sides, bks)

    def _unmasked_loop(self, shape: Shape, M: int, sides: list[int], bks: list[int]
                       ) -> list[StandardTiling]:
        """:meth:`_unmasked_candidates` one (bk, bm) at a time, in Python integers (any
        size)."""
        Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
        tr = {s: -(-Nq // s) for s in sides}  # the blocks of each side (cdiv inline: the
        tc = {s: -(-Nkv // s) for s in sides}  # completions key a few hundred pairs)
        out = []
        for bk in bks:
            bkc, tk = min(bk, d), cdiv(d, bk)
            pairs = []  # (bm, its largest bn) where the matmul and two-pass softmax tiles fit
            for bm in sides:
                bmc = min(bm, Nq)
                lim = min((M - bmc * bkc) // (bmc + bkc), (M - 3 * bmc) // bmc)
                bn = mapper.dominated(sides, lim if lim < Nkv else sides[-1])  # bn clamps to Nkv
                if bn is not None:
                    pairs.append((bm, bn))
            for onepass in (False, True):
                p = 1 if onepass else 2
                rest = (p + tk + 2) * Nq * Nkv + Nq * d

                def key(side: tuple[int, int], tk: int = tk, rest: int = rest
                        ) -> tuple[int, int]:
                    r, c = tr[side[0]], tc[side[1]]
                    return d * c * Nq + 2 * d * r * Nkv + rest, r * c * tk

                best = mapper.completion((c for c in pairs if not onepass  # a whole row fits
                                          or min(c[0], Nq) * (Nkv + 3) <= M), key)
                if best is not None:
                    out.append(StandardTiling(*best[1], bk, onepass))
        return [t for t in out if self.footprint(shape, t) <= M]

    def _unmasked_many(self, shape: Shape, M: int, sides: list[int], bks: list[int]
                       ) -> list[StandardTiling]:
        """:meth:`_unmasked_candidates` over the (bk, bm) grid at once (numpy, where int64
        holds every product): the same tilings in the same order.  The largest bn of each
        (bk, bm) is a bisection of the sides, and each (bk, onepass) is completed over the bm
        by :func:`~attnio.algorithms.mapper.completions` with the key ``(d·Tc·Nq +
        2d·Tr·Nkv, Tr·Tc)``: the count less its (bk, onepass) constant ``(p + Tk + 2)·Nq·Nkv
        + Nq·d``, the steps less their factor Tk, the same order as the loop's key."""
        Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
        S = np.array(sides, dtype=np.int64)
        ns = len(sides)
        bmc = np.minimum(S, Nq)[None, :]
        bkc = np.minimum(np.array(bks, dtype=np.int64), d)[:, None]
        lim = np.minimum((M - bmc * bkc) // (bmc + bkc), (M - 3 * bmc) // bmc)
        at = np.where(lim >= Nkv, ns - 1, np.searchsorted(S, lim, side="right") - 1)
        tr = -(-Nq // S)[None, :]
        tc = -(-Nkv // S[np.maximum(at, 0)])
        counts = d * tc * Nq + 2 * d * tr * Nkv
        steps = tr * tc
        fits = at >= 0
        whole = (bmc * (Nkv + 3) <= M)  # one-pass: a whole row fits
        rows = np.stack([fits, fits & whole], axis=1).reshape(-1, ns)  # (bk, onepass) rows
        best = mapper.completions(np.repeat(counts, 2, axis=0), np.repeat(steps, 2, axis=0),
                                  rows)
        out = [StandardTiling(sides[m], sides[int(at[r // 2, m])], bks[r // 2], bool(r % 2))
               for r, m in enumerate(best) if m >= 0]
        return [t for t in out if self.footprint(shape, t) <= M]

    def steps(self, shape: Shape, tiling: StandardTiling) -> int:
        return cdiv(shape.Nq, tiling.bm) * cdiv(shape.Nkv, tiling.bn) * cdiv(shape.d, tiling.bk)

    def validate_tiling(self, shape: Shape, tiling: StandardTiling) -> None:
        super().validate_tiling(shape, tiling)
        if not isinstance(tiling.onepass, bool):
            raise ParameterError(f"tiling.onepass must be True or False, got {tiling.onepass!r}")

    def _predict(self, shape: Shape, tiling: StandardTiling) -> IOCount:
        d = shape.d
        tk = cdiv(d, tiling.bk)
        p = 1 if tiling.onepass else 2
        if not shape.causal:  # every block row sees every key block: the sums in closed form
            Nq, Nkv = shape.Nq, shape.Nkv
            tr, tc = cdiv(Nq, tiling.bm), cdiv(Nkv, tiling.bn)
            area = Nq * Nkv
            reads = d * (tc * Nq + tr * Nkv) + p * area + tk * area + d * tr * Nkv
            return IOCount(reads, 2 * area + Nq * d)
        s = self._row_sums(shape, tiling)
        area = s.size_width
        reads = d * (s.size_count + s.width) + p * area + tk * area + d * s.width
        writes = area + area + shape.Nq * d
        return IOCount(reads, writes)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: StandardTiling, scale: float) -> None:
        Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
        bm, bn, bk = tiling.bm, tiling.bn, tiling.bk
        S = mem.scratch("S", (Nq, Nkv))
        P = mem.scratch("P", (Nq, Nkv))
        band = masks.Band.queries(shape) if shape.causal else None  # the keys each block sees

        # phase 1: S = scale * Q K^T on the visible tiles
        for qb in mem.blocks(Nq, bm, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            for kb in mem.blocks(Nkv, bn, lo=lo, hi=hi, band=band):
                acc = mem.alloc((qb.size, kb.size), 0.0, label="S_ij")
                mem.accumulate_products(acc, Q, K, (qb, kb), mem.blocks(d, bk), transpose_b=True,
                                        alpha=scale, labels=("Q_il", "K_jl"))
                K_.mask_tile(mem, acc, shape, qb, kb)
                mem.store(acc, S, qb, kb)
                mem.free(acc)

        # phase 2: P = softmax(S) row block by row block (the one-pass row's width varies with
        # the block's position: that loop is iterated block by block)
        b2 = None if tiling.onepass else band
        for qb in mem.blocks(Nq, bm, band=b2, uniform=not shape.causal):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            if hi <= lo:
                continue
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            t = mem.alloc((qb.size,), 0.0, label="tmp")
            if tiling.onepass:
                cols = slice((lo // bn) * bn, min(Nkv, cdiv(hi, bn) * bn))
                row = mem.load(S, qb, cols, label="S_i")
                mem.compute(_softmax_full, row, m, l, t, writes=4)
                mem.store(row, P, qb, cols)
                mem.free(row)
            else:
                for kb in mem.blocks(Nkv, bn, lo=lo, hi=hi, band=b2):  # pass A
                    St = mem.load(S, qb, kb, label="S_ij")
                    mem.compute(_softmax_rows, St, m, l, t, writes=4)
                    mem.free(St)
                for kb in mem.blocks(Nkv, bn, lo=lo, hi=hi, band=b2):  # pass B
                    St = mem.load(S, qb, kb, label="S_ij")
                    mem.compute(_probabilities, St, m, l, writes=1)
                    mem.store(St, P, qb, kb)
                    mem.free(St)
            mem.free(m, l, t)

        # phase 3: O = P V
        for qb in mem.blocks(Nq, bm, band=band):
            lo, hi = kv_range(shape, qb.start, qb.stop)
            for cb in mem.blocks(d, bk):
                acc = mem.alloc((qb.size, cb.size), 0.0, label="O_ic")
                mem.accumulate_products(acc, P, V, (qb, cb),
                                        mem.blocks(Nkv, bn, lo=lo, hi=hi, band=band),
                                        labels=("P_ij", "V_jc"))
                mem.store(acc, O, qb, cb)
                mem.free(acc)


@functools.lru_cache(maxsize=4096)
def _max_width(shape: Shape, bm: int, bn: int) -> int:
    """Widest visible row block under the mask (the one-pass softmax holds it), in O(log N);
    cached, because the planner asks for it on many candidates."""
    return masks.query_block_max_width(shape.Nq, shape.Nkv, bm, bn, shape.offset, shape.window,
                                       shape.causal)


def _sides(shape: Shape, M: int) -> tuple[list[int], list[int]]:
    """The tile sides of the candidates: bm and bn (powers of two up to M, clamped to the longer
    axis) and bk (powers of two up to d, and d)."""
    sides = sorted({min(s, max(shape.Nq, shape.Nkv)) for s in _pow2_upto(M)})
    bks = sorted({min(shape.d, b) for b in _pow2_upto(shape.d)} | {shape.d})
    return sides, bks


def _pow2_upto(n: int) -> list[int]:
    out, b = [], 1
    while b <= n:
        out.append(b)
        b *= 2
    return out


ALGORITHM = Standard()


def predicted_io(N: int, d: int, M: int, causal: object = False, tiling: object = None,
                 Nkv: int | None = None) -> IOCount:
    """Closed-form count of ``standard`` for Nq = N (Nkv = N unless given)."""
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    return ALGORITHM.cost(shape, ALGORITHM.coerce_tiling(shape, M, tiling)).io
