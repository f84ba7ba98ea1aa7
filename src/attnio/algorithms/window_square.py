"""Square tiling over the band: Saha & Ye's small-cache schedule (:mod:`.square_tiling`) for any
mask, sliding windows included, touching only the tiles the mask leaves visible.

For M < d² the score matrix is worth writing once: Phase 1 forms the scores tile by tile as a
blocked matmul over slices of the head dimension and writes them; Phase 2 multiplies them by V,
another blocked matmul.  Under a window W a query block sees a band of about W + Br keys, so both
phases walk only the key blocks that meet that band: the count is linear in N for a fixed W
(about ``4·N·W·d/√M + 2·N·W`` words), where the unwindowed schedules pay for the whole causal
triangle or stream the band once per query block at FlashAttention's ``N·W·d²/M``.

Geometry.  Query block i = [s_i, e_i) (r_i rows) sees the keys ``[lo_i, hi_i) = kv_range``:
``lo_i = clip(s_i + off - W + 1, 0, Nkv)`` (0 without a window), ``hi_i = max(lo_i,
clip(e_i + off, 0, Nkv))`` (Nkv unmasked), ``off`` the diagonal's offset (Nkv - Nq bottom-right,
0 top-left).  It meets ``n_i(S) = (hi_i-1)//S - lo_i//S + 1`` key blocks of size S, of total width
``w_i(S) = min(Nkv, ((hi_i-1)//S + 1)·S) - (lo_i//S)·S`` (both 0 when ``hi_i <= lo_i``):
:func:`attnio.core.masks.meet`.

Schedule (the stable "scores spill" of :mod:`.square_tiling`: the raw scores are written and
Phase 2 forms ``exp(S - g_i)``, g_i the row's log-sum-exp, so no maxima are moved)::

    Phase 1  for each query block i (Br rows):               m_i = -inf, l_i = 0 resident
                 order "row": if block i sees a key, load Q_i (r_i x d)
                 for each key block j (Bc keys) meeting [lo_i, hi_i):
                     S_ij = 0
                     for each slice l of the head dimension (Bd wide):
                         load K[j, l]  (order "tile": and Q[i, l]);  S_ij += scale·Q[i, l] K[j, l]^T
                     mask S_ij (causal and window);  fold S_ij into (m_i, l_i);  write S_ij
                 write g_i = m_i + log l_i  (r_i words, every block)
    Phase 2  for each query block i (Br2 rows), each output slice c (Bd2 columns):
                 O_ic = 0
                 if block i sees a key:
                     load g_i
                     for each key slice k (Bk2 keys) meeting [lo_i, hi_i):
                         load S[i, k], V[k, c];  O_ic += exp(S[i, k] - g_i) V[k, c]  (masked: 0)
                 write O_ic

Every visible score of a row of block i lies in [lo_i, hi_i), so Phase 1 writes it and Phase 2
reads it back; the entries of a tile outside the mask are never written and are zeroed in fast
memory after the load.  In slow memory the scores are a ring of C columns, key c in column
c mod C (:func:`ring_width`: C >= the widest run of keys a Phase-1 block writes, a multiple of Bc
and Bk2, or Nkv): Nq·C words, about Nq·(W + Br + Bc) under a window, so compute mode grows
linearly in N too (the counts do not depend on the layout).

Closed form (one head; the sums over blocks are :func:`attnio.core.masks.query_block_sums`,
O(log N)).  With the Phase-1 blocks (Br rows, key blocks of Bc), ``seen_i = [hi_i > lo_i]``::

    Phase 1 reads   order "tile": d·Σ_i r_i·n_i(Bc) + d·Σ_i w_i(Bc)     (Q per tile, K per key block)
                    order "row":  d·Σ_i r_i·seen_i  + d·Σ_i w_i(Bc)     (Q_i once)
    Phase 1 writes  Σ_i r_i·w_i(Bc) + Nq                                  (the scores; g)

and with the Phase-2 blocks (Br2 rows, key slices of Bk2), ``T_d = ⌈d/Bd2⌉``::

    Phase 2 reads   T_d·Σ_i r_i·seen_i + T_d·Σ_i r_i·w_i(Bk2) + d·Σ_i w_i(Bk2)   (g; S; V)
    Phase 2 writes  Nq·d

(K[j, l] over the slices l is the key block's w·d words; Q[i, l] over l is r_i·d words per key
block; V[k, c] over the slices c is the key slice's width times d.)  Without a mask the sums are
those of the full grid and the count is :mod:`.square_tiling`'s with ``spill="scores"``, word for
word (a test holds the two together).  For a window away from the ends ``w_i(S) <= W + Br + S - 1``
(a multiple of S minus the alignment), so with Br = Bc = Bd = √(M/4)-ish tiles the count is about
``4·N·W·d/√M + 2·N·W + 2·N·d``: linear in N for a fixed W.

Fast memory.  Phase 1: ``Br·Bc + Bd·(Br + Bc) + 2·Br`` (order "tile": S, a Q and a K slice, m
and l) or ``Br·d + Br·Bc + Bc·Bd + 2·Br`` (order "row": Q_i resident); Phase 2:
``Br2·Bd2 + Bk2·(Br2 + Bd2) + Br2`` (O, an S and a V tile, g).  Sides are clamped to Nq, Nkv and
d; the footprint is the larger phase's.  The least workable M is 6 (every side 1).

Tilings.  The two phases share nothing but M (no Phase-1 side enters the Phase-2 count and none
is tied to another), so the search minimises each phase on its own: Phase 1 over Br and Bc on √2
ladders (Bd the widest slice that fits: it changes only the steps), Phase 2 over Br2 and Bd2 on
ladders with the key slices Bk2 in powers of two up to the widest that fits (a narrow slice hugs
the band, a wide one frees nothing for the other tiles).  The ladders are ranked by an O(1)
estimate (:class:`_Approx`: a block of B rows sees about v + c·(B − 1) keys), the best dozen
counted exactly, then their neighbours at 2^(±1/4); the candidates are the best few of each phase,
paired.  The module declares the phases, the estimate and the cut
(:meth:`WindowSquare._phases`); the mapper searches them
(:func:`attnio.algorithms.mapper.phase_best`).  A heuristic, as every search here: on 72 shapes
(N up to 10⁹, d = 64 and 128, M = 2¹⁰..2¹⁶, windows 512, 4096 and none) its totals are within
0.16% of scoring every size of 2^(1/4) ladders exactly, at a twentieth of the CPU (about 4 ms a
search).

Bulk counting.  Both phases are masked loop pairs (``band=``): the simulator runs each run of
alike query blocks once with the run's total visits, so a count at N = 10⁹ walks a handful of
blocks (``tests/algorithms/test_window_square.py``).

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((64, 16)) for _ in range(3))
>>> r = attnio.run("window_square", Q, K, V, M=120, causal=True, window=9)
>>> ref = attnio.reference.attention(Q, K, V, causal=True, window=9)
>>> bool(np.abs(r.output - ref).max() < 1e-12), r.io.peak <= 120
(True, True)
>>> from attnio.core.workload import Shape
>>> ALGORITHM.predicted_io(Shape.make(64, 16, causal=True, window=9), 120,
...                        tiling=r.tiling).total == r.io.total
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from . import mapper
from .base import Algorithm
from .protocol import Phase, Phases

__all__ = ["ALGORITHM", "WindowSquare", "WindowSquareTiling"]

ORDERS = ("tile", "row")
_KEEP = 3  # the best Phase-1 and Phase-2 choices paired into candidates (Phase.offer)
_EXACT = 12  # the sizes of least estimated count (_Approx) counted exactly (Phase.keep: a cut)


@dataclass(frozen=True)
class WindowSquareTiling:
    """Phase 1: score tiles Br x Bc, head-dimension slices Bd, ``order`` "tile" (Q per tile) or
    "row" (Q_i resident); Phase 2: output tiles Br2 x Bd2, key slices Bk2."""

    Br: int
    Bc: int
    Bd: int
    Br2: int
    Bk2: int
    Bd2: int
    order: str = "tile"


# ---------------------------------------------------------------------- sizes and sums
def _fp1(d: int, br: int, bc: int, bd: int, order: str) -> int:
    if order == "row":
        return br * d + br * bc + bc * bd + 2 * br
    return br * bc + bd * (br + bc) + 2 * br


def _fp2(br2: int, bk2: int, bd2: int) -> int:
    return br2 * bd2 + bk2 * (br2 + bd2) + br2


@functools.lru_cache(maxsize=4096)
def _sums(shape: Shape, B: int, S: int) -> masks.BlockSums:
    """Σ over the query blocks of B rows of seen_i, n_i(S), w_i(S) and their row-weighted forms
    (O(log N); cached: the search scores the same (B, S) for both orders)."""
    return masks.query_block_sums(shape.Nq, shape.Nkv, B, S, shape.offset,
                                  shape.window if shape.causal else None, shape.causal)


def _phase1(shape: Shape, br: int, bc: int, order: str) -> IOCount:
    s, d = _sums(shape, br, bc), shape.d
    q = s.size_seen if order == "row" else s.size_count
    return IOCount(d * q + d * s.width, s.size_width + shape.Nq)


def _phase2(shape: Shape, br2: int, bk2: int, bd2: int) -> IOCount:
    s, d = _sums(shape, br2, bk2), shape.d
    td = cdiv(d, bd2)
    return IOCount(td * s.size_seen + td * s.size_width + d * s.width, shape.Nq * d)


@functools.lru_cache(maxsize=1024)
def _ladder(total: int, vmax: int) -> tuple[int, ...]:
    """Sizes in [1, min(total, vmax)] worth trying: a √2 geometric spread and the largest, each
    also snapped down to the least size with as many blocks of ``total``."""
    vmax = min(total, vmax)
    if vmax < 1:
        return ()
    vals = {vmax, cdiv(total, cdiv(total, vmax))}
    b = 1.0
    while b <= vmax:
        v = int(b)
        vals.update({v, cdiv(total, cdiv(total, v))})
        b *= 2 ** 0.5
    return tuple(sorted(v for v in vals if 1 <= v <= vmax))


def _near(total: int, v: int, vmax: int) -> set[int]:
    """The refinement's sizes around v: v·2^(±1/4), each also snapped (as :func:`_ladder`)."""
    out = set()
    for x in (int(v * 2 ** -0.25), v, int(v * 2 ** 0.25) + 1):
        x = min(x, vmax, total)
        if x >= 1:
            out.update({x, cdiv(total, cdiv(total, x))})
    return out


