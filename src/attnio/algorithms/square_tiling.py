"""Square tiling (Saha & Ye, arXiv 2402.07443, Algorithm 1 "SquareTilingAttention", Theorem 3.5).

The small-cache algorithm (M < d²): it moves O(N²d/√M) words where FlashAttention moves
Θ(N²d²/M).  It gives up FlashAttention's trick of never writing the scores: it writes the N×N
matrix A = exp(S) once, and in exchange treats both products as I/O-optimal blocked matmuls.
(Source: the design notes' summary of Algorithm 1 and Theorem 3.5; the paper's full text could not
be read from here, so the counts below are *derived* from the schedule as implemented.)

Schedule (``order="tile"``, the paper's)::

    Phase 1  for each query block i (Br rows):                       # l_i resident
                 for each key block j (Bc rows) visible to block i:
                     S_ij = 0;  for each slice l of the head dimension (Bd wide):
                         load Q[i, l], K[j, l];  S_ij += scale · Q[i, l] K[j, l]^T
                     (mask)  A_ij = exp(S_ij);  l_i += rowsum A_ij;  write A_ij
                 write l_i
    Phase 2  for each query block i (Br2 rows), each output slice c (Bd2 columns):
                 O_ic = 0;  for each key slice k (Bk2 wide) visible to block i:
                     load A[i, k], V[k, c];  O_ic += A[i, k] V[k, c]
                 load l_i;  O_ic = diag(l_i)^-1 O_ic;  write O_ic

The paper uses one side B = ⌊√(M/4)⌋ for every tile (3B² + B ≤ M); ``tiling="paper"`` (or
``tiling=B``, an int) runs exactly that.  Here the two phases are two blocked matmuls with
their own tiles — Phase 1 is (Nq×d)·(d×Nkv), Phase 2 is (Nq×Nkv)·(Nkv×d) — and the default
``tiling="auto"`` picks the six sides and the Phase-1 loop order that minimise the closed form
under the capacity.  ``order="row"`` keeps the whole query block Q_i (Br×d) resident while the key
blocks stream past (Q read once, as FlashAttention does); it wins when M is within a small factor
of d², and cannot run when a query row does not fit.

Numerical stability.  The paper exponentiates without subtracting the row max: exp overflows for
logits above ~709 in float64 (~88 in float32).  That literal version is ``stable=False``; it checks
every tile it writes and raises :class:`ExpOverflowError` (never a silent NaN/inf, and never a
silently zero row when every weight underflows).  The default ``stable=True`` keeps a running row
max m_i (and a tile-max temporary) next to l_i, writes each block as ``A_ij = exp(S_ij − m_ij)``
with the running max m_ij it used, **writes m_ij** (Br words per tile, to an Nq×Tc array), and at
the row's end writes ``g_i = m_i + log l_i`` (the row's log-sum-exp, in place of l_i).  Phase 2
loads, per output tile and per Phase-1 key block, the Br2 words m_ij and rescales the A tiles by
``exp(m_ij − g_i)``, which also normalises them, so no final division is needed.  That requires
each Phase-2 key slice to lie inside one Phase-1 key block: ``Bc % Bk2 == 0`` (unless one key
block covers all keys).

Spilling the raw scores (``spill="scores"``, stable).  The per-tile maxima cost Br words written
per tile and read per output slice, and a third row vector; they exist only because the tiles hold
exp(S - m_ij) for a running m_ij.  Phase 1 may instead write the *raw* (scaled, masked) scores
S_ij and fold each tile into the running (m_i, l_i) without changing it; at the row's end it writes
``g_i = m_i + log l_i`` (formed in m_i's words).  Phase 2 loads g_i once per output tile and turns
each A tile into ``exp(S - g_i)`` — the softmax probabilities themselves, at most 1, no overflow
whatever the logits — before multiplying by V.  No maxima are written or read, no Bc/Bk2 coupling
(any Bk2), Phase 1 holds m and l (e = 2) and Phase 2 holds g (``Br2·Bd2 + Bk2·(Br2 + Bd2) +
Br2``).  Its count is the literal schedule's, word for word (g in place of l): the formulas below
with s = 0.  For the same sides it fits wherever the exp spill fits and moves fewer words, so the
search (the planner's candidates, ``tiling="auto"``) uses it; ``spill="exp"`` runs when asked.

Closed form (exact; checked by ``tests/algorithms/test_square_tiling.py``).  Phase-1 query blocks i have
``r_i`` rows and see keys ``[0, hi_i)`` (``hi_i = Nkv`` unmasked; bottom-right causal
``hi_i = clip(stop_i + Nkv − Nq, 0, Nkv)``); ``n_i = ⌈hi_i/Bc⌉`` key blocks of total width
``w_i = min(Nkv, n_i·Bc)``.  Phase-2 blocks i' likewise with Br2: ``n'_i = ⌈hi'/Bk2⌉`` key slices of
width ``w'_i``, ``c_i = ⌈hi'/Bc⌉`` Phase-1 key blocks; ``T_d = ⌈d/Bd2⌉``; s = 1 if stable with
``spill="exp"``, else 0::

    Phase 1 reads   Σ_{hi_i>0} (n_i·r_i·d + w_i·d)       order "tile" (Q and K per tile)
                    Σ_{hi_i>0} (r_i·d + w_i·d)           order "row"  (Q_i once)
    Phase 1 writes  Σ_i r_i·w_i + Nq + s·Σ_i n_i·r_i     (A; l or g; the per-tile maxima)
    Phase 2 reads   Σ_{hi'>0} (T_d·r_i + s·T_d·c_i·r_i + T_d·r_i·w'_i + w'_i·d)
    Phase 2 writes  Nq·d

Unmasked, Nq = Nkv = N, paper tiles (Br = Bc = Bd = Br2 = Bk2 = Bd2 = B, T = ⌈N/B⌉,
T_d = ⌈d/B⌉): ``2·T·N·d + N² + N`` (Phase 1) and ``T_d·N² + T_d·N + T·N·d + N·d`` (Phase 2), i.e.
about ``4N²d/√M + N²`` and ``4N²d/√M`` with B = √(M/4), matching the design notes' estimate.  The
stable variant adds ``N·T_c`` writes and ``T_d·T_c·N`` reads (T_c = ⌈N/Bc⌉).

Fast memory.  Phase 1: ``Br·Bc + Bd·(Br + Bc) + e·Br`` (order "tile") or
``Br·d + Br·Bc + Bc·Bd + e·Br`` (order "row"), e = 3 stable (m, l, temporary), 2 with
``spill="scores"`` (m, l) or 1 (l).  Phase 2:
``Br2·Bd2 + Bk2·(Br2 + Bd2) + 2·Br2`` stable (g and the loaded maxima; ``+ Br2`` with
``spill="scores"``: g only), literal
``max(Br2·Bd2 + Bk2·(Br2 + Bd2), Br2·Bd2 + Br2)`` (l is loaded after the loop).  Sides are clamped
to Nq, Nkv, d.  The least workable M is 6 (stable) or 4 (literal).

Causal masks skip every fully masked tile in both phases (its A block is never written; Phase 2
zeroes the masked entries of a partially visible tile after loading it).

Measured against FlashAttention: docs/small_cache.md (the crossover tables, regenerated by
``python benchmarks/bench_small_cache.py --write``; :mod:`attnio.experiments.crossover` computes
them and ``tests/experiments/test_crossover.py`` asserts their two ends).

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((50, 16)) for _ in range(3))
>>> r = attnio.run("square_tiling", Q, K, V, M=100)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V)).max() < 1e-12), r.io.peak <= 100
(True, True)
>>> ALGORITHM.cost(Shape.make(50, 16), r.tiling).io.total == r.io.total
True
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import masks
from ..core.checks import check_int
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import MAX_SIZE, Shape, cdiv, kv_visible_hi
from . import _kernels as K_
from . import _square_kernels as SK
from . import mapper
from ._square_kernels import ExpOverflowError
from .base import Algorithm
from .common import ladder
from .protocol import Families

__all__ = ["ALGORITHM", "ExpOverflowError", "SquareTiling", "SquareTilingTiling", "paper_side"]

ORDERS = ("tile", "row")
SPILLS = ("exp", "scores")

# the search's pieces: a Phase-1 choice (Br, Bc, Bd, order); a Phase-2 rung (Bd2, Br2, the key
# slices Bk2 to try); a Phase-1 choice with its exact Phase-1 count
_Phase1 = tuple[int, int, int, str]
_Rung = tuple[int, int, list[int]]
_Group = tuple[_Phase1, int]
_SIZE_FIELDS = ("Br", "Bc", "Bd", "Br2", "Bk2", "Bd2")


@dataclass(frozen=True)
class SquareTilingTiling:
    """Phase 1: S tiles Br×Bc, head-dimension slices Bd; Phase 2: O tiles Br2×Bd2, key slices Bk2.

    ``order``: Phase-1 loop order, "tile" (the paper's: each S tile finishes over the d slices)
    or "row" (Q_i stays resident across the key blocks).  ``stable``: subtract running row maxima
    (True) or exponentiate the raw scores as the paper does (False).  ``spill`` (stable only):
    "exp" writes exp(S - m_ij) and the per-tile maxima m_ij, "scores" writes the raw scores and
    Phase 2 forms exp(S - g_i) (no maxima moved).
    """

    Br: int
    Bc: int
    Bd: int
    Br2: int
    Bk2: int
    Bd2: int
    order: str = "tile"
    stable: bool = True
    spill: str = "exp"

    @classmethod
    def square(cls, B: int, *, stable: bool = True) -> SquareTilingTiling:
        """Every tile B×B, the paper's loop order."""
        return cls(B, B, B, B, B, B, "tile", stable)


def paper_side(M: int) -> int:
    """The paper's tile side B = ⌊√(M/4)⌋ (so 3B² + B ≤ M)."""
    return math.isqrt(M // 4)


def _maxima(stable: bool, spill: str) -> bool:
    """Whether the schedule writes (and Phase 2 reads) the per-tile maxima m_ij."""
    return stable and spill == "exp"


def _e1(stable: bool, spill: str = "exp") -> int:
    """Phase-1 row vectors: m, l and the tile-max temporary (exp spill), m and l (scores spill:
    g = m + log l is formed in m), or l (literal)."""
    if not stable:
        return 1
    return 3 if spill == "exp" else 2


def _fp1(d: int, br: int, bc: int, bd: int, order: str, stable: bool, spill: str = "exp") -> int:
    e = _e1(stable, spill)
    if order == "row":
        return br * d + br * bc + bc * bd + e * br
    return br * bc + bd * (br + bc) + e * br


def _fp2(br2: int, bk2: int, bd2: int, stable: bool, spill: str = "exp") -> int:
    if stable:
        return br2 * bd2 + bk2 * (br2 + bd2) + (2 if spill == "exp" else 1) * br2
    return max(br2 * bd2 + bk2 * (br2 + bd2), br2 * bd2 + br2)


@functools.lru_cache(maxsize=1024)
def _divisors(n: int) -> tuple[int, ...]:
    """The divisors of n >= 1, ascending, in O(sqrt(n))."""
    small, large, i = [], [], 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return tuple(small + large[::-1])


# ---------------------------------------------------------------------- closed forms
@functools.lru_cache(maxsize=8192)
def _covered(shape: Shape, B: int, S: int) -> masks.BlockSums:
    """Sums over the B-row blocks of ``n_i = ceil(hi_i/S)``, ``w_i = min(Nkv, n_i·S)`` (hi_i from
    the block's last row, no window; n_i = w_i = 0 where hi_i = 0): O(log N), cached because the
    candidate tilings the search scores repeat (B, S) pairs."""
    return masks.covered_sums(shape.Nq, shape.Nkv, B, S, shape.offset)


def _phase1_io(shape: Shape, Br: int, Bc: int, order: str, stable: bool,
               spill: str = "exp") -> tuple[int, int]:
    stable = _maxima(stable, spill)  # below: whether the per-tile maxima are written
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    if not shape.causal:
        Tr, Tc = cdiv(Nq, Br), cdiv(Nkv, Bc)
        q = Nq * d if order == "row" else Tc * Nq * d
        reads = q + Tr * Nkv * d
        writes = Nq * Nkv + Nq + (Tc * Nq if stable else 0)
        return reads, writes
    s = _covered(shape, Br, Bc)  # hi_i only (no window), O(log N)
    q = s.size_seen * d if order == "row" else s.size_count * d
    reads = q + s.width * d
    writes = s.size_width + Nq + (s.size_count if stable else 0)
    return reads, writes


def _phase1_lower(shape: Shape, maxima: bool) -> Callable[[_Phase1], float]:
    """A lower bound on ``sum(_phase1_io(shape, Br, Bc, order, ...))`` under a causal mask (no
    window) of a search candidate ``(Br, Bc, Bd, order)``; ``maxima``: :func:`_maxima` of the
    variant.  Row r sees ``k_r`` keys, ``P = Σ_r k_r``; a block's ``hi_i`` is its last row's, at
    least each of its rows', and ``w_i = min(Nkv, n_i·Bc) >= hi_i``, ``n_i >= hi_i/Bc``.  So
    ``size_width >= P``, ``size_count >= P/Bc``, ``width = Σ_i w_i >= Σ_i hi_i >= P/min(Br, Nq)``
    (a block holds at most that many rows) and ``size_seen >=`` the rows that see a key: the
    count is at least ``(q + P/min(Br, Nq))·d + P + Nq (+ P/Bc with the maxima)``, q the rows
    that see a key (order "row") or P/Bc (order "tile")."""
    Nq, d = shape.Nq, shape.d
    P = _covered(shape, 1, 1).size_width  # single rows against single keys: Σ_r k_r
    rows = _covered(shape, 1, 1).size_seen  # the rows that see a key

    def lower(c: _Phase1) -> float:
        per_key = P / c[1]
        q = rows if c[3] == "row" else per_key
        return (q + P / min(c[0], Nq)) * d + P + Nq + (per_key if maxima else 0)
    return lower


def _phase1_plain(shape: Shape, maxima: bool, c: _Phase1) -> int:
    """``sum(_phase1_io(shape.unmasked(), Br, Bc, order, ...))`` of a search candidate
    ``(Br, Bc, Bd, order)``, inline (the search ranks a few hundred); ``maxima``:
    :func:`_maxima` of the variant."""
    return _phase1_key(shape, maxima, c)[0]


def _phase1_key(shape: Shape, maxima: bool, c: _Phase1) -> tuple[int, int]:
    """(:func:`_phase1_plain`, the tiles Tr·Tc) of a search candidate: the search's ranking
    key of an unmasked Phase-1 choice."""
    Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
    tr, tc = -(-Nq // c[0]), -(-Nkv // c[1])
    return ((Nq * d if c[3] == "row" else tc * Nq * d) + tr * Nkv * d
            + Nq * Nkv + Nq + (tc * Nq if maxima else 0)), tr * tc


def _phase2_io(shape: Shape, Br2: int, Bk2: int, Bd2: int, Bc: int,
               stable: bool, spill: str = "exp") -> tuple[int, int]:
    stable = _maxima(stable, spill)  # below: whether the per-tile maxima are read
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    Td = cdiv(d, Bd2)
    if not shape.causal:
        Tr2 = cdiv(Nq, Br2)
        reads = Td * Nq + Td * Nq * Nkv + Tr2 * Nkv * d
        if stable:
            reads += Td * cdiv(Nkv, Bc) * Nq
        return reads, Nq * d
    s = _covered(shape, Br2, Bk2)  # O(log N)
    reads = Td * s.size_seen + Td * s.size_width + s.width * d
    if stable:
        reads += Td * _covered(shape, Br2, Bc).size_count
    return reads, Nq * d


@dataclass(frozen=True)
class _Spilled:
    """The slow-memory scratch Phase 1 writes and Phase 2 reads: ``A`` (exp(S), or the raw
    scores), ``rowvec`` (each row's log-sum-exp g, or its sum l) and ``mx`` (the tile maxima
    m_ij of the stable variant that spills exp(S); else None)."""

    A: SlowArray
    rowvec: SlowArray
    mx: SlowArray | None


class SquareTiling(Algorithm[SquareTilingTiling]):
    name = "square_tiling"
    summary = ("Saha & Ye square tiling: write exp(S) once, two blocked matmuls; "
               "O(N²d/√M), beats FlashAttention for M < d²")
    Tiling = SquareTilingTiling
    windowed_form = "window_square"  # its form for sliding windows (named in the refusal)

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def _clamped(shape: Shape, t: SquareTilingTiling) -> tuple[int, ...]:
        return (min(t.Br, shape.Nq), min(t.Bc, shape.Nkv), min(t.Bd, shape.d),
                min(t.Br2, shape.Nq), min(t.Bk2, shape.Nkv), min(t.Bd2, shape.d))

    def footprint(self, shape: Shape, tiling: SquareTilingTiling) -> int:
        br, bc, bd, br2, bk2, bd2 = self._clamped(shape, tiling)
        return max(_fp1(shape.d, br, bc, bd, tiling.order, tiling.stable, tiling.spill),
                   _fp2(br2, bk2, bd2, tiling.stable, tiling.spill))

    def min_M(self, shape: Shape, stable: bool = True) -> int:
        return self.footprint(shape, SquareTilingTiling.square(1, stable=stable))

    def steps(self, shape: Shape, tiling: SquareTilingTiling) -> int:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        p1 = cdiv(Nq, tiling.Br) * cdiv(Nkv, tiling.Bc) * cdiv(d, tiling.Bd)
        p2 = cdiv(Nq, tiling.Br2) * cdiv(d, tiling.Bd2) * cdiv(Nkv, tiling.Bk2)
        return p1 + p2

    def validate_tiling(self, shape: Shape, tiling: SquareTilingTiling) -> None:
        super().validate_tiling(shape, tiling)  # the six sizes, by the schema
        if tiling.order not in ORDERS:
            raise ParameterError(f"tiling.order must be one of {ORDERS}, got {tiling.order!r}")
        if not isinstance(tiling.stable, bool):
            raise ParameterError(f"tiling.stable must be True or False, got {tiling.stable!r}")
        bc, bk2 = min(tiling.Bc, shape.Nkv), min(tiling.Bk2, shape.Nkv)
        if tiling.spill not in SPILLS:
            raise ParameterError(f"tiling.spill must be one of {SPILLS}, got {tiling.spill!r}")
        if not tiling.stable and tiling.spill != "exp":
            raise ParameterError("tiling.spill='scores' needs stable=True (the literal schedule "
                                 "writes exp(S))")
        if _maxima(tiling.stable, tiling.spill) and bc < shape.Nkv and bc % bk2:
            raise ParameterError(
                f"tiling.Bk2={tiling.Bk2} must divide tiling.Bc={tiling.Bc} with stable=True (each "
                "Phase-2 key slice must lie inside one Phase-1 key block, whose max it rescales by)")

    # ------------------------------------------------------------------ counts
    def _predict(self, shape: Shape, tiling: SquareTilingTiling) -> IOCount:
        t = tiling
        r1, w1 = _phase1_io(shape, t.Br, t.Bc, t.order, t.stable, t.spill)
        r2, w2 = _phase2_io(shape, t.Br2, t.Bk2, t.Bd2, t.Bc, t.stable, t.spill)
        return IOCount(r1 + r2, w1 + w2)

    # ------------------------------------------------------------------ tilings
    def paper_tiling(self, shape: Any, M: int, stable: bool = True) -> SquareTilingTiling:
        """The paper's rule: every side B = ⌊√(M/4)⌋ (at least 1)."""
        return SquareTilingTiling.square(max(1, paper_side(M)), stable=stable)

    def _phase1_candidates(self, shape: Shape, M: int, stable: bool,
                           spill: str = "exp") -> list[_Phase1]:
        """(Br, Bc, Bd, order) per rung of Br: the widest Bc that fits with Bd = 1 and that Bc
        snapped down to as many key blocks, each with the widest Bd that fits (:func:`_fp1`,
        inline: the search lists a few hundred)."""
        d, Nq, Nkv, e = shape.d, shape.Nq, shape.Nkv, _e1(stable, spill)
        out: list[_Phase1] = []
        for order in ORDERS:
            row = order == "row"
            per_row = (d if row else 1) + 1 + e  # Bc = Bd = 1
            for br in ladder(Nq, (M - 1) // per_row):
                held = br * d + e * br if row else e * br  # Q_i (order "row") and the vectors
                bc = min(Nkv, (M - held - (0 if row else br)) // (br + 1))
                if bc < 1:
                    continue
                for c in {bc, -(-Nkv // -(-Nkv // bc))}:
                    if row:
                        bd = max(1, min(d, (M - held - br * c) // c))
                        fits = held + br * c + c * bd <= M
                    else:
                        bd = max(1, min(d, (M - br * c - held) // (br + c)))
                        fits = br * c + bd * (br + c) + held <= M
                    if fits:
                        out.append((br, c, bd, order))
        return out

    def _phase2_ladder(self, shape: Shape, M: int, stable: bool,
                       spill: str = "exp") -> list[_Rung]:
        """(bd2, br2, key-slice sizes to try) per head-dimension slice: what Phase 2's candidates
        are built from before the stable variant snaps Bk2 to a divisor of Bc.

        Unmasked, Bk2 is a dominated dimension: Phase 2's count does not depend on it, its steps
        ``Tr2·Td·⌈Nkv/Bk2⌉`` never rise with it and its footprint grows with it, so only the
        largest that fits, kmax, is listed (the stable exp spill: the largest divisor of Bc at
        most kmax, :meth:`_slices`, by :func:`~attnio.algorithms.mapper.dominated`).  With a
        mask the count depends on Bk2 (the slices cover each block's visible keys): kmax, 1 and
        the powers of two below."""
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        e = (2 if spill == "exp" else 1) if stable else 0
        out: list[_Rung] = []
        for bd2 in ladder(d, (M - 1 - e) // 2):
            br2 = (M - bd2) // (bd2 + 1 + e)
            br2 = min(Nq, br2)
            if br2 < 1:
                continue
            br2 = cdiv(Nq, cdiv(Nq, br2))
            kmax = min(Nkv, (M - br2 * bd2 - e * br2) // (br2 + bd2))
            if kmax < 1:
                continue
            if not shape.causal:
                ks = [kmax]
            else:  # the powers of two up to kmax (every one of them <= kmax), then kmax
                ks = [1 << i for i in range(kmax.bit_length())]
                if kmax & (kmax - 1):  # (kmax itself not a power of two)
                    ks.append(kmax)
            out.append((bd2, br2, ks))
        return out

    @staticmethod
    def _slices(shape: Shape, M: int, stable: bool, bc: int, rung: _Rung, snap: dict[int, int],
                spill: str = "exp") -> list[int]:
        """The key-slice sizes Bk2 of one Phase-2 choice ``rung`` (Bd2, Br2 and the sizes to
        try, as :meth:`_phase2_ladder` lists them), ascending: the stable variant snaps each to
        the largest divisor of Bc below it; those whose tiles fit in M."""
        bd2, br2, ks = rung
        bc_eff = min(bc, shape.Nkv)
        out = set()
        for k in ks:
            if _maxima(stable, spill) and bc_eff < shape.Nkv:
                if k not in snap:  # the largest divisor of Bc at most k (1 divides it)
                    snap[k] = mapper.dominated(_divisors(bc_eff), k) or 1
                k = snap[k]
            if _fp2(br2, k, bd2, stable, spill) <= M:
                out.add(k)
        return sorted(out)

    def _search(self, shape: Shape, M: int, stable: bool,
                spill: str = "exp") -> list[SquareTilingTiling]:
        """The (Phase 1 x Phase 2) combinations worth scoring (the best Phase-1 choices, each
        with every Phase-2 choice, then the paper's tiling, :meth:`_pieces`): :meth:`_families`'
        members, in the order (Phase-1 choice, Br2, Bk2, Bd2), the paper's last (the mapper
        searches them family by family)."""
        fams = self._combinations(shape, M, stable, spill)
        assert fams.order is not None
        every = [(fams.order(i, j, t), t) for i in range(len(fams.lower))
                 for j, t in enumerate(fams.members(i))]
        return [t for _, t in sorted(every, key=lambda c: c[0])]

    def _phase1_grid(self, shape: Shape, M: int, stable: bool,
                     spills: tuple[str, ...]) -> np.ndarray:
        """:meth:`_phase1_candidates` of each spill in ``spills``, merged: the distinct choices
        as int64 rows (Br, Bc, Bd, order index: 0 "row", 1 "tile"), ascending, i.e. the rows of
        ``sorted(set().union(*(self._phase1_candidates(shape, M, stable, s) for s in spills)))``
        (tests/algorithms/test_square_tiling.py), computed over the ladder's rungs at once.
        Every value is at most about 2M <= 2^61 (each side is the most that fits in M), so no
        int64 product overflows."""
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        ladders, es, rows = [], [], []  # every (spill, order)'s ladder, as one array
        for spill in spills:
            e = _e1(stable, spill)
            for row in (True, False):
                per_row = (d if row else 1) + 1 + e  # Bc = Bd = 1
                ladders.append(ladder(Nq, (M - 1) // per_row))
                es.append(e)
                rows.append(row)
        lengths = [len(x) for x in ladders]
        br = np.fromiter(itertools.chain.from_iterable(ladders), dtype=np.int64,
                         count=sum(lengths))
        e_ = np.repeat(np.array(es, dtype=np.int64), lengths)
        row_ = np.repeat(np.array(rows, dtype=bool), lengths)
        held = br * np.where(row_, d + e_, e_)  # Q_i (order "row") and the vectors
        bc = np.minimum(Nkv, (M - held - np.where(row_, 0, br)) // (br + 1))
        ok = bc >= 1
        br, held, bc, row_ = br[ok], held[ok], bc[ok], row_[ok]
        # each with the widest Bc and that snapped (duplicates go below), at once
        c = np.concatenate([bc, -(-Nkv // -(-Nkv // bc))])
        br, held, row_ = (np.concatenate([x, x]) for x in (br, held, row_))
        room = M - held - br * c
        bd = np.maximum(1, np.minimum(d, np.where(row_, room // c, room // (br + c))))
        fits = room >= np.where(row_, c * bd, bd * (br + c))
        tile = (~row_).astype(np.int64)
        if 2 * (Nq + 1) * (Nkv + 1) * (d + 1) < 1 << 62:  # one int64 key orders the rows
            key = np.unique((((br * (Nkv + 1) + c) * (d + 1) + bd) * 2 + tile)[fits])
            v = key >> 1  # (the key's digits: order index, Bd, Bc, Br)
            bd, v = v % (d + 1), v // (d + 1)
            out: np.ndarray = np.stack([v // (Nkv + 1), v % (Nkv + 1), bd, key & 1], axis=1)
            return out
        grid = np.stack([br, c, bd, tile], axis=1)[fits]
        grid = grid[np.lexsort(grid.T[::-1])]
        distinct = np.ones(len(grid), dtype=bool)
        distinct[1:] = (grid[1:] != grid[:-1]).any(axis=1)
        out = grid[distinct]
        return out

    @staticmethod
    def _plain_least(shape: Shape, maxima: bool, grid: np.ndarray, keep: int
                     ) -> list[tuple[_Phase1, tuple[int, int]]]:
        """The ``keep`` rows of ``grid`` (:meth:`_phase1_grid`) of least unmasked Phase-1
        (count, tiles) (:func:`_phase1_plain`), least first, ties in the grid's order:
        ``mapper.preranked`` of the grid's choices by that key, with the key.  Where every
        count fits in int64 (a count is at most ``Nq·Nkv·(2d + 4) + Nq``) they are taken exactly
        over the grid; else first in float64, the mapper's bounds
        (:func:`~attnio.algorithms.mapper.least_few`), and only the rows near the ``keep``-th
        least are counted exactly: the same rows."""
        Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
        br, bc, o = grid[:, 0], grid[:, 1], grid[:, 3]
        if Nq * Nkv * (2 * d + 4) + Nq < 1 << 62:  # every count fits in int64: rank exactly
            tr_, tc_ = -(-Nq // br), -(-Nkv // bc)
            count = (np.where(o == 0, Nq * d, tc_ * (Nq * d)) + tr_ * (Nkv * d)
                     + (Nq * Nkv + Nq) + (tc_ * Nq if maxima else 0))
            tiles = tr_ * tc_
            at = np.lexsort((np.arange(len(grid)), tiles, count))[:keep]
            return [((a, b, c, "row" if k == 0 else "tile"), (n, m)) for (a, b, c, k), n, m
                    in zip(grid[at].tolist(), count[at].tolist(), tiles[at].tolist())]
        tc = (-(-Nkv // bc)).astype(np.float64)
        approx = (np.where(o == 0, float(Nq * d), tc * float(Nq * d))
                  + (-(-Nq // br)).astype(np.float64) * float(Nkv * d) + float(Nq * Nkv + Nq)
                  + (tc * float(Nq) if maxima else 0.0))
        chosen: dict[int, tuple[_Phase1, tuple[int, int]]] = {}

        def key(i: int) -> tuple[int, int]:
            a, b, c, k = grid[i].tolist()
            choice = (a, b, c, "row" if k == 0 else "tile")
            chosen[i] = (choice, _phase1_key(shape, maxima, choice))
            return chosen[i][1]

        top = mapper.least_few(range(len(grid)), key, None, keep, lowers=approx)
        return [chosen[i] for i in top]

    def _pieces(self, shape: Shape, M: int, stable: bool, spill: str
                ) -> tuple[list[_Group], list[_Rung], SquareTilingTiling | None]:
        """The best Phase-1 choices with their exact Phase-1 counts, the Phase-2 ladder and the
        paper's tiling (None where it does not fit)."""
        Nq, Nkv = shape.Nq, shape.Nkv
        maxima = _maxima(stable, spill)
        # the stable variant couples the phases through Bc (the per-tile maxima): keep a few
        keep = 12 if maxima else 1
        ranked: dict[_Phase1, tuple[int, int]] = {}
        if spill == "scores":  # the exp spill's sides fit too (one row vector less)
            # one Phase-1 choice goes on (the phases are not coupled): score more (64)
            grid = self._phase1_grid(shape, M, stable, ("scores", "exp"))
            if shape.causal and len(grid) > 64:
                # pre-rank by the O(1) unmasked count (the mask keeps about half of every
                # tiling's tiles) and score the best 64 exactly (ties in order)
                p1 = [c for c, _ in self._plain_least(shape, maxima, grid, 64)]
            elif shape.causal:
                p1 = [(a, b, c, "row" if k == 0 else "tile") for a, b, c, k in grid.tolist()]
            else:
                ranked = dict(self._plain_least(shape, maxima, grid, keep))
                p1 = list(ranked)
        else:
            p1 = self._phase1_candidates(shape, M, stable, spill)
            if shape.causal and len(p1) > 24:
                # pre-rank by the O(1) unmasked count and score the best 24 exactly
                p1 = mapper.preranked(p1, functools.partial(_phase1_key, shape, maxima), 24)
            elif not shape.causal:  # the count and tiles of each (a few hundred choices)
                ranked = {c: _phase1_key(shape, maxima, c) for c in p1}
        # each choice's (exact Phase-1 count, tiles), computed once
        if shape.causal:
            def exact_key(c: _Phase1) -> tuple[int, int]:
                ranked[c] = (sum(_phase1_io(shape, c[0], c[1], c[3], stable, spill)),
                             -(-Nq // c[0]) * -(-Nkv // c[1]))
                return ranked[c]

            top = mapper.least_few(p1, exact_key, _phase1_lower(shape, maxima), keep)
        else:
            top = mapper.preranked(p1, ranked.__getitem__, keep)
        exact = {c: ranked[c][0] for c in top}
        groups = [(c, exact[c]) for c in top]  # (phase 1 choice, its exact Phase-1 count)
        ladder = self._phase2_ladder(shape, M, stable, spill)
        paper: SquareTilingTiling | None
        paper = dataclasses.replace(self.paper_tiling(shape, M, stable), spill=spill)
        if self.footprint(shape, paper) > M:
            paper = None
        return groups, ladder, paper

    def _families(self, shape: Shape, M: int, stable: bool = True, spill: str | None = None
                  ) -> Families[SquareTilingTiling]:
        """The combinations as the mapper's branch and bound takes them (:meth:`_combinations`):
        a causal plan at N = 10^9 in milliseconds, an unmasked one scoring only the families of
        least count."""
        if spill is None:
            spill = "scores" if stable else "exp"
        return self._combinations(shape, M, stable, spill)

    def _combinations(self, shape: Shape, M: int, stable: bool, spill: str
                      ) -> Families[SquareTilingTiling]:
        """One family per (Phase-1 choice, Br2, Bd2) of :meth:`_pieces`, its key slices Bk2
        (:meth:`_slices`) listed only when scored, then the paper's tiling; ties go to the first
        in the order (Phase-1 choice, Br2, Bk2, Bd2), the paper's last.  Each family's bound is
        :meth:`_unmasked_counts`' (exact) or :meth:`_masked_bounds`'.

        Unmasked the bound is the count: Phase 2's count does not depend on Bk2, so every
        member of a family moves the same words and the key slices differ in steps only; the
        mapper lists the slices of the families of least count alone.  Every combination fits
        in M by construction (each phase's footprint was checked, and clamping only shrinks
        it)."""
        groups, ladder, paper = self._pieces(shape, M, stable, spill)
        buckets = [(g, e) for g in range(len(groups)) for e in range(len(ladder))]
        bounds = self._masked_bounds if shape.causal else self._unmasked_counts
        lows = bounds(shape, stable, spill, [(groups[g], ladder[e]) for g, e in buckets])
        if paper is not None:
            buckets.append((len(groups), -1))
            if shape.causal:
                e1 = sum(_phase1_io(shape, paper.Br, paper.Bc, paper.order, paper.stable, spill))
                rung = (paper.Bd2, paper.Br2, [paper.Bk2])
                lows += bounds(shape, stable, spill, [(((paper.Br, paper.Bc, paper.Bd,
                                                         paper.order), e1), rung)])
            else:
                lows.append(self._total(shape, paper).total)
        snaps: dict[int, dict[int, int]] = {}

        def members(i: int) -> list[SquareTilingTiling]:
            g, e = buckets[i]
            if g == len(groups):
                assert paper is not None  # its bucket is there only when paper is
                return [paper]
            (br, bc, bd, order), _ = groups[g]
            bd2, br2, _ = ladder[e]
            return [SquareTilingTiling(br, bc, bd, br2, k, bd2, order, stable, spill)
                    for k in self._slices(shape, M, stable, bc, ladder[e],
                                          snaps.setdefault(bc, {}), spill)]

        def place(i: int, j: int, t: SquareTilingTiling) -> tuple[int, ...]:
            g = buckets[i][0]
            return (g,) if g == len(groups) else (g, t.Br2, t.Bk2, t.Bd2)

        return Families(lows, members, order=place)

    @staticmethod
    def _unmasked_counts(shape: Shape, stable: bool, spill: str,
                         pairs: list[tuple[_Group, _Rung]]) -> list[int]:
        """Unmasked, the every-head count of each (Phase-1 choice with its count, Phase-2 rung),
        whatever Bk2, with plain integers: a Phase-1 term plus a Phase-2 term that depends on
        Phase 1 only through Bc (the stable maxima)."""
        d, Nq, Nkv, heads = shape.d, shape.Nq, shape.Nkv, shape.n_heads
        maxima = _maxima(stable, spill)
        out = []
        for ((_, bc, _, _), e1), (bd2, br2, _) in pairs:
            tc = -(-Nkv // bc) * Nq if maxima else 0
            td = -(-d // bd2)
            out.append(heads * (e1 + td * (Nq + Nq * Nkv + tc) + (-(-Nq // br2)) * Nkv * d
                                + Nq * d))
        return out

    @staticmethod
    def _masked_bounds(shape: Shape, stable: bool, spill: str,
                       pairs: list[tuple[_Group, _Rung]]) -> list[int]:
        """With a mask, a bound on the every-head count of each (Phase-1 choice with its exact
        count, Phase-2 rung), whatever Bk2.

        Phase 1 is scored exactly (O(log N)); Phase 2 is bounded below by its count
        with the key slices shrunk to single keys: block i of Br2 rows (r_i of them) sees keys
        [0, hi_i), and ``w_i >= hi_i``, ``nc_i >= hi_i/Bc``, so with ``H = sum_i r_i·hi_i`` and
        ``h = sum_i hi_i`` (one O(log N) sum per Br2) Phase 2 moves at least
        ``Td·sum_i [seen_i]·r_i + Td·H + d·h (+ Td·ceil(H/Bc) stable) + Nq·d`` words, whatever
        Bk2 (per head; times the heads).
        """
        d, Nq, heads = shape.d, shape.Nq, shape.n_heads
        sums: dict[int, masks.BlockSums] = {}

        def lower(e1: int, br2: int, bd2: int, bc: int) -> int:
            if br2 not in sums:
                sums[br2] = _covered(shape, br2, 1)  # hi_i itself: width 1 slices
            s = sums[br2]
            td = -(-d // bd2)
            extra = -(-s.size_width // bc) if _maxima(stable, spill) else 0
            return heads * (e1 + td * (s.size_seen + s.size_width + extra) + d * s.width + Nq * d)

        return [lower(e1, br2, bd2, bc) for ((_, bc, _, _), e1), (bd2, br2, _) in pairs]

    def mapspace_tilings(self, shape: Shape, M: int, **options: Any
                         ) -> list[SquareTilingTiling]:
        """:meth:`candidate_tilings`, with its options ``stable`` and ``spill``."""
        unknown = set(options) - {"stable", "spill"}
        if unknown:
            raise ParameterError(f"{self.name} takes the tiling options stable and spill, got "
                                 f"{sorted(unknown)}")
        return self.candidate_tilings(shape, M, **options)

    def candidate_tilings(self, shape: Shape, M: int,
                          stable: bool = True, spill: str | None = None
                          ) -> list[SquareTilingTiling]:
        """The combinations the search scores (:meth:`_search`); stable, with
        ``spill="scores"`` unless told: for the same
        sides it fits wherever ``spill="exp"`` fits (one row vector less in each phase) and
        moves the same words less the per-tile maxima, so the exp spill never wins."""
        if spill is None:
            spill = "scores" if stable else "exp"
        return self._search(shape, M, stable, spill)

    def default_tiling(self, shape: Any, M: int, causal: object = None,
                       stable: bool = True) -> SquareTilingTiling:
        """The least closed form over the searched sides and orders; ties toward fewer steps."""
        shape = Shape.coerce(shape).with_mask(causal)
        M = check_int("M", M, minimum=1)
        mapper.check_M(self, shape, M, stable=stable)
        found = mapper.least(self, shape, M, stable=stable)
        assert found is not None  # min_M guarantees the square tiling of side 1
        best: SquareTilingTiling = found.tiling
        return best

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None,
                      inputs: Any = None) -> SquareTilingTiling:
        """Accepts None/"auto", "paper", an int B (every side B), a SquareTilingTiling, or a
        mapping: ``{"stable": False}`` (auto sides), ``{"B": 16, "stable": False}`` (square), or
        every size field (``order`` and ``stable`` optional)."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        stable = True
        if isinstance(tiling, Mapping):
            known = set(_SIZE_FIELDS) | {"order", "stable", "spill", "B"}
            unknown = set(tiling) - known
            if unknown:
                raise ParameterError(f"tiling for {self.name} has unknown field(s) "
                                     f"{sorted(unknown)}; its fields are {sorted(known)}",
                                     param="tiling")
            stable = tiling.get("stable", True)
            if not isinstance(stable, bool):
                raise ParameterError(f"tiling.stable must be True or False, got {stable!r}",
                                     param="tiling.stable")
            sizes = [f for f in _SIZE_FIELDS if f in tiling]
            if "B" in tiling:
                if sizes:
                    raise ParameterError("tiling: give either B (every side) or the six sides, "
                                         "not both", param="tiling")
                tiling = {"B": tiling["B"], "stable": stable, "order": tiling.get("order", "tile"),
                          "spill": tiling.get("spill", "exp")}
                B = check_int("tiling.B", tiling["B"], minimum=1, maximum=MAX_SIZE)
                tiling = dataclasses.replace(SquareTilingTiling.square(B, stable=stable),
                                             order=tiling["order"], spill=tiling["spill"])
            elif not sizes:
                if "order" in tiling or "spill" in tiling:
                    raise ParameterError("tiling.order and tiling.spill need the sides too (or leave "
                                         "them to auto)", param="tiling")
                tiling = None
            elif len(sizes) < len(_SIZE_FIELDS):
                missing = sorted(set(_SIZE_FIELDS) - set(sizes))
                raise ParameterError(f"tiling for {self.name} is missing {missing}: give all of "
                                     f"{list(_SIZE_FIELDS)}, or B, or none (auto)",
                                     param="tiling")
            else:
                tiling = SquareTilingTiling(**tiling)
        if tiling is None or tiling == "auto":
            return self.default_tiling(shape, M, stable=stable)
        if tiling == "paper":
            mapper.check_M(self, shape, M)
            tiling = self.paper_tiling(shape, M)
        elif isinstance(tiling, (int, np.integer)) and not isinstance(tiling, bool):
            tiling = SquareTilingTiling.square(check_int("tiling", tiling, minimum=1,
                                                         maximum=MAX_SIZE))
        if not isinstance(tiling, SquareTilingTiling):
            raise ParameterError(f"tiling for {self.name} must be 'auto', 'paper', an int side B, "
                                 f"a SquareTilingTiling or a mapping, got {tiling!r}",
                                 param="tiling")
        self.validate_tiling(shape, tiling)
        self._check_fits(shape, M, tiling)
        return tiling

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: SquareTilingTiling, scale: float) -> None:
        t = tiling
        Nq, Nkv = shape.Nq, shape.Nkv
        A = mem.scratch("A", (Nq, Nkv))  # exp(S) (stable: exp(S - m_ij)), written once
        rowvec = mem.scratch("g" if t.stable else "l", (Nq,))  # log-sum-exp g, or row sums l
        Tc = cdiv(Nkv, t.Bc)
        mx = (mem.scratch("m_tile", (Tc * Nq,)) if _maxima(t.stable, t.spill)  # j*Nq + r
              else None)
        spilled = _Spilled(A, rowvec, mx)
        self._phase1(mem, Q, K, spilled, shape, t, scale)
        self._phase2(mem, V, spilled, O, shape, t)

    def _phase1(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, spilled: _Spilled,
                shape: Shape, t: SquareTilingTiling, scale: float) -> None:
        A, rowvec, mx = spilled.A, spilled.rowvec, spilled.mx
        d, Nq, Nkv, off = shape.d, shape.Nq, shape.Nkv, shape.offset
        band = masks.Band.queries(shape) if shape.causal else None  # keys [0, hi) per block
        for ib in mem.blocks(Nq, t.Br, band=band):
            hi = kv_visible_hi(shape, ib.stop)
            scores = t.stable and t.spill == "scores"
            if scores:
                m = mem.alloc((ib.size,), -np.inf, label="m_i")
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                vecs: tuple[FastTile, ...] = (m, l)
            elif t.stable:
                m = mem.alloc((ib.size,), -np.inf, label="m_i")
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                tmp = mem.alloc((ib.size,), 0.0, label="m_tile")
                vecs = (m, l, tmp)
            else:
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                vecs = (l,)
            Qi = mem.load(Q, ib, label="Q_i") if (t.order == "row" and hi > 0) else None
            for jb in mem.blocks(Nkv, t.Bc, hi=hi, band=band):
                S = mem.alloc((ib.size, jb.size), 0.0, label="S_ij")
                for lb in mem.blocks(d, t.Bd):
                    Kt = mem.load(K, jb, lb, label="K_jl")
                    if Qi is None:
                        Qt = mem.load(Q, ib, lb, label="Q_il")
                        mem.matmul(S, Qt, Kt, transpose_b=True, alpha=scale, accumulate=True)
                        mem.free(Qt)
                    else:
                        l0, l1 = lb.start, lb.stop
                        mem.compute(lambda s, q, k, l0=l0, l1=l1: SK.acc_slice(s, q, k, l0, l1,
                                                                             scale),
                                    S, Qi, Kt, writes=1)
                    mem.free(Kt)
                if K_.tile_needs_mask(shape, ib.start, jb.stop):
                    r0, c0 = ib.start, jb.start
                    mem.compute(lambda s, r0=r0, c0=c0: K_.apply_causal_mask(s, r0, c0, off), S,
                                writes=1)
                if scores:  # the raw scores are written; (m, l) fold them in
                    mem.compute(SK.fold_scores, S, m, l, writes=3)
                elif t.stable:
                    mem.compute(SK.exp_stable, S, m, l, tmp, writes=4)
                    assert mx is not None  # schedule makes it for the stable variant
                    j0 = jb.index * Nq
                    mem.store(tmp, mx, slice(j0 + ib.start, j0 + ib.stop))
                else:
                    r0, c0 = ib.start, jb.start
                    mem.compute(lambda s, ll, r0=r0, c0=c0: SK.exp_literal(s, ll, r0, c0), S, l,
                                writes=2)
                mem.store(S, A, ib, jb)
                mem.free(S)
            if Qi is not None:
                mem.free(Qi)
            if scores:
                mem.compute(SK.log_sum_exp, m, m, l, writes=1)  # g = m + log l, formed in m
                mem.store(m, rowvec, ib)
            elif t.stable:
                mem.compute(SK.log_sum_exp, tmp, m, l, writes=1)
                mem.store(tmp, rowvec, ib)
            else:
                r0 = ib.start
                mem.compute(lambda ll, r0=r0: SK.check_row_sums(ll, r0, shape), l,
                            writes=0)
                mem.store(l, rowvec, ib)
            mem.free(*vecs)

    def _phase2(self, mem: TwoLevelMemory, V: SlowArray, spilled: _Spilled, O: SlowArray,
                shape: Shape, t: SquareTilingTiling) -> None:
        A, rowvec, mx = spilled.A, spilled.rowvec, spilled.mx
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        band = masks.Band.queries(shape) if shape.causal else None  # keys [0, hi) per block
        for ib in mem.blocks(Nq, t.Br2, band=band):
            hi = kv_visible_hi(shape, ib.stop)
            for db in mem.blocks(d, t.Bd2):
                Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
                if hi == 0:  # every row of the block is masked: its output is 0
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc)
                    continue
                if t.stable and t.spill == "scores":  # P = exp(S - g), exactly normalised
                    g = mem.load(rowvec, ib, label="g_i")
                    for kb in mem.blocks(Nkv, t.Bk2, hi=hi, band=band):
                        self._accumulate(mem, A, V, Oc, g, (ib, kb, db), shape, raw=True)
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc, g)
                elif t.stable:
                    g = mem.load(rowvec, ib, label="g_i")
                    for cb in mem.blocks(Nkv, t.Bc, hi=hi, band=band):
                        c0 = cb.index * Nq
                        assert mx is not None  # schedule makes it for the stable variant
                        w = mem.load(mx, slice(c0 + ib.start, c0 + ib.stop), label="m_ij")
                        mem.compute(SK.weights, w, g, writes=1)  # w = exp(m_ij - g_i)
                        # the Bk2 slices of [0, hi) inside cb (Bk2 divides Bc)
                        for kb in mem.blocks(Nkv, t.Bk2, hi=hi, band=band, within=cb):
                            self._accumulate(mem, A, V, Oc, w, (ib, kb, db), shape)
                        mem.free(w)
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc, g)
                else:
                    for kb in mem.blocks(Nkv, t.Bk2, hi=hi, band=band):
                        self._accumulate(mem, A, V, Oc, None, (ib, kb, db), shape)
                    l = mem.load(rowvec, ib, label="l_i")
                    r0 = ib.start
                    mem.compute(lambda o, ll, r0=r0: SK.normalise_literal(o, ll, r0), Oc, l,
                                writes=1)
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc, l)

    @staticmethod
    def _accumulate(mem: TwoLevelMemory, A: SlowArray, V: SlowArray, Oc: FastTile,
                    w: FastTile | None, at: tuple[Block, Block, Block], shape: Shape, *,
                    raw: bool = False) -> None:
        """The tile ``at`` (query rows ib, keys kb, output columns db) of A times V into the
        output tile Oc: A's entries weighted by ``w`` (the row's exp(m_ij - g)), or with
        ``raw`` formed as exp(s - g) from the raw scores (``w``: g), or as they are (None)."""
        (ib, kb, db), off = at, shape.offset
        At = mem.load(A, ib, kb, label="A_ik")
        Vt = mem.load(V, kb, db, label="V_kc")
        masked = K_.tile_needs_mask(shape, ib.start, kb.stop)
        r0, c0 = ib.start, kb.start

        def step(o: np.ndarray, a: np.ndarray, v: np.ndarray, *ws: np.ndarray) -> None:
            if raw:  # a holds raw scores, ws[0] the row's log-sum-exp g
                with np.errstate(invalid="ignore"):
                    a -= ws[0][:, None]
                np.exp(a, out=a)
            elif ws:
                a *= ws[0][:, None]
            if masked:  # entries never written (skipped tiles) are NaN: overwrite, not multiply
                SK.zero_masked(a, r0, c0, off)
            o += a @ v

        if w is None:
            mem.compute(step, Oc, At, Vt, writes=2)
        else:
            mem.compute(step, Oc, At, Vt, w, writes=2)
        mem.free(At, Vt)


ALGORITHM = SquareTiling()

def predicted_io(N: int, d: int, M: int, causal: object = False, tiling: object = None,
                 Nkv: int | None = None) -> IOCount:
    """Closed-form count of ``square_tiling`` for Nq = N (Nkv = N unless given)."""
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    return ALGORITHM.cost(shape, ALGORITHM.coerce_tiling(shape, M, tiling)).io
