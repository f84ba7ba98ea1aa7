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

Closed form (exact; checked by ``tests/test_square_tiling.py``).  Phase-1 query blocks i have
``r_i`` rows and see keys ``[0, hi_i)`` (``hi_i = Nkv`` unmasked; bottom-right causal
``hi_i = clip(stop_i + Nkv − Nq, 0, Nkv)``); ``n_i = ⌈hi_i/Bc⌉`` key blocks of total width
``w_i = min(Nkv, n_i·Bc)``.  Phase-2 blocks i' likewise with Br2: ``n'_i = ⌈hi'/Bk2⌉`` key slices of
width ``w'_i``, ``c_i = ⌈hi'/Bc⌉`` Phase-1 key blocks; ``T_d = ⌈d/Bd2⌉``; s = 1 if stable, else 0::

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
``Br·d + Br·Bc + Bc·Bd + e·Br`` (order "row"), e = 3 stable (m, l, temporary) or 1 (l).  Phase 2:
``Br2·Bd2 + Bk2·(Br2 + Bd2) + 2·Br2`` stable (g and the loaded maxima), literal
``max(Br2·Bd2 + Bk2·(Br2 + Bd2), Br2·Bd2 + Br2)`` (l is loaded after the loop).  Sides are clamped
to Nq, Nkv, d.  The least workable M is 6 (stable) or 4 (literal).

Causal masks skip every fully masked tile in both phases (its A block is never written; Phase 2
zeroes the masked entries of a partially visible tile after loading it).

Measured against FlashAttention (``python -m attnio.algorithms.square_tiling`` prints this table;
``tests/test_crossover.py`` asserts its two ends).  Count mode, unmasked, total I/O of square
tiling (stable, auto tiles) over the best of flash1/flash2 (default tilings); "—" where neither
FlashAttention variant can run (M below 4d + 4: a row of Q, K, V and O does not fit):

.. crossover-table-start

::

    square tiling / best FlashAttention (total I/O; '—' = no FlashAttention variant fits)
    N     d         d²/16      d²/4        d²       4d²      16d²
    1024  64           —     0.458     1.041     2.309     4.824
    1024  128      0.146     0.516     1.038     2.025     3.359
    1024  256      0.213     0.543     1.007     1.756     3.006
    4096  64           —     0.458     1.050     2.505     7.248
    4096  128      0.145     0.515     1.037     2.425     6.091
    4096  256      0.209     0.541     1.032     2.227     4.768

    square tiling / FlashAttention-2
    N     d         d²/16      d²/4        d²       4d²      16d²
    1024  64           —     0.458     1.041     2.309     4.824
    1024  128      0.146     0.516     1.038     2.025     3.359
    1024  256      0.213     0.543     1.007     1.756     3.006
    4096  64           —     0.458     1.050     2.505     7.248
    4096  128      0.145     0.515     1.037     2.425     6.091
    4096  256      0.209     0.541     1.032     2.227     4.768

    crossover (scan of M = d²·2^(k/8)): square tiling wins up to M = a, FlashAttention wins from M = b on
    N     d    a (M/d²)          b (M/d²)          monotone
    1024  64   3756    (0.917)   4096    (1.000)   yes
    1024  128  15024   (0.917)   16384   (1.000)   yes
    1024  256  55109   (0.841)   60097   (0.917)   yes
    4096  64   3756    (0.917)   4096    (1.000)   yes
    4096  128  15024   (0.917)   16384   (1.000)   yes
    4096  256  60097   (0.917)   65536   (1.000)   yes

.. crossover-table-end

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((50, 16)) for _ in range(3))
>>> r = attnio.run("square_tiling", Q, K, V, M=100)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V)).max() < 1e-12), r.io.peak <= 100
(True, True)
>>> ALGORITHM.predicted_io((50, 16), 100, tiling=r.tiling).total == r.io.total
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AttnioError, CapacityError, ParameterError, check_int
from ..memory import SlowArray, TwoLevelMemory
from . import _kernels as K_
from .base import Algorithm, IOCount, Shape, cdiv, kv_visible_hi

__all__ = ["ALGORITHM", "ExpOverflowError", "SquareTiling", "SquareTilingTiling", "paper_side"]