class _Approx:
    """The search's O(1) estimate of a phase's count, to rank the ladders' sizes before the
    exact sums are taken for the best few: a block of B rows sees a key range about
    ``v + c·(B - 1)`` wide (v the mean keys a row sees, ``masks.row_counts``; c = 1 under a
    window narrower than the keys, 1/2 causal without one, 0 unmasked), met by about
    ``(w - 1)/S + 1`` blocks of S keys of width ``w - 1 + S``."""

    def __init__(self, shape: Shape) -> None:
        self.Nq, self.Nkv, self.d = shape.Nq, shape.Nkv, shape.d
        self.v = max(1.0, masks.row_counts(shape).pairs / shape.Nq)
        if not shape.causal:
            self.c = 0.0
        elif shape.window is not None and shape.window < shape.Nkv:
            self.c = 1.0
        else:
            self.c = 0.5

    def meet(self, B: int, S: int) -> tuple[float, float]:
        """(blocks of S keys, their width) met by one block of B rows, estimated."""
        w = min(self.Nkv, self.v + self.c * (B - 1))
        return min((w - 1) / S + 1, cdiv(self.Nkv, S)), min(self.Nkv, w - 1 + S)

    def phase1(self, br: int, bc: int, order: str) -> float:
        n, cov = self.meet(br, bc)
        q = self.Nq if order == "row" else self.Nq * n
        return self.d * q + self.d * (self.Nq / br) * cov + self.Nq * cov

    def phase2(self, br2: int, bk2: int, bd2: int) -> float:
        _, cov = self.meet(br2, bk2)
        td = cdiv(self.d, bd2)
        return td * self.Nq * (1 + cov) + self.d * (self.Nq / br2) * cov


