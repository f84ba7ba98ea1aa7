"""Stream tiling: square tiling's two blocked matmuls with Smith & van de Geijn's word streaming
(arXiv 1702.02017) and the softmax formed online in the second phase.

The small-cache regime (M < d²/4) writes the scores once and treats Q·Kᵀ and P·V as two blocked
matmuls (:mod:`~attnio.algorithms.square_tiling`).  There each phase holds three tiles (the product
tile and one slab of each operand), and Phase 1 holds the running row max and sum besides: at
M = 200 the score tile is about 11 x 14.  Smith & van de Geijn's matmul schedule holds the product
tile, one column of one operand, and streams the other operand one word at a time: footprint
``ab + a + 1`` for an a x b tile, about 2·mnk/√M words.  Here both phases are streamed, and the
per-row state is moved to where it costs least:

* Phase 1 writes the **raw** (scaled, masked) scores and keeps no row state at all;
* Phase 2 forms the softmax **online** per row (a running max m and sum l per output row, the
  accumulator kept divided by 2^e as FlashAttention-2's is), so no log-sum-exp is written or read.

Schedule::

    Phase 1  for each query block i (Br rows) seeing a key, each key block j (Bc keys) it sees:
                 S = 0                                                (Br x Bc, fast)
                 order "tile", Br <= Bc:  for l in 1..d: load Q[i, l] (Br words, a column)
                                              for each key c of j: load K[c, l] (1 word)
                                                  S[:, c] += scale · Q[i, l] · K[c, l]
                 order "tile", Br > Bc:   the same with the roles swapped (a K column held,
                                          the Q words of the column streamed)
                 order "row":   Q_i loaded once per query block (Br x d, resident);
                                for each key c of j, l in 1..d: load K[c, l] (1 word)
                                    S[:, c] += scale · Q_i[:, l] · K[c, l]
                 mask S (-inf);  write S to A[i, j]
    Phase 2  for each query block i (Br2 rows), each output slice c (Bd2 columns):
                 O = 0 (Br2 x Bd2), m = -inf, l = 0 (Br2 each)
                 for each key k that some row of the block sees:
                     Bd2 <= Br2: load V[k, c] (Bd2 words); for each row r: load A[r, k] (1 word)
                                 online-softmax step of row r with the one score; O[r] += p·V[k, c]
                     Bd2 > Br2:  load A[i, k] (Br2 words, a column); online-softmax step of
                                 the column; for each column u of c: load V[k, u] (1 word),
                                 O[:, u] += p·V[k, u]
                 O = diag(l)⁻¹ O;  write O

Entries of A a row does not see are never used (Phase 2 masks by position: the word may be a
-inf Phase 1 wrote or a word of a tile Phase 1 skipped), so a causal mask skips every fully
masked tile in both phases, as square tiling does.

Fast memory (a = min(Br, Nq), b = min(Bc, Nkv), a' = min(Br2, Nq), c = min(Bd2, d))::

    Phase 1   a·b + min(a, b) + 1      (order "tile": the tile, one column, one word)
              a·d + a·b + 1            (order "row": Q_i, the tile, one word)
    Phase 2   a'·c + min(a', c) + 2·a' + 1     (the O tile, a V row chunk or a score column,
                                                one word, m and l)
    footprint = max(Phase 1, Phase 2);  the least M is 5 (every side 1).

Square tiling with the score spill holds ``ab + Bd·(a + b) + 2a`` and ``a'c + Bk2·(a' + c) + a'``:
the streamed phases save ``(a + b - 1) + 2a`` (Bd = 1) and ``(a' + c) - 1 - a'`` (Bk2 = 1) plus
the min, so the tiles grow towards √M (Phase 1 at M = 200: 13 x 14 against 11 x 14).

Closed form (exact; ``tests/test_stream_tiling.py``).  Phase-1 query blocks i have ``r_i`` rows and
see keys ``[0, hi_i)`` (``hi_i = Nkv`` unmasked; bottom-right causal ``hi_i = clip(stop_i + Nkv -
Nq, 0, Nkv)``, top-left ``clip(stop_i, 0, Nkv)``); ``n_i = ⌈hi_i/Bc⌉`` key blocks of total width
``w_i = min(Nkv, n_i·Bc)``.  Every computed tile (i, j) reads each of its Q words and each of its K
words once (``r_i·d + b_j·d``; order "row" reads Q_i once per block instead) and writes its
``r_i·b_j`` scores.  Phase-2 blocks i' (r'_i rows, keys ``[0, hi'_i)``) read, per output slice,
every score word of the rectangle ``r'_i x hi'_i`` once, and every word of ``V[0:hi'_i]`` once over
the T_d = ⌈d/Bd2⌉ slices::

    Phase 1 reads   Σ_{hi_i>0} (n_i·r_i·d + w_i·d)     order "tile"
                    Σ_{hi_i>0} (r_i·d + w_i·d)         order "row"
    Phase 1 writes  Σ_i r_i·w_i
    Phase 2 reads   Σ_i (T_d·r'_i·hi'_i + d·hi'_i)
    Phase 2 writes  Nq·d

Unmasked (Nq x Nkv): ``⌈Nkv/Bc⌉·Nq·d + ⌈Nq/Br⌉·Nkv·d + Nq·Nkv`` (order "tile") and
``T_d·Nq·Nkv + ⌈Nq/Br2⌉·Nkv·d + Nq·d``: with every side √M, ``4·Nq·Nkv·d/√M + Nq·Nkv + Nq·d``,
the two blocked matmuls' ideal, against square tiling's ``+ Nq + T_d·Nq`` (the log-sum-exp written
and read) on smaller tiles.  The sums are O(log N) (:func:`attnio.core.masks.covered_sums`).
Heads are independent: the count of one head times ``batch·heads`` (grouped-query attention
shares no tile).

Tiling.  The phases are not coupled (Phase 2 needs no Phase-1 block size), so each is searched by
itself and the best three of each are combined: for each side on a geometric ladder
(:func:`attnio.algorithms.square_tiling._ladder`) the largest other side that fits (in closed
form), also snapped down to the least size with the same number of blocks; order "row" with the
fewest query blocks and a few more; with a mask, row blocks that meet the diagonal where it
enters (z, z/2, z/3, z/4 for the z rows that see no key).  Every candidate is scored exactly
(O(log N) each with a mask, a few dozen of them): the least closed form over every tiling on
every unmasked shape tried exhaustively, within a few per cent of it on tiny masked ones
(``tests/test_stream_tiling.py``); a cold causal plan at N = 10⁹ spends about 1 ms here.

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((30, 8)) for _ in range(3))
>>> r = attnio.run("stream_tiling", Q, K, V, M=60, causal=True)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V, causal=True)).max() < 1e-12)
True
>>> ALGORITHM.predicted_io((30, 8), 60, causal=True, tiling=r.tiling).total == r.io.total
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_visible_hi
from . import _kernels as K_
from .base import Algorithm
from .q_stationary_min import _key_step
from .square_tiling import _ladder

__all__ = ["ALGORITHM", "StreamTiling", "StreamTilingTiling"]

ORDERS = ("tile", "row")
_OFFER = 3  # best of each phase combined into the candidate tilings


@dataclass(frozen=True)
class StreamTilingTiling:
    """Phase 1: score tiles Br x Bc (``order`` "tile": one column held, the other operand
    streamed; "row": Q_i resident, K streamed); Phase 2: output tiles Br2 x Bd2."""

    Br: int
    Bc: int
    Br2: int
    Bd2: int
    order: str = "tile"


def _fp1(d: int, a: int, b: int, order: str) -> int:
    if order == "row":
        return a * d + a * b + 1
    return a * b + min(a, b) + 1


def _fp2(a: int, c: int) -> int:
    return a * c + min(a, c) + 2 * a + 1


@functools.lru_cache(maxsize=4096)
def _sums(Nq: int, Nkv: int, B: int, S: int, off: int) -> masks.BlockSums:
    """:func:`masks.covered_sums` of the B-row blocks against S-key blocks (causal), cached: the
    search scores the same (B, S) pairs again when it combines the phases."""
    return masks.covered_sums(Nq, Nkv, B, S, off)


def _phase1(shape: Shape, Br: int, Bc: int, order: str) -> IOCount:
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    if not shape.causal:
        q = Nq * d if order == "row" else cdiv(Nkv, Bc) * Nq * d
        return IOCount(q + cdiv(Nq, Br) * Nkv * d, Nq * Nkv)
    s = _sums(Nq, Nkv, Br, Bc, shape.offset)
    q = s.size_seen * d if order == "row" else s.size_count * d
    return IOCount(q + s.width * d, s.size_width)


def _phase2(shape: Shape, Br2: int, Bd2: int) -> IOCount:
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    Td = cdiv(d, Bd2)
    if not shape.causal:
        return IOCount(Td * Nq * Nkv + cdiv(Nq, Br2) * Nkv * d, Nq * d)
    s = _sums(Nq, Nkv, Br2, 1, shape.offset)  # width-1 slices: w_i = hi_i
    return IOCount(Td * s.size_width + d * s.width, Nq * d)


def _max1(M: int, x: int) -> int:
    """The largest y with ``_fp1(·, x, y, "tile") = xy + min(x, y) + 1 <= M`` (symmetric)."""
    y = (M - 1 - x) // x  # y >= x
    return y if y >= x else (M - 1) // (x + 1)  # else y < x


def _cols2(M: int, a: int) -> int:
    """The largest c with ``_fp2(a, c) <= M``."""
    c = (M - 1 - 3 * a) // a  # c >= a
    return c if c >= a else (M - 1 - 2 * a) // (a + 1)  # else c < a


def _rows2(M: int, c: int) -> int:
    """The largest a with ``_fp2(a, c) <= M``."""
    a = (M - 1 - c) // (c + 2)  # a > c
    return a if a > c else min(c, (M - 1) // (c + 3))  # else a <= c


def _pairs(X: int, Y: int, M: int, ymax: Callable[[int], int],
           xmax: Callable[[int], int]) -> set[tuple[int, int]]:
    """(x, y) pairs worth scoring, x in [1, X] and y in [1, Y]: for each x on a geometric ladder
    the largest y that fits (``ymax``), and for each y on a ladder the largest x (``xmax``), each
    also snapped down to the least size with as many blocks.  A side below a quarter of
    min(X, Y, √M) is skipped (the count falls with 1/x + 1/y at x·y ≈ M: such a tile is never
    the least, and the other pass reaches the clamped sides).  O(ladder) = O(log M)."""
    out: set[tuple[int, int]] = set()
    floor = min(X, Y, math.isqrt(M)) // 4
    for x in _ladder(X, M):
        y = min(Y, ymax(x))
        if min(x, y) >= max(1, floor):
            out.update((x, v) for v in (y, cdiv(Y, cdiv(Y, y))))
    for y in _ladder(Y, M):
        x = min(X, xmax(y))
        if min(x, y) >= max(1, floor):
            out.update((v, y) for v in (x, cdiv(X, cdiv(X, x))))
    return out


def _rows(shape: Shape, amax: int) -> set[int]:
    """Row-block sizes up to ``amax`` worth scoring besides the ladder: the fewest blocks and a
    few more, and with a mask the sizes whose blocks meet the diagonal where it enters (the z
    rows that see no key, z/2, z/3, z/4: a block then holds no row that sees nothing)."""
    if amax < 1:
        return set()
    Nq = shape.Nq
    t0 = cdiv(Nq, amax)
    out = {cdiv(Nq, t) for t in range(t0, min(Nq, t0 + 3) + 1)}
    if shape.causal:
        z = max(0, min(Nq, -shape.offset))
        out |= {z // k for k in range(1, 5) if 1 <= z // k <= amax}
    return out


class StreamTiling(Algorithm[StreamTilingTiling]):
    name = "stream_tiling"
    summary = ("square tiling with word streaming (Smith & van de Geijn): raw scores written once, "
               "the softmax formed online in P·V; least footprint per tile")
    Tiling = StreamTilingTiling

    def footprint(self, shape: Shape, tiling: StreamTilingTiling) -> int:
        t = tiling
        a, b = min(t.Br, shape.Nq), min(t.Bc, shape.Nkv)
        a2, c = min(t.Br2, shape.Nq), min(t.Bd2, shape.d)
        return max(_fp1(shape.d, a, b, t.order), _fp2(a2, c))

    def min_M(self, shape: Shape) -> int:
        return _fp2(1, 1)

    def validate_tiling(self, shape: Shape, tiling: StreamTilingTiling) -> None:
        super().validate_tiling(shape, tiling)
        if tiling.order not in ORDERS:
            raise ParameterError(f"tiling.order must be one of {ORDERS}, got {tiling.order!r}",
                                 param="tiling")

    def steps(self, shape: Shape, tiling: StreamTilingTiling) -> int:
        t = tiling
        return (cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc)
                + cdiv(shape.Nq, t.Br2) * cdiv(shape.d, t.Bd2))

    def _predict(self, shape: Shape, tiling: StreamTilingTiling) -> IOCount:
        t = tiling
        return _phase1(shape, t.Br, t.Bc, t.order) + _phase2(shape, t.Br2, t.Bd2)

    # ------------------------------------------------------------------ tilings
    @staticmethod
    def _best(cands: Iterable[tuple[int, ...]], count: Callable[[tuple[int, ...]], int],
              steps: Callable[[tuple[int, ...]], int]) -> list[tuple[int, ...]]:
        """The _OFFER best of ``cands`` by (exact count, steps)."""
        return sorted(set(cands), key=lambda c: (count(c), steps(c), c))[:_OFFER]

    def _phase1_candidates(self, shape: Shape, M: int) -> list[tuple[int, ...]]:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        cands: list[tuple[int, ...]] = [
            (a, b, 0) for a, b in _pairs(Nq, Nkv, M, functools.partial(_max1, M),
                                         functools.partial(_max1, M))]
        for a in _rows(shape, min(Nq, (M - 1) // (d + 1))):  # order "row": a·d + a·b + 1 <= M
            cands += [(a, 1, 1), (a, min(Nkv, (M - 1 - a * d) // a), 1)]
        if shape.causal:  # row blocks that meet the diagonal where it enters
            cands += [(a, min(Nkv, _max1(M, a)), 0) for a in _rows(shape, Nq) if _max1(M, a) >= 1]
        return self._best(cands, lambda c: _phase1(shape, c[0], c[1], ORDERS[c[2]]).total,
                          lambda c: cdiv(Nq, c[0]) * cdiv(Nkv, c[1]))

    def _phase2_candidates(self, shape: Shape, M: int) -> list[tuple[int, ...]]:
        d, Nq = shape.d, shape.Nq
        cands = _pairs(Nq, d, M, functools.partial(_cols2, M), functools.partial(_rows2, M))
        if shape.causal:
            cands |= {(a, min(d, _cols2(M, a))) for a in _rows(shape, Nq) if _cols2(M, a) >= 1}
        return self._best(cands, lambda c: _phase2(shape, c[0], c[1]).total,
                          lambda c: cdiv(Nq, c[0]) * cdiv(d, c[1]))

    def candidate_tilings(self, shape: Shape, M: int) -> list[StreamTilingTiling]:
        """The best few of each phase (scored by themselves: the phases are not coupled),
        combined; empty when M < min_M."""
        if M < self.min_M(shape):
            return []
        p2 = self._phase2_candidates(shape, M)
        return [StreamTilingTiling(br, bc, br2, bd2, ORDERS[o])
                for br, bc, o in self._phase1_candidates(shape, M) for br2, bd2 in p2]

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: StreamTilingTiling, scale: float) -> None:
        A = mem.scratch("A", (shape.Nq, shape.Nkv))  # the raw (scaled, masked) scores
        self._scores(mem, Q, K, A, shape, tiling, scale)
        self._outputs(mem, A, V, O, shape, tiling)

    def _scores(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, A: SlowArray,
                shape: Shape, t: StreamTilingTiling, scale: float) -> None:
        d = shape.d
        band = masks.Band.queries(shape) if shape.causal else None
        hold_q = min(t.Br, shape.Nq) <= min(t.Bc, shape.Nkv)
        for ib in mem.blocks(shape.Nq, t.Br, band=band):
            hi = kv_visible_hi(shape, ib.stop)
            Qi = mem.load(Q, ib, label="Q_i") if (t.order == "row" and hi > 0) else None
            for jb in mem.blocks(shape.Nkv, t.Bc, hi=hi, band=band):
                S = mem.alloc((ib.size, jb.size), 0.0, label="S_ij")
                if Qi is not None:
                    for kc in mem.blocks(jb.size, 1):
                        for lb in mem.blocks(d, 1):
                            w = mem.load(K, jb.start + kc.start, lb, label="k_cl")
                            mem.compute(_outer(kc.start, lb.start, scale, "q"), S, Qi, w,
                                        writes=1)
                            mem.free(w)
                elif hold_q:  # a Q column held, the K words of the column streamed
                    for lb in mem.blocks(d, 1):
                        q = mem.load(Q, ib, lb, label="Q_il")
                        for kc in mem.blocks(jb.size, 1):
                            w = mem.load(K, jb.start + kc.start, lb, label="k_cl")
                            mem.compute(_outer(kc.start, 0, scale, "q"), S, q, w, writes=1)
                            mem.free(w)
                        mem.free(q)
                else:  # a K column held, the Q words streamed
                    for lb in mem.blocks(d, 1):
                        k = mem.load(K, jb, lb, label="K_jl")
                        for rc in mem.blocks(ib.size, 1):
                            w = mem.load(Q, ib.start + rc.start, lb, label="q_rl")
                            mem.compute(_outer(rc.start, 0, scale, "k"), S, k, w, writes=1)
                            mem.free(w)
                        mem.free(k)
                K_.mask_tile(mem, S, shape, ib, jb)
                mem.store(S, A, ib, jb)
                mem.free(S)
            if Qi is not None:
                mem.free(Qi)

    def _outputs(self, mem: TwoLevelMemory, A: SlowArray, V: SlowArray, O: SlowArray,
                 shape: Shape, t: StreamTilingTiling) -> None:
        band = masks.Band.queries(shape) if shape.causal else None
        hold_v = min(t.Bd2, shape.d) <= min(t.Br2, shape.Nq)
        for ib in mem.blocks(shape.Nq, t.Br2, band=band):
            hi = kv_visible_hi(shape, ib.stop)
            for db in mem.blocks(shape.d, t.Bd2):
                Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
                if hi == 0:  # no row of the block sees a key: its output is 0
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc)
                    continue
                m = mem.alloc((ib.size,), -np.inf, label="m_i")
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                for kb in mem.blocks(shape.Nkv, 1, hi=hi, band=band):
                    if hold_v:
                        self._stream_scores(mem, A, V, Oc, m, l, ib, kb, db, shape)
                    else:
                        self._stream_values(mem, A, V, Oc, m, l, ib, kb, db, shape)
                mem.compute(K_.normalise_rows, Oc, l, writes=1)
                mem.store(Oc, O, ib, db)
                mem.free(Oc, m, l)

    @staticmethod
    def _stream_scores(mem: TwoLevelMemory, A: SlowArray, V: SlowArray, Oc: FastTile,
                       m: FastTile, l: FastTile, ib: Block, kb: Block, db: Block,
                       shape: Shape) -> None:
        """A V row chunk held, the block's scores of key kb streamed one word at a time."""
        v = mem.load(V, kb, db, label="V_kc")
        for rc in mem.blocks(ib.size, 1):
            w = mem.load(A, ib.start + rc.start, kb, label="a_rk")
            mem.compute(_row_step(shape, ib.start, rc.start, kb.start), Oc, m, l, w, v,
                        writes=4)
            mem.free(w)
        mem.free(v)

    @staticmethod
    def _stream_values(mem: TwoLevelMemory, A: SlowArray, V: SlowArray, Oc: FastTile,
                       m: FastTile, l: FastTile, ib: Block, kb: Block, db: Block,
                       shape: Shape) -> None:
        """The block's score column of key kb held, the V words of the chunk streamed."""
        s = mem.load(A, ib, kb, label="A_ik")
        mem.compute(_column_step(shape, ib.start, kb.start), s, m, l, Oc, writes=4)
        for cc in mem.blocks(db.size, 1):
            w = mem.load(V, kb, db.start + cc.start, label="v_ku")
            mem.compute(_add_column(cc.start), Oc, s, w, writes=1)
            mem.free(w)
        mem.free(s)


