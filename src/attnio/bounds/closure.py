"""Theorems A and D closed under more memory and fewer pairs by construction (docs/bounds.md
§12.1, "Theorems A and D closed").

The searches of :mod:`attnio.bounds.segments` (kept as ``pv_segment_raw_*`` and
``backward_accum_raw_*``) choose their segment length K and potential μ as functions of M and P,
so their values rise and fall along M and P.  Here the parameters come from a fixed, finite set of
*rows*, each fixed in scale-free terms, and the value is a maximum over a fixed set that only
shrinks when M grows:

* a row f is (κ_f, m_f): at memory G its segment length is ``K = ⌊κ_f·G⌋`` and its potential
  ``μ = m_f·√G`` (the per-segment maxima are taken at the real ``κ_f·G``, which only enlarges them:
  every maximum is non-decreasing in K).  The rows are the nodes of the theorem's parameter table
  (:mod:`attnio.bounds.params`, the multiplier of ``max(√M, M/d)`` turned into one of √G at the
  node's x = d²/M), the same with μ = 0, and the same with K halved and doubled;
* the memory grid is ``𝒢 = {⌈2^(j/256)⌉ : j >= 0}`` up to 2⁶² (every integer up to 369, then
  steps of at most 0.28%);
* the value is ``C(P, d, M) = max over rows f and G in 𝒢 with G >= M of T_f(P, d, G)``, T_f the
  theorem at the row's (K, μ) at G: a valid bound at G, so at M (a schedule for M runs with
  G >= M words), non-increasing in M (a larger M leaves fewer terms) and non-decreasing in P
  (every term is), hence in N for the mask families of the fewer-pairs lemma.

The maximum is exact: every term is evaluated, or excluded by an envelope that the scaling lemma
proves (for μ ∝ √G and K ∝ G the three per-segment maxima grow at least as G^{3/2}, so a row's
number of segments h − 1 cannot rise with G and its level n is reached only below
``(W/c_n)^{2/3}``, the B′ argument of §6.1).  The per-segment maxima of a row at a grid point
do not depend on P and are cached per (theorem, d).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from . import params

if TYPE_CHECKING:
    from .segments import FloatArray, PairsTheorem

__all__ = ["GRID_STEPS", "GRID_TOP", "closed_monotone", "grid_from", "rows", "row_value"]

#: Grid points per octave of the memory grid 𝒢.
GRID_STEPS = 256

#: The grid's largest point (no grid point above it).
GRID_TOP = 1 << 62

#: The factors of K that rows try besides the table's (with μ as tabulated), and μ = 0.
K_FACTORS = (0.5, 2.0)

#: Relative room of the envelope against rounding (the maxima are computed to ~1e-15).
ROOM = 1e-9


def _grid_point(j: int) -> int:
    return math.ceil(2.0 ** (j / GRID_STEPS))


def _first_index(M: int) -> int:
    """The least j with ``⌈2^(j/256)⌉ >= M``."""
    j = max(0, int(math.floor(GRID_STEPS * math.log2(M))) - 2) if M > 1 else 0
    while j > 0 and _grid_point(j - 1) >= M:
        j -= 1
    while _grid_point(j) < M:
        j += 1
    return j


def grid_from(M: int, count: int) -> list[int]:
    """The ``count`` smallest points of 𝒢 that are >= M (fewer at its top)."""
    return list(_grid_from(M, count))


@functools.lru_cache(maxsize=1 << 14)
def _grid_from(M: int, count: int) -> tuple[int, ...]:
    out: list[int] = []
    j = _first_index(max(1, M))
    while len(out) < count:
        G = _grid_point(j)
        if G > GRID_TOP:
            break
        if not out or G > out[-1]:
            out.append(G)
        j += 1
    return tuple(out)


@functools.lru_cache(maxsize=8)
def rows(table: str) -> tuple[tuple[float, float], ...]:
    """The rows (κ, m) of Theorem ``table`` ("A" or "D"): K = ⌊κ·G⌋, μ = m·√G at memory G."""
    out: dict[tuple[float, float], None] = {}
    for t, (kappa, mult) in zip(params.grid(), params.table(table)):
        m = mult * max(1.0, 2.0 ** (-t / 2.0))  # μ = mult·max(√M, M/d) = m·√M at x = 2^t
        out[kappa, m] = None
        out[kappa, 0.0] = None
        for f in K_FACTORS:
            out[kappa * f, m] = None
    return tuple(out)


@functools.lru_cache(maxsize=64)
def _store(theorem: PairsTheorem, d: int) -> dict[tuple[int, int], tuple[float, float, float]]:
    """(row, G) -> the theorem's (Λ, Λ_f, Λ_l) at the row's real K = κ·G and μ = m·√G (they do
    not depend on P).  An lru_cache of dicts: cleared with the other caches."""
    return {}


#: At most this many entries per (theorem, d) in :func:`_store` (then it starts again).
STORE_SIZE = 1 << 16


def _lambdas(theorem: PairsTheorem, d: int, pairs: list[tuple[int, int]]
             ) -> tuple[FloatArray, FloatArray, FloatArray]:
    assert theorem.lambdas is not None
    store = _store(theorem, d)
    missing = [rg for rg in dict.fromkeys(pairs) if rg not in store]
    if missing:
        if len(store) + len(missing) > STORE_SIZE:
            store.clear()
            missing = list(dict.fromkeys(pairs))
        rr = rows(theorem.table)
        Gs = [G for _, G in missing]
        Ks = [rr[r][0] * G for r, G in missing]
        mus = [rr[r][1] * math.sqrt(G) for r, G in missing]
        lam, lam_f, lam_l = theorem.lambdas(d, Gs, Ks, mus)  # type: ignore[arg-type]
        for rg, a, b, c in zip(missing, lam.tolist(), lam_f.tolist(), lam_l.tolist()):
            store[rg] = (a, b, c)
    got = np.array([store[rg] for rg in pairs], dtype=np.float64).reshape(-1, 3)
    return got[:, 0], got[:, 1], got[:, 2]


@functools.lru_cache(maxsize=1024)
def _at(theorem: PairsTheorem, d: int, G: int) -> tuple[FloatArray, FloatArray, FloatArray,
                                                         FloatArray]:
    """Every row's (Λ, Λ_f, Λ_l) at G and its K = ⌊κG⌋ (as floats): what the first step of
    :func:`_closed` looks at (cached: it does not depend on P)."""
    rr = rows(theorem.table)
    lams = _lambdas(theorem, d, [(r, G) for r in range(len(rr))])
    Ks = np.floor(np.array([k for k, _ in rr], dtype=np.float64) * G)
    return (*lams, Ks)


def row_value(theorem: PairsTheorem, P: int, d: int, r: int, G: int) -> int:
    """T_f(P, d, G) of row ``r`` at grid point G (one evaluation: the reference of the tests)."""
    from .segments import segments_bound

    assert theorem.work is not None
    W = theorem.work(P, d, np.zeros(1))
    lam = _lambdas(theorem, d, [(r, G)])
    return segments_bound(W if isinstance(W, int) else float(W[0]),
                          math.floor(rows(theorem.table)[r][0] * G), lam[0][0], lam[1][0],
                          lam[2][0])


def _tails(W: float, kappa: FloatArray, Ga: FloatArray, Gb: FloatArray, lam: FloatArray,
           lam_f: FloatArray, lam_l: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per row, from its maxima at Ga: an upper bound on its values at every G' >= Gb (Gb >= Ga)
    and the largest level n possible there (the envelope of docs/bounds.md §12.1)."""
    s = Ga ** 1.5
    shrink = 1.0 - ROOM
    lf, ll, lm = lam_f / s * shrink, lam_l / s * shrink, lam / s * shrink
    wb = W / Gb ** 1.5 * (1.0 + ROOM)  # W / G'^{3/2} <= wb for G' >= Gb
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        y = (wb - lf - ll) / lm
        nmax = np.where(wb <= lf, 0.0, np.where(wb <= lf + ll, 1.0,
                                                np.floor(y * (1.0 + ROOM)) + 2.0))
        nmax = np.where(np.isnan(nmax), np.inf, nmax)

        def U(n: FloatArray, c: FloatArray) -> FloatArray:
            out: FloatArray = kappa * n * (W / c) ** (2.0 / 3.0) * (1.0 + ROOM)
            return np.where(c > 0.0, out, np.inf)

        u1 = np.where(nmax >= 1.0, U(np.ones_like(lm), lf), 0.0)
        u2 = np.where(nmax >= 2.0, U(np.full_like(lm, 2.0), lf + ll), 0.0)
        top = np.where(np.isfinite(nmax), nmax, 0.0)
        un = np.where(nmax >= 2.0, U(top, lf + ll + (top - 2.0) * lm), 0.0)
        un = np.where(np.isinf(nmax), np.inf, un)
    return np.maximum(np.maximum(u1, u2), un), nmax