def _band_width(shape: Shape) -> int:
    """The widest key range one query row sees (Nkv unmasked): a key side beyond the band's
    width plus the block's rows gains nothing."""
    if not shape.causal or shape.window is None:
        return shape.Nkv
    return min(shape.Nkv, shape.window)


def ring_width(shape: Shape, br: int, bc: int, bk2: int) -> int:
    """C, the columns of the slow score array: key c is stored in column c mod C.  Phase 1 writes,
    for a row of block i, the keys of the Bc blocks meeting [lo_i, hi_i), one interval of at most
    ``w = max_i w_i(Bc)`` keys (``masks.query_block_max_width``); with C >= w no two keys a row
    writes share a column, so every visible score Phase 2 reads back is its own (a column holding
    another key is outside the mask there, and zeroed).  C is rounded up to a multiple of Bc and
    Bk2, so a key block is one run of columns; when that reaches Nkv, C = Nkv (column = key)."""
    w = masks.query_block_max_width(shape.Nq, shape.Nkv, br, bc, shape.offset,
                                    shape.window if shape.causal else None, shape.causal)
    step = bc * bk2 // math.gcd(bc, bk2)
    C = cdiv(max(w, 1), step) * step
    return C if C < shape.Nkv else shape.Nkv


def _columns(kb: Block, C: int, Nkv: int) -> Block | slice:
    """Key block kb's columns in the score ring of C columns (:func:`ring_width`)."""
    if C >= Nkv:
        return kb
    c0 = kb.start % C
    return slice(c0, c0 + kb.size)


