"""Theorem F (docs/bounds.md §5.1): the trivial reads and writes plus what one cut forces.

Cut the execution at a boundary τ between two operations.  A *crossing* value is an input used by an
event before τ and by one after, or a value produced before τ and used after it in an output's
final derivation.  One not resident at τ costs an I/O beyond the trivial ones (a second read of an
input, or the read of a stored intermediate), and at most M are resident, so

    Q >= trivial + (crossing values at τ) - M.

The number of crossing values is bounded below, for the prefix masks (no mask, causal in either
alignment; any Nq, Nkv, grouped heads) by an isoperimetric argument on the products
``p_ij·v_jl`` of one key/value head's group: per column l the bipartite graph rows × keys, a
column whose products are split between "before" and "after" has many rows (output trees) or keys
(V entries) on both sides (:func:`_kappas`), and columns split at different places leave pairs whose
weight is needed on both sides (a stored pair value, or the whole q_i and k_j rows read twice).
Each K/V group is cut on its own (the charged reads of different groups carry different values),
so the gain is multiplied by the number of groups.

The bound is non-increasing in M (the only M-dependence is the "- M" and the products one I/O-free
stretch can do, which grows with M), so it is closed under more memory by itself (§12.1).  A call
is O(1) in N: ``_CELLS`` binary searches of ``O(log N)`` closed-form steps.

>>> reread_cut(N=300, d=96, M=8169, causal=True).value  # the trivial bound: 115,104
126039
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..core.workload import Shape
from .base import Bound, attention_shape, check_M, keyword_sizes
from .exact import trivial_for

__all__ = ["Rows", "crossing_lower", "reread_cut", "reread_cut_for", "rows_of"]

#: Cells of the fixed grid over a column's product count (the adversary's per-column split).
_CELLS = 64
#: Where the cut is tried: these fractions of the group's products done before it.
_FRACTIONS = tuple(j / 20 for j in range(1, 20))
#: Relative width at which the search for κ stops (its lower end is returned): fine for groups
#: with at most _SMALL rows or keys, coarse (fewer steps) above.
_TOL_SMALL, _TOL_LARGE, _SMALL = 1e-4, 2e-2, 100_000

_ASSUMPTIONS = (
    "(S) each required score S_ij is a sum of the d products q_il·k_jl, any order",
    "(W) the weight multiplying v_j in O_i comes from S_ij by a chain of pair-specific operations",
    "(O) each O_il is a sum of one product p_ij·v_jl per required pair, with rescalings",
    "recomputation allowed; fast memory holds <= M words between operations",
)


@dataclass(frozen=True)
class Rows:
    """One key/value head's group: ``hq`` query heads, each with rows seeing key prefixes
    [0, h) for h in ``lo..hi`` (one row each; the *linear* rows) and ``full`` rows seeing all
    ``nkv`` keys; rows that see fewer than two keys have no required pair and are left out."""

    hq: int
    lo: int
    hi: int
    full: int
    nkv: int

    @property
    def linear(self) -> int:
        return max(0, self.hi - self.lo + 1)

    @property
    def rows(self) -> int:
        return self.hq * (self.linear + self.full)

    @property
    def pairs(self) -> int:
        """Required pairs of the group (products per column)."""
        lin = (self.lo + self.hi) * self.linear // 2 if self.linear else 0
        return self.hq * (lin + self.full * self.nkv)


def rows_of(shape: Shape) -> Rows | None:
    """The row structure of ``shape``'s groups, or None for a mask this theorem does not cover
    (a sliding window or a block-sparse layout: their rows do not see key prefixes)."""
    if shape.window is not None or shape.block_mask is not None:
        return None
    Nq, Nkv, hq = shape.Nq, shape.Nkv, shape.group
    if Nkv < 2:
        return Rows(hq, 2, 1, 0, Nkv)
    if not shape.causal:
        return Rows(hq, 2, 1, Nq, Nkv)
    off = shape.offset  # row r sees keys [0, clip(r + 1 + off, 0, Nkv))
    full = max(0, Nq - max(0, Nkv - 1 - off))
    return Rows(hq, max(2, 1 + off), min(Nkv - 1, Nq + off), full, Nkv)


def _line_max(r: Rows, k: np.ndarray) -> np.ndarray:
    """An upper bound on max over x + v = k (x, v >= 0) of F(x, v) = S(v) + T(x) + x·v, for each
    k below min(rows, keys) (docs/bounds.md §5.1 step 4), with the majorants
    S(v) <= hq·(m(m+1) - lo(lo-1))/2, m = min(v, hi), for v >= lo (0 below), and T(x) = 0 for
    x < hq·full, else T(x) <= hq·(u(u+1)/2 + full·(nkv - hi + u)), u = x/hq - full.  Between the
    breakpoints x = hq·full, k - lo, k - hi each is a quadratic in x: its maximum over a piece is
    at an end or at its vertex, all of which are evaluated."""
    hq, lo, hi, full = float(r.hq), float(r.lo), float(r.hi), float(r.full)
    c_s = lo * (lo - 1.0) / 2.0
    xf = hq * full
    k = np.asarray(k, dtype=float)[None, :]  # (one column per k: the pieces are rows)

    linear = hi >= lo  # (no linear rows: S = 0 and no piece has it, the same floats)

    def F(x: np.ndarray) -> np.ndarray:
        v = k - x
        s: np.ndarray | float = 0.0
        if linear:
            m = np.minimum(v, hi)
            s = np.where(v >= lo, hq * (m * (m + 1.0) / 2.0 - c_s), 0.0)
        u = x / hq - full
        t = np.where(x >= xf, hq * (u * (u + 1.0) / 2.0 + full * (r.nkv - hi + u)), 0.0)
        if not linear:  # (s = 0.0 and t >= +0: 0.0 + t is t)
            return t + x * v
        return s + t + x * v

    # the breakpoints 0, k, hq·full, k - lo, k - hi clipped to [0, k], sorted per k
    # (clipped by maximum then minimum, as np.clip: no NaN, no −0 here)
    kk = k[0]
    xc = np.minimum(max(xf, 0.0), kk)
    # (0 <= e1 <= e2 <= k once clipped, e1, e2 = k - hi, k - lo with linear rows, else
    # k - lo, k - hi: hq·full inserted by min/max, the sorted values of the five)
    ends = np.minimum(np.maximum(k - (np.array([[hi], [lo]]) if linear else
                                      np.array([[lo], [hi]])), 0.0), k)
    X = np.empty((9, k.shape[1]))  # the five breakpoints, then the four vertices
    br = X[:5]
    np.minimum(0.0, xc, out=br[0])
    np.maximum(0.0, np.minimum(ends[0], xc), out=br[1])
    np.maximum(ends[0], np.minimum(ends[1], xc), out=br[2])
    np.maximum(ends[1], np.minimum(kk, xc), out=br[3])
    np.maximum(kk, xc, out=br[4])
    a, b = br[:-1], br[1:]
    mid = (a + b) / 2.0
    t_on = mid >= xf
    if linear:
        s_on = (k - mid >= lo) & (k - mid <= hi)
        q2 = -1.0 + np.where(s_on, hq / 2.0, 0.0) + np.where(t_on, 0.5 / hq, 0.0)
        q1 = k - np.where(s_on, hq * (k + 0.5), 0.0) + np.where(t_on, 0.5, 0.0)
    else:  # (-1.0 + 0.0 and k - 0.0 are -1.0 and k exactly)
        q2 = -1.0 + np.where(t_on, 0.5 / hq, 0.0)
        q1 = k + np.where(t_on, 0.5, 0.0)
    xv = a.copy()  # (the vertex where q2 < 0, else a: the division only there)
    np.divide(-q1, 2.0 * q2, out=xv, where=q2 < 0.0)
    X[5:] = np.where((a < xv) & (xv < b), xv, a)
    # (one pass over the ends and the vertices: elementwise; a maximum in any order)
    return F(X).max(axis=0)


def _kappas(r: Rows, t: np.ndarray) -> np.ndarray:
    """For each t, a lower bound on the rows plus keys of one column split by the cut when
    min(products before, products after) in that column is t (§5.1 step 4): the least integer k
    with max_{x+v=k} F >= t, capped at min(rows, keys), to a relative 10⁻⁴ (2·10⁻² when rows and
    keys both exceed 10⁵, where a search of a few steps keeps a cold call cheap; the search
    returns the lower end, so either is a valid lower bound).  It lies in [⌈t/D⌉, ⌈2√t⌉ + 1]: a
    split row or key carries at most D = max(keys, rows) products of the side it bounds, and
    F >= x·v >= k²/4 at x = v = k/2.  The line maximum is non-decreasing in k (F grows in x and
    in v): a binary search, all t at once, as :func:`_kappas_stepwise` steps it (the same steps
    and ends), in few rounds (docs/bounds.md §12.2): each round every open bisection takes the
    paths it would take if its answer were a guess g, g − 1 or g + 1 (:func:`_path`), every node
    of those paths is evaluated in one call of :func:`_line_max`, and each bisection then takes
    the scalar steps through the nodes evaluated, up to the first node it needs that is not
    there (a wrong guess costs a round, never a step).  The first guess (:func:`_first_guess`)
    is the answer where the line maximum is the largest of k²/4, S(k) and T(k) (no mask; causal
    rows of several query heads); every later guess puts √(line maximum) linear in k between the
    nearest nodes on either side of t (:func:`_guess`)."""
    t = np.asarray(t, dtype=float)
    tol = _TOL_SMALL if min(r.rows, r.nkv) <= _SMALL else _TOL_LARGE
    lo = np.ceil(t / max(r.nkv, r.rows)).astype(np.int64)
    hi = np.where(t > 0, np.minimum(min(r.rows, r.nkv), np.ceil(2.0 * np.sqrt(t)) + 1), 0)
    hi = np.maximum(hi.astype(np.int64), lo)
    live = np.nonzero(hi - lo > tol * lo)[0]
    if not len(live):
        return lo
    # √ of the line maximum each t needs (inflated as the test): where the guesses aim
    aim = np.sqrt(np.maximum(t - 1.0, 0.0) / (1.0 + 1e-9))
    guess = np.minimum(np.maximum(_first_guess(r, aim), lo), hi).astype(np.int64).tolist()
    aims = aim.tolist()
    los, his = lo.tolist(), hi.tolist()
    open_ = live.tolist()
    known: dict[int, dict[int, tuple[float, bool]]] = {i: {} for i in open_}
    while open_:
        # the paths each bisection takes if its answer is its guess, or one either side
        ks: list[int] = []
        spans: list[tuple[int, int, int]] = []
        walks: list[tuple[list[bool], int, int]] = []
        for i in open_:
            want, pred, A, B = _walk(los[i], his[i], guess[i], tol)
            spans.append((i, len(ks), len(ks) + len(want)))
            walks.append((pred, A, B))
            ks.extend(want)
        tk = np.repeat(t[[i for i, _, _ in spans]], [e - b for _, b, e in spans])
        lm = _line_max(r, np.array(ks, dtype=float))
        okl = (lm * (1.0 + 1e-9) + 1.0 >= tk).tolist()
        lml: list[float] = []  # (the line maxima as floats: only off a guess's path)
        nxt = []
        for (i, b, e), (pred, A, B) in zip(spans, walks):
            # every test on the guess's path as predicted: the bisection ends where it does
            if okl[b:b + len(pred)] == pred and not B - A > tol * A:
                los[i], his[i] = A, B
                continue
            # else the scalar steps, as far as the nodes evaluated go
            # (along the path of the guess while it is right: its nodes in order; off it, the
            # nodes by value, this round's and the earlier ones')
            nodes = None
            j = b
            A, B = los[i], his[i]
            while B - A > tol * A:
                mid = (A + B) // 2
                if j < e and ks[j] == mid:
                    ok = okl[j]
                    j += 1
                else:
                    if nodes is None:
                        nodes = known[i]
                        lml = lml or lm.tolist()
                        nodes.update(zip(ks[b:e], zip(lml[b:e], okl[b:e])))
                    got = nodes.get(mid)
                    if got is None:
                        break
                    ok = got[1]
                if ok:
                    B = mid
                else:
                    A = mid + 1
            los[i], his[i] = A, B
            if B - A > tol * A:
                if nodes is None:
                    nodes = known[i]
                    lml = lml or lm.tolist()
                    nodes.update(zip(ks[b:e], zip(lml[b:e], okl[b:e])))
                guess[i] = _guess(nodes, aims[i], A, B)
                nxt.append(i)
        open_ = nxt
    return np.array(los, dtype=np.int64)


def _first_guess(r: Rows, aim: np.ndarray) -> np.ndarray:
    """A first guess of each κ: the least k (real) at which one of three values on the line
    x + v = k that :func:`_line_max` bounds from below reaches aim² — x·v at x = v = k/2 (k²/4),
    S(k) at x = 0 and T(k) at v = 0, each the root of a quadratic — so at least the answer,
    and the answer where the line maximum is the largest of them (F convex along the line, as
    without a mask or with the causal rows of several query heads).  Only a guess."""
    need = aim * aim
    out = 2.0 * aim  # k²/4 >= need
    hq, lo, hi, full = float(r.hq), float(r.lo), float(r.hi), float(r.full)
    with np.errstate(invalid="ignore"):
        if r.hi >= r.lo:  # S(k) = hq·(m(m+1) − lo(lo − 1))/2, m = min(k, hi), k >= lo
            m = (np.sqrt(1.0 + 4.0 * (2.0 * need / hq + lo * (lo - 1.0))) - 1.0) / 2.0
            out = np.where(m <= hi, np.minimum(out, np.maximum(m, lo)), out)
        # T(k) = hq·(u(u + 1)/2 + full·(nkv − hi + u)), u = k/hq − full, k >= hq·full
        b = 0.5 + full
        u = np.sqrt(b * b - 2.0 * (full * (r.nkv - hi) - need / hq)) - b
        out = np.minimum(out, np.where(np.isfinite(u), hq * (np.maximum(u, 0.0) + full), out))
    # (nan_to_num's NaN -> 0, +inf -> 0, -inf -> the least float, in two calls)
    out = np.where(np.isfinite(out), out, np.where(out == -np.inf, _LEAST, 0.0))
    return np.ceil(out)


_LEAST = float(np.finfo(np.float64).min)


def _path(lo: int, hi: int, g: int, tol: float) -> list[int]:
    """The nodes the bisection of [lo, hi] visits if its answer is g, g − 1 or g + 1 (their
    paths part where the node is g − 1 or g, and go on from there)."""
    return _walk(lo, hi, g, tol)[0]


def _walk(lo: int, hi: int, g: int, tol: float
          ) -> tuple[list[int], list[bool], int, int]:
    """:func:`_path`'s nodes (g's path first, then the two tails), each test's outcome along
    g's path (``node >= g``) and the bracket [A, B] where that path ends: a bisection whose
    tests there are these outcomes ends at [A, B] (the same steps)."""
    out: list[int] = []
    pred: list[bool] = []
    tails = []
    A, B = lo, hi
    g1 = g - 1
    while B - A > tol * A:
        mid = (A + B) // 2
        out.append(mid)
        if mid == g1:
            tails.append((A, mid, g1))  # (towards g − 1: the left half)
        elif mid == g:
            tails.append((mid + 1, B, g + 1))  # (towards g + 1: the right half)
        if mid >= g:
            B = mid
            pred.append(True)
        else:
            A = mid + 1
            pred.append(False)
    end = (A, B)
    for A, B, h in tails:
        while B - A > tol * A:
            mid = (A + B) // 2
            out.append(mid)
            if mid >= h:
                B = mid
            else:
                A = mid + 1
    return out, pred, end[0], end[1]


def _guess(nodes: dict[int, tuple[float, bool]], aim: float, lo: int, hi: int) -> int:
    """The next guess of a bisection's answer in [lo, hi], from the nodes k -> (line maximum,
    test) evaluated: √(line maximum) linear in k between the largest node that fails the test
    and the least that passes (the middle without both)."""
    below = [(k, v) for k, (v, ok) in nodes.items() if not ok]
    above = [(k, v) for k, (v, ok) in nodes.items() if ok]
    if below and above:
        ka, va = max(below)
        kb, vb = min(above)
        sa, sb = math.sqrt(max(va, 0.0)), math.sqrt(max(vb, 0.0))
        if kb > ka and sb > sa:
            x = ka + (kb - ka) * (aim - sa) / (sb - sa)
            if math.isfinite(x):
                return min(max(math.ceil(x), lo), hi)
    return (lo + hi) // 2


def _kappas_stepwise(r: Rows, t: np.ndarray) -> np.ndarray:
    """:func:`_kappas` one bisection step per round (the reference its test compares with)."""
    t = np.asarray(t, dtype=float)
    tol = _TOL_SMALL if min(r.rows, r.nkv) <= _SMALL else _TOL_LARGE
    lo = np.ceil(t / max(r.nkv, r.rows)).astype(np.int64)
    hi = np.where(t > 0, np.minimum(min(r.rows, r.nkv), np.ceil(2.0 * np.sqrt(t)) + 1), 0)
    hi = np.maximum(hi.astype(np.int64), lo)
    while True:
        open_ = hi - lo > tol * lo
        if not open_.any():
            return lo
        mid = (lo + hi) // 2
        ok = _line_max(r, mid.astype(float)) * (1.0 + 1e-9) + 1.0 >= t
        hi = np.where(open_ & ok, mid, hi)
        lo = np.where(open_ & ~ok, mid + 1, lo)


def _psi(c: np.ndarray, d: int) -> np.ndarray:
    """Crossing values forced by c pairs whose weight is needed on both sides: min(c, 2d√c)."""
    c = np.maximum(np.asarray(c, dtype=float), 0.0)
    return np.minimum(c, 2.0 * d * np.sqrt(c))


@functools.lru_cache(maxsize=4096)
def _cells(r: Rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fixed grid over a column's count a in [0, P]: a1, a2 and κ(min(a1, P - a2)) per cell
    (the cells are symmetric about P/2: each κ is computed once)."""
    P = float(r.pairs)
    a1 = P * np.arange(_CELLS) / _CELLS
    a2 = P * np.arange(1, _CELLS + 1) / _CELLS
    t = np.floor(np.maximum(np.minimum(a1, P - a2), 0.0))
    uniq, inv = np.unique(t, return_inverse=True)
    return a1, a2, _kappas(r, uniq)[inv].astype(float)