ORDERS = ("tile", "row")
_SIZE_FIELDS = ("Br", "Bc", "Bd", "Br2", "Bk2", "Bd2")


class ExpOverflowError(AttnioError, FloatingPointError):
    """The literal (``stable=False``) schedule met an exp that overflowed or a row that underflowed."""


@dataclass(frozen=True)
class SquareTilingTiling:
    """Phase 1: S tiles Br×Bc, head-dimension slices Bd; Phase 2: O tiles Br2×Bd2, key slices Bk2.

    ``order``: Phase-1 loop order, "tile" (the paper's: each S tile finishes over the d slices)
    or "row" (Q_i stays resident across the key blocks).  ``stable``: subtract running row maxima
    (True) or exponentiate the raw scores as the paper does (False).
    """

    Br: int
    Bc: int
    Bd: int
    Br2: int
    Bk2: int
    Bd2: int
    order: str = "tile"
    stable: bool = True

    @classmethod
    def square(cls, B: int, *, stable: bool = True) -> SquareTilingTiling:
        """Every tile B×B, the paper's loop order."""
        return cls(B, B, B, B, B, B, "tile", stable)


def paper_side(M: int) -> int:
    """The paper's tile side B = ⌊√(M/4)⌋ (so 3B² + B ≤ M)."""
    return math.isqrt(M // 4)


def _e1(stable: bool) -> int:
    return 3 if stable else 1


def _fp1(d: int, br: int, bc: int, bd: int, order: str, stable: bool) -> int:
    if order == "row":
        return br * d + br * bc + bc * bd + _e1(stable) * br
    return br * bc + bd * (br + bc) + _e1(stable) * br


def _fp2(br2: int, bk2: int, bd2: int, stable: bool) -> int:
    if stable:
        return br2 * bd2 + bk2 * (br2 + bd2) + 2 * br2
    return max(br2 * bd2 + bk2 * (br2 + bd2), br2 * bd2 + br2)


def _ladder(total: int, vmax: int) -> list[int]:
    """Block sizes worth trying in [1, min(total, vmax)]: a geometric spread and the largest few,
    each snapped down to the smallest size with the same number of blocks."""
    vmax = min(total, vmax)
    if vmax < 1:
        return []
    vals = {vmax}
    b = 1.0
    while b <= vmax:
        vals.add(int(b))
        b *= 1.18
    t0 = cdiv(total, vmax)
    for t in range(t0, t0 + 8):
        vals.add(cdiv(total, t))
    out = set()
    for v in vals:
        if 1 <= v <= vmax:
            out.add(v)
            out.add(cdiv(total, cdiv(total, v)))
    return sorted(out)


# ---------------------------------------------------------------------- closed forms
def _phase1_io(shape: Shape, Br: int, Bc: int, order: str, stable: bool, causal: bool):
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    if not causal:
        Tr, Tc = cdiv(Nq, Br), cdiv(Nkv, Bc)
        q = Nq * d if order == "row" else Tc * Nq * d
        reads = q + Tr * Nkv * d
        writes = Nq * Nkv + Nq + (Tc * Nq if stable else 0)
        return reads, writes
    starts, stops = K_.block_counts(Nq, Br)
    r = stops - starts
    hi = K_.visible_hi(shape, stops, causal)
    n, w = K_.covered(hi, Bc, Nkv)
    seen = hi > 0
    q = r * d if order == "row" else n * r * d
    reads = int(np.sum(np.where(seen, q + w * d, 0)))
    writes = int(np.sum(r * w)) + Nq + (int(np.sum(n * r)) if stable else 0)
    return reads, writes


def _phase2_io(shape: Shape, Br2: int, Bk2: int, Bd2: int, Bc: int, stable: bool, causal: bool):
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    Td = cdiv(d, Bd2)
    if not causal:
        Tr2 = cdiv(Nq, Br2)
        reads = Td * Nq + Td * Nq * Nkv + Tr2 * Nkv * d
        if stable:
            reads += Td * cdiv(Nkv, Bc) * Nq
        return reads, Nq * d
    starts, stops = K_.block_counts(Nq, Br2)
    r = stops - starts
    hi = K_.visible_hi(shape, stops, causal)
    _, w = K_.covered(hi, Bk2, Nkv)
    seen = hi > 0
    per = Td * r + Td * r * w + w * d
    if stable:
        nc, _ = K_.covered(hi, Bc, Nkv)
        per = per + Td * nc * r
    return int(np.sum(np.where(seen, per, 0))), Nq * d


class SquareTiling(Algorithm):
    name = "square_tiling"
    summary = ("Saha & Ye square tiling: write exp(S) once, two blocked matmuls; "
               "O(N²d/√M), beats FlashAttention for M < d²")
    Tiling = SquareTilingTiling

    # ------------------------------------------------------------------ sizes
    @staticmethod
    def _clamped(shape: Shape, t: SquareTilingTiling) -> tuple[int, ...]:
        return (min(t.Br, shape.Nq), min(t.Bc, shape.Nkv), min(t.Bd, shape.d),
                min(t.Br2, shape.Nq), min(t.Bk2, shape.Nkv), min(t.Bd2, shape.d))

    def footprint(self, shape: Shape, tiling: SquareTilingTiling, causal: bool = False) -> int:
        br, bc, bd, br2, bk2, bd2 = self._clamped(shape, tiling)
        return max(_fp1(shape.d, br, bc, bd, tiling.order, tiling.stable),
                   _fp2(br2, bk2, bd2, tiling.stable))

    def min_M(self, shape: Shape, causal: bool = False, stable: bool = True) -> int:
        return self.footprint(shape, SquareTilingTiling.square(1, stable=stable), causal)

    def steps(self, shape: Shape, tiling: SquareTilingTiling, causal: bool = False) -> int:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        p1 = cdiv(Nq, tiling.Br) * cdiv(Nkv, tiling.Bc) * cdiv(d, tiling.Bd)
        p2 = cdiv(Nq, tiling.Br2) * cdiv(d, tiling.Bd2) * cdiv(Nkv, tiling.Bk2)
        return p1 + p2

    def validate_tiling(self, shape: Shape, tiling: SquareTilingTiling) -> None:
        for f in _SIZE_FIELDS:
            check_int(f"tiling.{f}", getattr(tiling, f), minimum=1)
        if tiling.order not in ORDERS:
            raise ParameterError(f"tiling.order must be one of {ORDERS}, got {tiling.order!r}")
        if not isinstance(tiling.stable, bool):
            raise ParameterError(f"tiling.stable must be True or False, got {tiling.stable!r}")
        bc, bk2 = min(tiling.Bc, shape.Nkv), min(tiling.Bk2, shape.Nkv)
        if tiling.stable and bc < shape.Nkv and bc % bk2:
            raise ParameterError(
                f"tiling.Bk2={tiling.Bk2} must divide tiling.Bc={tiling.Bc} with stable=True (each "
                "Phase-2 key slice must lie inside one Phase-1 key block, whose max it rescales by)")

    # ------------------------------------------------------------------ counts
    def _predict(self, shape: Shape, tiling: SquareTilingTiling, causal: bool) -> IOCount:
        t = tiling
        r1, w1 = _phase1_io(shape, t.Br, t.Bc, t.order, t.stable, causal)
        r2, w2 = _phase2_io(shape, t.Br2, t.Bk2, t.Bd2, t.Bc, t.stable, causal)
        return IOCount(r1 + r2, w1 + w2)

    def phase_io(self, shape: Any, tiling: SquareTilingTiling, causal: bool = False):
        """(Phase 1, Phase 2) closed-form counts, for reports."""
        shape = Shape.coerce(shape)
        t = tiling
        return (IOCount(*_phase1_io(shape, t.Br, t.Bc, t.order, t.stable, causal)),
                IOCount(*_phase2_io(shape, t.Br2, t.Bk2, t.Bd2, t.Bc, t.stable, causal)))

    # ------------------------------------------------------------------ tilings
    def paper_tiling(self, shape: Any, M: int, stable: bool = True) -> SquareTilingTiling:
        """The paper's rule: every side B = ⌊√(M/4)⌋ (at least 1)."""
        return SquareTilingTiling.square(max(1, paper_side(M)), stable=stable)

    def _phase1_candidates(self, shape: Shape, M: int, stable: bool):
        d, Nq, Nkv, e = shape.d, shape.Nq, shape.Nkv, _e1(stable)
        out = []
        for order in ORDERS:
            per_row = (d if order == "row" else 1) + 1 + e  # Bc = Bd = 1
            for br in _ladder(Nq, (M - 1) // per_row):
                if order == "row":
                    bc = (M - br * d - e * br) // (br + 1)
                else:
                    bc = (M - br - e * br) // (br + 1)
                bc = min(Nkv, bc)
                if bc < 1:
                    continue
                for c in {bc, cdiv(Nkv, cdiv(Nkv, bc))}:
                    if order == "row":
                        bd = (M - br * d - br * c - e * br) // c
                    else:
                        bd = (M - br * c - e * br) // (br + c)
                    bd = max(1, min(d, bd))
                    if _fp1(d, br, c, bd, order, stable) <= M:
                        out.append((br, c, bd, order))
        return out

    def _phase2_candidates(self, shape: Shape, M: int, stable: bool, bc: int, causal: bool):
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        bc_eff = min(bc, Nkv)
        e = 2 if stable else 0
        out = []
        for bd2 in _ladder(d, (M - 1 - e) // 2):
            br2 = (M - bd2) // (bd2 + 1 + e)
            br2 = min(Nq, br2)
            if br2 < 1:
                continue
            br2 = cdiv(Nq, cdiv(Nq, br2))
            kmax = min(Nkv, (M - br2 * bd2 - e * br2) // (br2 + bd2))
            if kmax < 1:
                continue
            ks = {kmax} if not causal else {kmax, 1, *(2 ** i for i in range(kmax.bit_length()))}
            for k in sorted(ks):
                if k > kmax:
                    continue
                if stable and bc_eff < Nkv:
                    k = max(x for x in range(1, k + 1) if bc_eff % x == 0) if k > 1 else 1
                if _fp2(br2, k, bd2, stable) <= M:
                    out.append((br2, k, bd2))
        return sorted(set(out))

    def _search(self, shape: Shape, M: int, stable: bool, causal: bool) -> list:
        """Every (Phase 1 x Phase 2) combination worth scoring, best Phase-1 choices first."""
        p1 = self._phase1_candidates(shape, M, stable)
        if causal and len(p1) > 24:
            # a causal count costs O(N/Br) to evaluate: pre-rank by the O(1) unmasked count
            # (the mask keeps about half of every tiling's tiles) and score the best 24 exactly
            p1 = sorted(p1, key=lambda c: (sum(_phase1_io(shape, c[0], c[1], c[3], stable, False)),
                                           cdiv(shape.Nq, c[0]) * cdiv(shape.Nkv, c[1])))[:24]
        scored = sorted(p1, key=lambda c: (sum(_phase1_io(shape, c[0], c[1], c[3], stable, causal)),
                                           cdiv(shape.Nq, c[0]) * cdiv(shape.Nkv, c[1])))
        # the stable variant couples the phases through Bc (the per-tile maxima): keep a few
        top = scored[:12] if stable else scored[:1]
        out = []
        seen_bc = {}
        for br, bc, bd, order in top:
            key = min(bc, shape.Nkv)
            if key not in seen_bc:
                seen_bc[key] = self._phase2_candidates(shape, M, stable, bc, causal)
            for br2, bk2, bd2 in seen_bc[key]:
                out.append(SquareTilingTiling(br, bc, bd, br2, bk2, bd2, order, stable))
        paper = self.paper_tiling(shape, M, stable)
        if self.footprint(shape, paper) <= M:
            out.append(paper)
        return out

    def candidate_tilings(self, shape: Shape, M: int, causal: bool = False, stable: bool = True):
        return self._search(Shape.coerce(shape), M, stable, causal)

    def default_tiling(self, shape: Any, M: int, causal: bool = False,
                       stable: bool = True) -> SquareTilingTiling:
        """The least closed form over the searched sides and orders; ties toward fewer steps."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        need = self.min_M(shape, causal, stable)
        if M < need:
            raise ParameterError(f"M={M} is too small for {self.name} (stable={stable}) with "
                                 f"d={shape.d}: it needs M >= {need} words")
        best, best_key = None, None
        for t in self._search(shape, M, stable, causal):
            if self.footprint(shape, t) > M:
                continue
            key = (self._predict(shape, t, causal).total, self.steps(shape, t))
            if best_key is None or key < best_key:
                best, best_key = t, key
        return best

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None, causal: bool = False,
                      inputs: Any = None) -> SquareTilingTiling:
        """Accepts None/"auto", "paper", an int B (every side B), a SquareTilingTiling, or a
        mapping: ``{"stable": False}`` (auto sides), ``{"B": 16, "stable": False}`` (square), or
        every size field (``order`` and ``stable`` optional)."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        stable = True
        if isinstance(tiling, Mapping):
            known = set(_SIZE_FIELDS) | {"order", "stable", "B"}
            unknown = set(tiling) - known
            if unknown:
                raise ParameterError(f"tiling for {self.name} has unknown field(s) "
                                     f"{sorted(unknown)}; its fields are {sorted(known)}")
            stable = tiling.get("stable", True)
            if not isinstance(stable, bool):
                raise ParameterError(f"tiling.stable must be True or False, got {stable!r}")
            sizes = [f for f in _SIZE_FIELDS if f in tiling]
            if "B" in tiling:
                if sizes:
                    raise ParameterError("tiling: give either B (every side) or the six sides, "
                                         "not both")
                tiling = {"B": tiling["B"], "stable": stable, "order": tiling.get("order", "tile")}
                B = check_int("tiling.B", tiling["B"], minimum=1)
                tiling = dataclasses.replace(SquareTilingTiling.square(B, stable=stable),
                                             order=tiling["order"])
            elif not sizes:
                if "order" in tiling:
                    raise ParameterError("tiling.order needs the sides too (or leave both to auto)")
                tiling = None
            elif len(sizes) < len(_SIZE_FIELDS):
                missing = sorted(set(_SIZE_FIELDS) - set(sizes))
                raise ParameterError(f"tiling for {self.name} is missing {missing}: give all of "
                                     f"{list(_SIZE_FIELDS)}, or B, or none (auto)")
            else:
                tiling = SquareTilingTiling(**tiling)
        if tiling is None or tiling == "auto":
            return self.default_tiling(shape, M, causal, stable)
        if tiling == "paper":
            self._check_min_M(shape, M, causal)
            tiling = self.paper_tiling(shape, M)
        elif isinstance(tiling, (int, np.integer)) and not isinstance(tiling, bool):
            tiling = SquareTilingTiling.square(check_int("tiling (side B)", tiling, minimum=1))
        if not isinstance(tiling, SquareTilingTiling):
            raise ParameterError(f"tiling for {self.name} must be 'auto', 'paper', an int side B, "
                                 f"a SquareTilingTiling or a mapping, got {tiling!r}")
        self.validate_tiling(shape, tiling)
        need = self.footprint(shape, tiling, causal)
        if need > M:
            raise CapacityError(f"{self.name} with tiling {tiling}", 0, need, M)
        return tiling

    # ------------------------------------------------------------------ the schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: SquareTilingTiling, causal: bool,
                 scale: float) -> None:
        t = tiling
        Nq, Nkv = shape.Nq, shape.Nkv
        A = mem.scratch("A", (Nq, Nkv))  # exp(S) (stable: exp(S - m_ij)), written once
        rowvec = mem.scratch("g" if t.stable else "l", (Nq,))  # log-sum-exp g, or row sums l
        Tc = cdiv(Nkv, t.Bc)
        mx = mem.scratch("m_tile", (Tc * Nq,)) if t.stable else None  # block j, rows r: j*Nq + r
        self._phase1(mem, Q, K, A, rowvec, mx, shape, t, causal, scale)
        self._phase2(mem, V, A, rowvec, mx, O, shape, t, causal)

    def _phase1(self, mem, Q, K, A, rowvec, mx, shape, t, causal, scale):
        d, Nq, Nkv, off = shape.d, shape.Nq, shape.Nkv, shape.offset
        for ib in mem.blocks(Nq, t.Br, uniform=not causal):
            hi = kv_visible_hi(shape, ib.stop, causal)
            if t.stable:
                m = mem.alloc((ib.size,), -np.inf, label="m_i")
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                tmp = mem.alloc((ib.size,), 0.0, label="m_tile")
                vecs = (m, l, tmp)
            else:
                l = mem.alloc((ib.size,), 0.0, label="l_i")
                vecs = (l,)
            Qi = mem.load(Q, ib, label="Q_i") if (t.order == "row" and hi > 0) else None
            for jb in mem.blocks(Nkv, t.Bc, hi=hi):
                S = mem.alloc((ib.size, jb.size), 0.0, label="S_ij")
                for lb in mem.blocks(d, t.Bd):
                    Kt = mem.load(K, jb, lb, label="K_jl")
                    if Qi is None:
                        Qt = mem.load(Q, ib, lb, label="Q_il")
                        mem.matmul(S, Qt, Kt, transpose_b=True, alpha=scale, accumulate=True)
                        mem.free(Qt)
                    else:
                        l0, l1 = lb.start, lb.stop
                        mem.compute(lambda s, q, k, l0=l0, l1=l1: _acc_slice(s, q, k, l0, l1,
                                                                             scale),
                                    S, Qi, Kt, writes=1)
                    mem.free(Kt)
                if K_.tile_needs_mask(shape, ib.start, jb.stop, causal):
                    r0, c0 = ib.start, jb.start
                    mem.compute(lambda s, r0=r0, c0=c0: K_.apply_causal_mask(s, r0, c0, off), S,
                                writes=1)
                if t.stable:
                    mem.compute(_exp_stable, S, m, l, tmp, writes=4)
                    j0 = jb.index * Nq
                    mem.store(tmp, mx, slice(j0 + ib.start, j0 + ib.stop))
                else:
                    r0, c0 = ib.start, jb.start
                    mem.compute(lambda s, ll, r0=r0, c0=c0: _exp_literal(s, ll, r0, c0), S, l,
                                writes=2)
                mem.store(S, A, ib, jb)
                mem.free(S)
            if Qi is not None:
                mem.free(Qi)
            if t.stable:
                mem.compute(_log_sum_exp, tmp, m, l, writes=1)
                mem.store(tmp, rowvec, ib)
            else:
                r0 = ib.start
                mem.compute(lambda ll, r0=r0: _check_row_sums(ll, r0, shape, causal), l,
                            writes=0)
                mem.store(l, rowvec, ib)
            mem.free(*vecs)

    def _phase2(self, mem, V, A, rowvec, mx, O, shape, t, causal):
        d, Nq, Nkv, off = shape.d, shape.Nq, shape.Nkv, shape.offset
        for ib in mem.blocks(Nq, t.Br2, uniform=not causal):
            hi = kv_visible_hi(shape, ib.stop, causal)
            for db in mem.blocks(d, t.Bd2):
                Oc = mem.alloc((ib.size, db.size), 0.0, label="O_ic")
                if hi == 0:  # every row of the block is masked: its output is 0
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc)
                    continue
                if t.stable:
                    g = mem.load(rowvec, ib, label="g_i")
                    for cb in mem.blocks(Nkv, t.Bc, hi=hi, uniform=not causal):
                        c0 = cb.index * Nq
                        w = mem.load(mx, slice(c0 + ib.start, c0 + ib.stop), label="m_ij")
                        mem.compute(_weights, w, g, writes=1)  # w = exp(m_ij - g_i)
                        for kb in mem.blocks(Nkv, t.Bk2, lo=cb.start, hi=min(cb.stop, hi)):
                            self._accumulate(mem, A, V, Oc, w, ib, kb, db, shape, causal, off)
                        mem.free(w)
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc, g)
                else:
                    for kb in mem.blocks(Nkv, t.Bk2, hi=hi):
                        self._accumulate(mem, A, V, Oc, None, ib, kb, db, shape, causal, off)
                    l = mem.load(rowvec, ib, label="l_i")
                    r0 = ib.start
                    mem.compute(lambda o, ll, r0=r0: _normalise_literal(o, ll, r0), Oc, l,
                                writes=1)
                    mem.store(Oc, O, ib, db)
                    mem.free(Oc, l)

    @staticmethod
    def _accumulate(mem, A, V, Oc, w, ib, kb, db, shape, causal, off):
        At = mem.load(A, ib, kb, label="A_ik")
        Vt = mem.load(V, kb, db, label="V_kc")
        masked = K_.tile_needs_mask(shape, ib.start, kb.stop, causal)
        r0, c0 = ib.start, kb.start

        def step(o, a, v, *ws):
            if ws:
                a *= ws[0][:, None]
            if masked:  # entries never written (skipped tiles) are NaN: overwrite, not multiply
                _zero_masked(a, r0, c0, off)
            o += a @ v

        if w is None:
            mem.compute(step, Oc, At, Vt, writes=2)
        else:
            mem.compute(step, Oc, At, Vt, w, writes=2)
        mem.free(At, Vt)


# ---------------------------------------------------------------------- tile arithmetic
def _acc_slice(S, Q, K, l0, l1, scale) -> None:
    S += scale * (Q[:, l0:l1] @ K.T)


def _exp_stable(S, m, l, t) -> None:
    """S <- exp(S - m_new) with the running max m_new; l rescaled and accumulated; t <- m_new used."""
    np.max(S, axis=1, out=t)
    np.maximum(t, m, out=t)
    ts = K_.safe_max(t)
    S -= ts[:, None]
    np.exp(S, out=S)
    l *= np.exp(m - ts)
    l += S.sum(axis=1)
    m[:] = t
    t[:] = ts


def _log_sum_exp(t, m, l) -> None:
    """t <- m + log l per row (+inf where the row saw no key, so its weights become 0)."""
    with np.errstate(divide="ignore"):
        t[:] = np.where(l > 0, K_.safe_max(m) + np.log(np.where(l > 0, l, 1.0)), np.inf)


def _weights(w, g) -> None:
    with np.errstate(invalid="ignore"):
        np.exp(w - g, out=w)


def _zero_masked(a, r0: int, c0: int, offset: int) -> None:
    rows = np.arange(r0, r0 + a.shape[0])[:, None]
    cols = np.arange(c0, c0 + a.shape[1])[None, :]
    a[cols > rows + offset] = 0.0


def _exp_literal(S, l, r0: int, c0: int) -> None:
    """The paper's A = exp(S) (no max subtracted), refusing to write an overflowed tile."""
    with np.errstate(over="ignore"):
        np.exp(S, out=S)
    if not np.isfinite(S).all():
        r, c = (int(x) for x in np.argwhere(~np.isfinite(S))[0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): exp overflowed at score S[{r0 + r}, {c0 + c}] "
            f"(a logit above {math.log(np.finfo(S.dtype).max):.1f} in {S.dtype}); the paper's "
            "algorithm does not subtract the row max: use stable=True")
    l += S.sum(axis=1)


def _check_row_sums(l, r0: int, shape: Shape, causal: bool) -> None:
    rows = np.arange(r0, r0 + l.shape[0])
    sees = (np.minimum(shape.Nkv, rows + 1 + shape.offset) > 0) if causal else np.ones_like(rows,
                                                                                            bool)
    if not np.isfinite(l).all():
        r = int(np.argwhere(~np.isfinite(l))[0][0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): the row sum of exp(S) overflowed in row {r0 + r}; "
            "use stable=True")
    bad = sees & (l <= 0)
    if bad.any():
        r = int(np.argwhere(bad)[0][0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): every exp(S) of row {r0 + r} underflowed to 0 (logits "
            f"below {math.log(np.finfo(l.dtype).tiny):.1f}); the output row would be lost: use "
            "stable=True")


def _normalise_literal(O, l, r0: int) -> None:
    O /= np.where(l > 0, l, 1.0)[:, None]
    if not np.isfinite(O).all():
        r = int(np.argwhere(~np.isfinite(O))[0][0])
        raise ExpOverflowError(f"square_tiling(stable=False): output row {r0 + r} is not finite; "
                               "use stable=True")


ALGORITHM = SquareTiling()

# ---------------------------------------------------------------------- the crossover measurement
CROSSOVER_NS = (1024, 4096)
CROSSOVER_DS = (64, 128, 256)
CROSSOVER_FACTORS = (1 / 16, 1 / 4, 1, 4, 16)  # M = factor · d²


def flash_comparison(N: int, d: int, M: int, causal: bool = False) -> dict:
    """Simulated (count mode, bulk) totals of square tiling (stable, auto tiles) and of flash1 and
    flash2 (their default tilings) at one size; None for a variant that cannot run at this M."""
    from ..runner import run  # lazy: the runner imports the registry, which imports this module

    out: dict = {"N": N, "d": d, "M": M, "causal": causal}
    out["square_tiling"] = run("square_tiling", shape=(N, d), M=M, mode="count",
                               causal=causal).io.total
    for name in ("flash1", "flash2"):
        try:
            out[name] = run(name, shape=(N, d), M=M, mode="count", causal=causal).io.total
        except ParameterError:  # M below its min_M: a row of Q, K, V and O does not fit
            out[name] = None
    runnable = {n: out[n] for n in ("flash1", "flash2") if out[n] is not None}
    out["best_flash"] = min(runnable, key=runnable.get) if runnable else None
    best = runnable.get(out["best_flash"]) if runnable else None
    out["ratio_best_flash"] = out["square_tiling"] / best if best else None
    out["ratio_flash2"] = out["square_tiling"] / out["flash2"] if out["flash2"] else None
    return out


def crossover(N: int, d: int, causal: bool = False, per_octave: int = 8) -> dict:
    """Scan M = d²·2^(k/per_octave) over [d²/16, 16d²]: the largest M where square tiling still
    moves fewer words than the best FlashAttention variant, and the smallest M from which on
    FlashAttention moves fewer at every scanned M."""
    ks = range(-4 * per_octave, 4 * per_octave + 1)
    Ms = sorted({max(1, round(d * d * 2 ** (k / per_octave))) for k in ks})
    wins = []
    for M in Ms:
        c = flash_comparison(N, d, M, causal)
        wins.append(c["ratio_best_flash"] is None or c["ratio_best_flash"] < 1.0)
    last_sq = max((M for M, w in zip(Ms, wins) if w), default=None)
    first_fa = None
    for i in range(len(Ms)):
        if not any(wins[i:]):
            first_fa = Ms[i]
            break
    return {"N": N, "d": d, "last_square_win": last_sq, "first_flash_win": first_fa,
            "monotone": wins == sorted(wins, reverse=True), "grid": Ms}


def _fmt_factor(f: float) -> str:
    return f"d²/{round(1 / f)}" if f < 1 else ("d²" if f == 1 else f"{round(f)}d²")


def crossover_report() -> str:
    """The text of the tables in the docstring above and in docs/small_cache.md (generated by
    ``python benchmarks/bench_small_cache.py --write``; tests/test_crossover.py checks it)."""
    head = "N     d    " + "".join(f"{_fmt_factor(f):>10s}" for f in CROSSOVER_FACTORS)
    lines = ["square tiling / best FlashAttention (total I/O; '—' = no FlashAttention variant "
             "fits)", head]
    lines2 = ["square tiling / FlashAttention-2", head]
    cross = ["crossover (scan of M = d²·2^(k/8)): square tiling wins up to M = a, "
             "FlashAttention wins from M = b on",
             "N     d    a (M/d²)          b (M/d²)          monotone"]
    for N in CROSSOVER_NS:
        for d in CROSSOVER_DS:
            cells, cells2 = [], []
            for f in CROSSOVER_FACTORS:
                c = flash_comparison(N, d, round(f * d * d))
                r, r2 = c["ratio_best_flash"], c["ratio_flash2"]
                cells.append("—" if r is None else f"{r:.3f}")
                cells2.append("—" if r2 is None else f"{r2:.3f}")
            lines.append(f"{N:<5d} {d:<4d}" + "".join(f"{x:>10s}" for x in cells))
            lines2.append(f"{N:<5d} {d:<4d}" + "".join(f"{x:>10s}" for x in cells2))
            x = crossover(N, d)
            a, b = x["last_square_win"], x["first_flash_win"]
            cross.append(f"{N:<5d} {d:<4d} {a:<7d} ({a / d / d:<5.3f})   {b:<7d} ({b / d / d:<5.3f})"
                         f"   {'yes' if x['monotone'] else 'no'}")
    return "\n".join(lines + [""] + lines2 + [""] + cross)


def predicted_io(N, d, M, causal=False, tiling=None, Nkv=None) -> IOCount:
    """Closed-form count of ``square_tiling`` for Nq = N (Nkv = N unless given)."""
    return ALGORITHM.predicted_io(Shape(N, N if Nkv is None else Nkv, d), M, tiling=tiling,
                                  causal=causal)