# ---------------------------------------------------------------------- word arithmetic
def _outer(col: int, qcol: int, scale: float, held: str) -> Callable[..., None]:
    """One streamed word into the score tile: ``held="q"``: S[:, col] += scale·q[:, qcol]·w
    (q a held Q column, or Q_i with qcol its column); ``"k"``: S[col, :] += scale·k·w (k a held
    K column, w a Q word)."""
    def fn(S: np.ndarray, x: np.ndarray, w: np.ndarray) -> None:
        if held == "q":
            S[:, col] += scale * x[:, qcol] * w[0, 0]
        else:
            S[col, :] += scale * x[:, 0] * w[0, 0]
    return fn


def _column_step(shape: Shape, r0: int, k: int) -> Callable[..., None]:
    """The online-softmax step of a score column (q_stationary_min's, on raw scores: masked rows
    by position, whatever the word holds); the column becomes the weights."""
    step = _key_step(shape, r0, k)

    def fn(s: np.ndarray, m: np.ndarray, l: np.ndarray, O: np.ndarray) -> None:
        s2 = s[:, 0]
        step(s2, m, l, O)
        s[:, 0] = s2
    return fn


def _add_column(u: int) -> Callable[..., None]:
    """O[:, u] += p·w: the weight column p (held) times one streamed V word."""
    def fn(O: np.ndarray, p: np.ndarray, w: np.ndarray) -> None:
        O[:, u] += p[:, 0] * w[0, 0]
    return fn


def _row_step(shape: Shape, r0: int, r: int, k: int) -> Callable[..., None]:
    """Row r0 + r takes score A[r0 + r, k] (the word w): its online-softmax step, then
    O[r] += p·v (v the held V row chunk)."""
    step = _key_step(shape, r0 + r, k)

    def fn(O: np.ndarray, m: np.ndarray, l: np.ndarray, w: np.ndarray, v: np.ndarray) -> None:
        s = w.reshape(1).copy()  # a register
        step(s, m[r:r + 1], l[r:r + 1], O[r:r + 1])
        O[r] += s[0] * v[0]
    return fn


ALGORITHM = StreamTiling()