def _survivors(best: int, Wf: float, kap: FloatArray, rs: list[int], Gas: list[int],
               lam: FloatArray, lam_f: FloatArray, lam_l: FloatArray) -> dict[int, int]:
    """The rows (of ``rs``, each last evaluated at its G of ``Gas``) whose envelope over the grid
    points after that one exceeds ``best``, each with the least G worth looking at next."""
    Ga = np.array(Gas, dtype=np.float64)
    nxt = [_grid_from(G + 1, 1) for G in Gas]
    Gb = np.array([n[0] if n else math.inf for n in nxt], dtype=np.float64)
    ka = kap[rs]
    tail, nmax = _tails(Wf, ka, Ga, Gb, lam, lam_f, lam_l)
    keep = np.flatnonzero((tail > best) & np.isfinite(Gb))
    out: dict[int, int] = {}
    for k in keep.tolist():
        g, n, kr = Gb[k], nmax[k], ka[k]
        # a value at G' is at most κ·n·G' with n <= nmax: below best/(κ·nmax) none beats it
        if math.isfinite(n) and n >= 1.0 and kr > 0.0:
            g = max(g, math.floor(best / (kr * n) * (1.0 - ROOM)))
        if g <= GRID_TOP:
            out[rs[k]] = int(g)
    return out