@dataclass(frozen=True)
class _Spilled:
    """The slow-memory scratch Phase 1 writes and Phase 2 reads: ``S``, the raw scores held in
    a ring of ``C`` columns a row, and ``g``, each row's log-sum-exp."""

    S: SlowArray
    g: SlowArray
    C: int


def _combine(p1: tuple[int, int, int, str], p2: tuple[int, int, int]) -> WindowSquareTiling:
    """The tiling of a Phase-1 choice (Br, Bc, Bd, order) and a Phase-2 one (Br2, Bk2, Bd2)."""
    return WindowSquareTiling(*p1[:3], *p2, p1[3])


class WindowSquare(Algorithm[WindowSquareTiling]):
    name = "window_square"
    summary = ("square tiling over the band (any mask, sliding windows included): write the "
               "visible scores once, two blocked matmuls; linear in N for a fixed window")
    Tiling = WindowSquareTiling
    supports_window = True

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def _clamped(shape: Shape, t: WindowSquareTiling) -> tuple[int, ...]:
        return (min(t.Br, shape.Nq), min(t.Bc, shape.Nkv), min(t.Bd, shape.d),
                min(t.Br2, shape.Nq), min(t.Bk2, shape.Nkv), min(t.Bd2, shape.d))

    def footprint(self, shape: Shape, tiling: WindowSquareTiling) -> int:
        br, bc, bd, br2, bk2, bd2 = self._clamped(shape, tiling)
        return max(_fp1(shape.d, br, bc, bd, tiling.order), _fp2(br2, bk2, bd2))

    def min_M(self, shape: Shape) -> int:
        return self.footprint(shape, WindowSquareTiling(1, 1, 1, 1, 1, 1))

    def slow_workspace(self, shape: Shape, tiling: WindowSquareTiling) -> int:
        """Words of slow workspace a compute-mode run allocates: the scores, Nq rows of
        :func:`ring_width` columns, and g; the runner's memory estimate takes it (count mode
        allocates nothing)."""
        br, bc, _, _, bk2, _ = self._clamped(shape, tiling)
        return shape.Nq * ring_width(shape, br, bc, bk2) + shape.Nq

    def steps(self, shape: Shape, tiling: WindowSquareTiling) -> int:
        br, bc, bd, br2, bk2, bd2 = self._clamped(shape, tiling)
        s1, s2 = _sums(shape, br, bc), _sums(shape, br2, bk2)
        return s1.count * cdiv(shape.d, bd) + s2.count * cdiv(shape.d, bd2)

    def validate_tiling(self, shape: Shape, tiling: WindowSquareTiling) -> None:
        super().validate_tiling(shape, tiling)
        if tiling.order not in ORDERS:
            raise ParameterError(f"tiling.order must be one of {ORDERS}, got {tiling.order!r}",
                                 param="tiling")

    # ------------------------------------------------------------------ counts
    def _predict(self, shape: Shape, tiling: WindowSquareTiling) -> IOCount:
        """The module docstring's closed form (one head)."""
        br, bc, _, br2, bk2, bd2 = self._clamped(shape, tiling)
        return _phase1(shape, br, bc, tiling.order) + _phase2(shape, br2, bk2, bd2)

    # ------------------------------------------------------------------ tilings
    def _phases(self, shape: Shape, M: int, **options: Any) -> Phases[WindowSquareTiling]:
        """The two phases, for the mapper's per-phase search (:func:`.mapper.phase_best`: the
        phases share nothing but M, their counts and steps add up).  Each lists its sizes on √2
        ladders as a pool ranked by :class:`_Approx`'s O(1) estimate, cut to the
        :data:`_EXACT` of least estimate (a declared heuristic cut) and counted exactly; the
        neighbours at 2^(±1/4) of the :data:`_KEEP` best are counted too (the seed), and the
        :data:`_KEEP` best of each phase are paired.

        * Phase 1: (Br, Bc, order) with Br and Bc on the ladders, each made a choice (Br, Bc,
          Bd, order) with Bd the widest slice that fits (it changes only the steps);
        * Phase 2: (Br2, Bd2) on the ladders, ranked at Bk2 = 1 (the estimate grows with Bk2:
          a wider slice only widens the cover), each made the choices (Br2, Bk2, Bd2) of every
          key slice Bk2 in powers of two up to the widest that fits, and that widest."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        keys = _band_width(shape)
        est = _Approx(shape)

        def bc_most(br: int, order: str) -> int:
            if order == "row":
                return min((M - br * d - 2 * br) // (br + 1), keys + br)
            return min((M - 3 * br) // (br + 1), keys + br)

        def slice_of(br: int, bc: int, order: str) -> int:
            if order == "row":
                return min(d, (M - br * d - br * bc - 2 * br) // bc)
            return min(d, (M - br * bc - 2 * br) // (br + bc))

        def choices1(br: int, bc: int, order: str) -> tuple[tuple[int, int, int, str], ...]:
            bd = slice_of(br, bc, order)
            return ((br, bc, bd, order),) if bd >= 1 else ()

        most = {o: (M - 1) // ((d if o == "row" else 1) + 3) for o in ORDERS}  # Bc = Bd = 1

        def near1(best: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int, str]]:
            return [c for br0, bc0, _, order in best for br in _near(Nq, br0, most[order])
                    for bc in _near(Nkv, bc0, bc_most(br, order)) for c in choices1(br, bc, order)]

        phase1 = Phase(
            cost=lambda c: (_phase1(shape, c[0], c[1], c[3]).total,
                            _sums(shape, c[0], c[1]).count * cdiv(d, c[2])),
            footprint=lambda c: _fp1(d, *c),
            ranked=lambda: [(est.phase1(br, bc, order), (br, bc, order)) for order in ORDERS
                            for br in _ladder(Nq, most[order])
                            for bc in _ladder(Nkv, bc_most(br, order))
                            if slice_of(br, bc, order) >= 1],
            keep=_EXACT,
            expand=lambda r: choices1(*r), seed=near1, offer=_KEEP)

        def widest(bd2: int, br2: int) -> int:  # the widest key slice that fits (< 1: none)
            return min(Nkv, (M - br2 * bd2 - br2) // (br2 + bd2))

        def slices(bd2: int, br2: int) -> set[int]:
            kmax = widest(bd2, br2)
            return {k for k in (kmax, *(2 ** i for i in range(kmax.bit_length())))
                    if 1 <= k <= kmax}

        def br2_most(bd2: int) -> int:
            return (M - bd2) // (bd2 + 2)

        def near2(best: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
            return [(br2, bk2, bd2) for br0, _, bd0 in best
                    for bd2 in _near(d, bd0, (M - 2) // 3)
                    for br2 in _near(Nq, br0, br2_most(bd2)) for bk2 in slices(bd2, br2)]

        phase2 = Phase(
            cost=lambda c: (_phase2(shape, *c).total,
                            _sums(shape, c[0], c[1]).count * cdiv(d, c[2])),
            footprint=None,  # every key slice is one that fits (slices)
            ranked=lambda: [(est.phase2(br2, 1, bd2), (br2, bd2))
                            for bd2 in _ladder(d, (M - 2) // 3)
                            for br2 in _ladder(Nq, br2_most(bd2)) if widest(bd2, br2) >= 1],
            keep=_EXACT,
            expand=lambda r: [(r[0], bk2, r[1]) for bk2 in slices(r[1], r[0])],
            seed=near2, offer=_KEEP)
        return Phases((phase1, phase2), _combine)

    def candidate_tilings(self, shape: Shape, M: int) -> list[WindowSquareTiling]:
        """The best few Phase-1 choices paired with the best few Phase-2 ones (:meth:`_phases`,
        searched by the mapper; the phases are independent but for M: their least counts add
        up to the least total)."""
        if mapper.needs_M(self, shape, M) is not None:
            return []
        return mapper.phase_tilings(self, shape, M)

    def covered_by(self, shape: Shape) -> str | None:
        """Without a window every block meets the band exactly as in square_tiling, whose count
        (``spill="scores"``) this equals word for word: the planner leaves this workload to
        square_tiling (the search here would only repeat that one's, at milliseconds a plan).
        It still runs when asked; with any window (square_tiling takes none) it is planned."""
        return "square_tiling" if shape.window is None else None

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: WindowSquareTiling, scale: float) -> None:
        br, bc, _, _, bk2, _ = self._clamped(shape, tiling)
        C = ring_width(shape, br, bc, bk2)
        S = mem.scratch("S_band", (shape.Nq, C))  # the visible scores, written once (a ring)
        g = mem.scratch("g", (shape.Nq,))  # each row's log-sum-exp
        spilled = _Spilled(S, g, C)
        self._phase1(mem, Q, K, spilled, shape, tiling, scale)
        self._phase2(mem, V, spilled, O, shape, tiling)

    @staticmethod
    def _band(shape: Shape) -> masks.Band | None:
        return masks.Band.queries(shape) if shape.causal else None

    def _phase1(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, spilled: _Spilled,
                shape: Shape, t: WindowSquareTiling, scale: float) -> None:
        S, g, C = spilled.S, spilled.g, spilled.C
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        br, bc, bd = min(t.Br, Nq), min(t.Bc, Nkv), min(t.Bd, d)
        band = self._band(shape)
        for ib in mem.blocks(Nq, br, band=band):
            lo, hi = kv_range(shape, ib.start, ib.stop)
            m = mem.alloc((ib.size,), -np.inf, label="m_i")
            l = mem.alloc((ib.size,), 0.0, label="l_i")
            Qi = mem.load(Q, ib, label="Q_i") if (t.order == "row" and hi > lo) else None
            for jb in mem.blocks(Nkv, bc, lo=lo, hi=hi, band=band):
                St = mem.alloc((ib.size, jb.size), 0.0, label="S_ij")
                for lb in mem.blocks(d, bd):
                    Kt = mem.load(K, jb, lb, label="K_jl")
                    if Qi is None:
                        Qt = mem.load(Q, ib, lb, label="Q_il")
                        mem.matmul(St, Qt, Kt, transpose_b=True, alpha=scale, accumulate=True)
                        mem.free(Qt)
                    else:
                        mem.compute(_acc_slice(lb.start, lb.stop, scale), St, Qi, Kt, writes=1)
                    mem.free(Kt)
                if K_.tile_needs_mask(shape, ib.start, jb.stop, ib.stop, jb.start):
                    mem.compute(_mask(shape, ib.start, jb.start), St, writes=1)
                mem.compute(_fold_scores, St, m, l, writes=2)
                mem.store(St, S, ib, _columns(jb, C, Nkv))
                mem.free(St)
            if Qi is not None:
                mem.free(Qi)
            mem.compute(_log_sum_exp, m, l, writes=1)  # g = m + log l, formed in m
            mem.store(m, g, ib)
            mem.free(m, l)

    def _phase2(self, mem: TwoLevelMemory, V: SlowArray, spilled: _Spilled, O: SlowArray,
                shape: Shape, t: WindowSquareTiling) -> None:
        S, g, C = spilled.S, spilled.g, spilled.C
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        br2, bk2, bd2 = min(t.Br2, Nq), min(t.Bk2, Nkv), min(t.Bd2, d)
        band = self._band(shape)
        for ib in mem.blocks(Nq, br2, band=band):
            lo, hi = kv_range(shape, ib.start, ib.stop)
            for db in mem.blocks(d, bd2):
                Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
                if hi > lo:
                    gi = mem.load(g, ib, label="g_i")
                    for kb in mem.blocks(Nkv, bk2, lo=lo, hi=hi, band=band):
                        At = mem.load(S, ib, _columns(kb, C, Nkv), label="S_ik")
                        Vt = mem.load(V, kb, db, label="V_kc")
                        masked = K_.tile_needs_mask(shape, ib.start, kb.stop, ib.stop, kb.start)
                        mem.compute(_accumulate(shape, ib.start, kb.start, masked), Oc, At, Vt,
                                    gi, writes=2)
                        mem.free(At, Vt)
                    mem.free(gi)
                mem.store(Oc, O, ib, db)
                mem.free(Oc)


# ---------------------------------------------------------------------- tile arithmetic
def _acc_slice(l0: int, l1: int, scale: float) -> Callable[..., None]:
    def fn(s: np.ndarray, q: np.ndarray, k: np.ndarray) -> None:
        s += scale * (q[:, l0:l1] @ k.T)
    return fn


def _visible(shape: Shape, r0: int, c0: int, rows: int, cols: int) -> np.ndarray:
    """The tile's entries the mask leaves visible (causal and window)."""
    r = np.arange(r0, r0 + rows)[:, None] + shape.offset
    c = np.arange(c0, c0 + cols)[None, :]
    vis = c <= r
    if shape.window is not None:
        vis &= c > r - shape.window
    return vis


def _mask(shape: Shape, r0: int, c0: int) -> Callable[..., None]:
    def fn(s: np.ndarray) -> None:
        s[~_visible(shape, r0, c0, *s.shape)] = -np.inf
    return fn


def _fold_scores(s: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
    """(m, l) <- the running row max and the sum of exp(s - m) with the tile folded in."""
    mn = np.maximum(m, s.max(axis=1))
    ms = K_.safe_max(mn)
    l *= np.exp(m - ms)
    l += np.exp(s - ms[:, None]).sum(axis=1)
    m[:] = mn


def _log_sum_exp(m: np.ndarray, l: np.ndarray) -> None:
    """m <- m + log l (+inf where the row saw no key, so its weights become 0)."""
    with np.errstate(divide="ignore"):
        m[:] = np.where(l > 0, K_.safe_max(m) + np.log(np.where(l > 0, l, 1.0)), np.inf)


def _accumulate(shape: Shape, r0: int, c0: int, masked: bool) -> Callable[..., None]:
    def fn(o: np.ndarray, a: np.ndarray, v: np.ndarray, g: np.ndarray) -> None:
        with np.errstate(invalid="ignore"):
            a -= g[:, None]
        np.exp(a, out=a)
        if masked:  # entries never written (outside the mask) are NaN: overwrite them
            a[~_visible(shape, r0, c0, *a.shape)] = 0.0
        o += a @ v
    return fn


ALGORITHM = WindowSquare()