def crossing_lower(r: Rows, d: int, m_lo: np.ndarray, m_hi: np.ndarray) -> np.ndarray:
    """For each window [m_lo, m_hi] of the group's products done before the cut (of d·P), a lower
    bound on the crossing values: min over the adversary's per-column split (§5.1 step 5)."""
    a1, a2, kap = _cells(r)
    a_lo = np.asarray(m_lo, dtype=float)[:, None] / d  # the column average lies in [a_lo, a_hi]
    a_hi = np.asarray(m_hi, dtype=float)[:, None] / d
    low = np.where(a1 <= a_hi, d * kap + _psi(a_lo - np.minimum(a2, a_hi), d), np.inf)
    high = np.where(a2 >= a_lo, d * kap + _psi(np.maximum(a1, a_lo) - a_hi, d), np.inf)
    return np.minimum(low.min(axis=1), high.min(axis=1))


def _window(M: int, d: int) -> float:
    """Products one I/O-free stretch can do: √(M·g(M)), g(s) = max(s²/4, s³/(27d²)) (§5 step 5)."""
    return math.sqrt(M * max(M * M / 4.0, M ** 3 / (27.0 * d * d)))


def reread_cut_for(shape: Shape, M: int) -> Bound:
    """Theorem F of a Shape (all its heads): ``trivial + groups·max(0, crossing - M)``, one cut
    in each K/V group (§5.1)."""
    M = check_M(M)
    triv = trivial_for(shape)
    r = rows_of(shape)
    value, note = triv.value, "the cut adds nothing here"
    # every crossing count below is at most d·min(rows, keys) + 2d√P: when M is larger, skip
    if r is not None and r.pairs > 0 and M < shape.d * (min(r.rows, r.nkv) + 2 * math.isqrt(
            r.pairs) + 2):
        d = shape.d
        total = float(r.pairs) * d
        m_hi = total * np.array(_FRACTIONS)
        cross = float(crossing_lower(r, d, np.maximum(0.0, m_hi - _window(M, d)), m_hi).max())
        extra = math.floor(cross) - M
        if extra > 0:  # one cut per K/V group: the groups' charged reads are distinct (§5.1)
            value = triv.value + shape.n_kv_heads * extra
            note = f"crossing values >= {math.floor(cross)} at a cut in each of " \
                   f"{shape.n_kv_heads} K/V group(s)"
    return Bound(value, "Theorem F: trivial reads and writes plus a cut's crossing values "
                 "(docs/bounds.md §5.1)", (*_ASSUMPTIONS, note), True, "reread_cut",
                 "large cache (M >= Nd/4)" if 4 * M >= shape.Nq * shape.d else "")


@keyword_sizes()
def reread_cut(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
               heads: int = 1, kv_heads: int | None = None, window: int | None = None) -> Bound:
    """Theorem F: ``Q >= trivial + crossing - M`` (docs/bounds.md §5.1).  For a sliding window
    (rows do not see key prefixes) it returns the trivial bound's value."""
    return reread_cut_for(attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads,
                                          kv_heads=kv_heads, window=window), M)