def closed_monotone(theorem: PairsTheorem, P: int, d: int, M: int
                    ) -> tuple[int, int, float, int]:
    """(value, K, μ, G): ``C(P, d, M)``, the largest value of any row at any grid point G >= M
    (module docstring), with the row's K and μ and the G where it is reached (0, 0, 0.0, M when
    no term is positive).  Exact: every row is followed along the grid until its envelope is
    at most the best value found."""
    return _closed(theorem, P, d, M)


@functools.lru_cache(maxsize=4 * 4096)
def _closed(theorem: PairsTheorem, P: int, d: int, M: int) -> tuple[int, int, float, int]:
    from .segments import segments_bound_many

    best: tuple[int, int, float, int] = (0, 0, 0.0, M)
    if P <= 0 or M > GRID_TOP:
        return best
    assert theorem.work is not None
    W = theorem.work(P, d, np.zeros(1))
    Wf = float(W) if isinstance(W, int) else float(np.max(W))
    rr = rows(theorem.table)
    kap = np.array([k for k, _ in rr], dtype=np.float64)
    # the first step: every row at the first grid point (its maxima cached per (d, G))
    first = grid_from(M, 1)
    if not first:
        return best
    G1 = first[0]
    lam, lam_f, lam_l, Kf = _at(theorem, d, G1)
    Ks = [int(k) for k in Kf.tolist()]
    vals = segments_bound_many(W, Ks, lam, lam_f, lam_l)
    i = max(range(len(vals)), key=lambda k: (vals[k], -k))
    if vals[i] > 0:
        best = (vals[i], Ks[i], rr[i][1] * math.sqrt(G1), G1)
    start = _survivors(best[0], Wf, kap, list(range(len(rr))), [G1] * len(rr), lam, lam_f,
                       lam_l)
    count = 2
    while start:
        pairs: list[tuple[int, int]] = []
        last: list[int] = []
        for r, g in start.items():
            Gs = _grid_from(g, count)
            if Gs:
                pairs.extend((r, G) for G in Gs)
                last.append(len(pairs) - 1)
        if not pairs:
            break
        lam, lam_f, lam_l = _lambdas(theorem, d, pairs)
        Ks = [math.floor(rr[r][0] * G) for r, G in pairs]
        vals = segments_bound_many(W, Ks, lam, lam_f, lam_l)
        for (r, G), K, v in zip(pairs, Ks, vals):
            if v > best[0] or (v == best[0] and v > 0 and G < best[3]):
                best = (v, K, rr[r][1] * math.sqrt(G), G)
        sel = np.array(last, dtype=np.intp)
        start = _survivors(best[0], Wf, kap, [pairs[i][0] for i in last],
                           [pairs[i][1] for i in last], lam[sel], lam_f[sel], lam_l[sel])
        count = min(32, count * 2)
    return best
