"""Exploration (issue 25, not a bound): what a potential on Theorem B's boundary words would give.

Theorem B (docs/bounds.md §6) prices a segment by what it imports (Q, K, V entries, pair values)
and exports (pair values, O pieces) with no potential (μ = 0).  §6.1 states the per-segment
inequality with a potential Φ(σ) = λ_p·(pair-value words of σ) + λ_o·(O words of σ), which
telescopes by Lemma 6 with any real λ_p, λ_o (the best found have λ_o ≈ 2λ_p: a value climbs one
level per product family, inputs → pair values → O).  This
script maximises that per-segment problem *heuristically* (a grid, then SLSQP from its best
points, and random restarts): it is NOT certified (it can under-estimate the maximum Λ, hence
over-estimate the constant) and nothing in attnio uses it; ``--certify`` checks it from above.  It prints, in units P·d/√M (the
many-segment limit K·(2d − ν)/(d·Λ) at M = 1, D = d²/M; ν = 0 and r = 0 in the limit D = ∞):

* the model without potential (must reproduce Theorem B's tabulated constant: a check of the model);
* the model with the potential, at the best (K/M, μ, ν) a Nelder–Mead search finds.

Run:  python benchmarks/explore_potential_b.py [--D 4 1 ...] [--small] [--certify]
  --small    the M << d² limit only (r = 0, ab/d² = 0)
  --certify  at the parameters found, a certified lower bound on the constant: a branch and bound
             over (Qb, y, e, z, (a + b)/2) whose value is never below the maximum of the
             per-segment problem (up to float rounding), :func:`certified_lam`
"""

from __future__ import annotations

import argparse
import itertools
import math

import numpy as np
from scipy.optimize import minimize


def simplex(n: int, k: int, tot: float) -> np.ndarray:
    return np.array([c for c in itertools.product(range(k + 1), repeat=n) if sum(c) <= k],
                    float) * tot / k


def work(Qb, y, e, z, s, D, nu):
    """max over r of √(s²(e + r)) − νr + √(c·z·(y + s²/D)), a = b = s, c = Qb − 2s (§6.1 step 5);
    D = inf: the small-cache limit."""
    c = np.maximum(Qb - 2 * s, 0.0)
    piv = y + (0.0 if D == math.inf else s * s / D)
    if nu > 0:
        r = np.clip(s * s / (4 * nu * nu) - e, 0.0, piv)
    else:
        r = piv if D != math.inf else 0.0
    return s * np.sqrt(e + r) - nu * r + np.sqrt(c * z * piv)


def value(x, kappa, lp, lo, nu, D):
    """The segment's work minus the potential's change, Φ = λ_p·(pair words) + λ_o·(O words).
    x = (o, p, i, o', p', i', R_in, R_y, W_e, W_z, t): start words (O, pair, input), end words,
    reads of inputs and pair values, writes of pair values and O values, s = t·Qb/2."""
    o, p, i, o2, p2, i2, rq, ry, we, wz, t = np.maximum(np.asarray(x, float), 0.0)
    t = min(t, 1.0)
    Qb = i + rq
    w = float(work(Qb, p + ry, p2 + we, o2 + wz, t * Qb / 2, D, nu))
    return w - lp * (p2 - p) - lo * (o2 - o)


def lam(kappa, lp, lo, nu, D, restarts=8, seed=0):
    """A heuristic (not certified) maximum of :func:`value` over a middle segment, M = 1."""
    S = simplex(3, 4, 1.0)
    RW = simplex(4, 6, kappa)
    RW = RW[np.isclose(RW.sum(1), kappa)]
    ts = np.linspace(0, 1, 9)
    o, p, i = (S[:, k][:, None, None, None] for k in range(3))
    o2, p2, i2 = (S[:, k][None, :, None, None] for k in range(3))
    rq, ry, we, wz = (RW[:, k][None, None, :, None] for k in range(4))
    t = ts[None, None, None, :]
    Qb = i + rq
    val = work(Qb, p + ry, p2 + we, o2 + wz, t * Qb / 2, D, nu) - lp * (p2 - p) - lo * (o2 - o)
    cons = [{"type": "ineq", "fun": lambda x: 1 - x[0] - x[1] - x[2]},
            {"type": "ineq", "fun": lambda x: 1 - x[3] - x[4] - x[5]},
            {"type": "ineq", "fun": lambda x: kappa - x[6] - x[7] - x[8] - x[9]},
            {"type": "ineq", "fun": lambda x: 1 - x[10]}]
    rng = np.random.default_rng(seed)
    starts = []
    for f in np.argsort(val, axis=None)[-8:]:
        k = np.unravel_index(f, val.shape)
        starts.append(np.array([*S[k[0]], *S[k[1]], *RW[k[2]], ts[k[3]]]))
    for _ in range(restarts):
        starts.append(np.concatenate([rng.dirichlet([1] * 4)[:3], rng.dirichlet([1] * 4)[:3],
                                      rng.dirichlet([1] * 4) * kappa, rng.uniform(0, 1, 1)]))
    best = -math.inf
    for x0 in starts:
        best = max(best, value(x0, kappa, lp, lo, nu, D))
        r = minimize(lambda x: -value(x, kappa, lp, lo, nu, D), x0, method="SLSQP",
                     bounds=[(0, None)] * 11, constraints=cons)
        if all(c["fun"](r.x) >= -1e-9 for c in cons):
            best = max(best, value(r.x, kappa, lp, lo, nu, D))
    return best


def constant(v, D, with_potential=True):
    """v = (log K/M, [λ_p/√M, λ_o/√M,] [ν/√M])."""
    kappa = math.exp(v[0])
    lp, lo = (v[1], v[2]) if with_potential else (0.0, 0.0)
    if D == math.inf:
        return 2 * kappa / lam(kappa, lp, lo, 0.0, D)
    nu, d = abs(v[-1]), math.sqrt(D)
    if nu >= 2 * d:
        return -1.0
    return kappa * (2 * d - nu) / d / lam(kappa, lp, lo, nu, D)


def best_constant(D, with_potential):
    starts = ([[math.log(3), 0.3, 0.6, 0.8], [math.log(2), 0.2, 0.4, 0.5]] if with_potential
              else [[math.log(3), 0.7]])
    if D == math.inf:
        starts = [s[:-1] for s in starts]
    best = None
    for v0 in starts:
        r = minimize(lambda v: -constant(v, D, with_potential), v0, method="Nelder-Mead",
                     options={"maxiter": 40, "xatol": 1e-3, "fatol": 1e-4})
        if best is None or r.fun < best.fun:
            best = r
    return -best.fun, best.x


#: Parameters the search found (d²/M, K/M, λ_p/√M, λ_o/√M, ν/√M); ν "large" for d²/M = ∞ (the
#: work's factor (2d − ν)/d tends to 2 there, and ν·r keeps the root pieces out).
FOUND = ((math.inf, 2.97, 0.305, 0.61, 5.0), (4.0, 2.90, 0.357, 0.696, 0.558),
         (2.0, 2.641, 0.348, 0.692, 0.561), (1.0, 1.952, 0.34, 0.667, 0.452),
         (0.5, 1.246, 0.327, 0.643, 0.334))


def certify(rtol: float = 0.02) -> None:
    """The heuristic constant and a certified lower bound on it (:func:`certified_lam`) at FOUND."""
    for D, kappa, lp, lo, nu in FOUND:
        w = 2.0 if D == math.inf else 2.0 - nu / math.sqrt(D)
        h = kappa * w / lam(kappa, lp, lo, 0.0 if D == math.inf else nu, D)
        ub, n = certified_lam(kappa, lp, lo, nu, D, rtol=rtol, max_boxes=30_000_000)
        print(f"d²/M = {D:g}, K/M {kappa}, λ_p {lp}, λ_o {lo}, ν {nu}: heuristic {h:.4f}, "
              f"certified >= {kappa * w / ub:.4f} ({n} boxes, rtol {rtol})", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=float, nargs="*", default=[4.0, 2.0, 1.0, 0.5])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--certify", action="store_true",
                    help="only the certified check at the parameters found (about a minute)")
    args = ap.parse_args(argv)
    if args.certify:
        certify()
        return 0
    for D in ([math.inf] if args.small else [math.inf, *args.D]):
        c0, x0 = best_constant(D, False)
        c1, x1 = best_constant(D, True)
        print(f"d²/M = {D:g}: no potential {c0:.4f} (K/M {math.exp(x0[0]):.3f}), "
              f"potential {c1:.4f} (K/M {math.exp(x1[0]):.3f}, λ_p/√M {x1[1]:.3f}, "
              f"λ_o/√M {x1[2]:.3f}" + ("" if D == math.inf else f", ν/√M {abs(x1[-1]):.3f}")
              + ")", flush=True)
    return 0



# ---------------------------------------------------------------------------- a certified upper bound
def _f1(s, e, piv, nu):
    """max over 0 <= r <= piv of s·√(e + r) − ν·r (concave in r): non-decreasing in s, e, piv."""
    if nu > 0:
        r = np.clip(s * s / (4 * nu * nu) - e, 0.0, piv)
    else:
        r = piv
    return s * np.sqrt(e + r) - nu * r


def _cost(Qb, y, e, z, kappa, lp, lo, kind):
    """The least potential change λ_p(p' − p) + λ_o(o' − o) that lets a segment reach the aggregates
    (Qb, y, e, z) (vectorised; +inf where it cannot), for λ_o >= λ_p >= 0.  The start memory not
    holding inputs (i) or pair values (p) holds O values (credit λ_o each); a unit held instead of
    read or written costs λ_o (i), λ_o − λ_p (p), λ_p (p'), λ_o (o'); the K I/Os cover the rest,
    so the deficit δ = Qb + y + e + z − K is held, cheapest first within the start (i + p <= 1)
    and end (p' + o' <= 1) capacities (a polymatroid: greedy is optimal).  Non-decreasing in each
    aggregate (every unit cost >= 0).  kind: "mid", "first" (nothing held at the start), "last"
    (nothing held at the end)."""
    delta = np.maximum(Qb + y + e + z - kappa, 0.0)
    items = []  # (unit cost, cap array, side)
    if kind != "first":
        items += [(lo - lp, y, 0), (lo, Qb, 0)]
    if kind != "last":
        items += [(lp, e, 1), (lo, z, 1)]
    items.sort(key=lambda t: t[0])
    side_left = [np.ones_like(delta), np.ones_like(delta)]
    need = delta.copy()
    cost = np.zeros_like(delta)
    for c, cap, side in items:
        h = np.minimum(np.minimum(cap, side_left[side]), need)
        cost += c * h
        need -= h
        side_left[side] = side_left[side] - h
    cost = np.where(need > 1e-12, np.inf, cost)
    return cost - (lo if kind != "first" else 0.0)


def certified_lam(kappa, lp, lo, nu, D, kind="mid", rtol=5e-3, max_boxes=4_000_000):
    """An upper bound on the per-segment maximum (never below it, up to float rounding): branch
    and bound over boxes of (Qb, y, e, z, s), s = (a + b)/2 <= Qb/2.  On a box the work is at most
    f1(s⁺, e⁺, y⁺ + s⁺²/D) + √((Qb⁺ − 2s⁻)·z⁺·(y⁺ + s⁺²/D)) and the cost at least cost(lower
    corner); boxes whose bound is within rtol of the best value found are dropped, the rest split
    in two along their widest side."""
    assert lo >= lp >= 0
    top = 1.0 + kappa
    lo_b = np.zeros((1, 5))
    hi_b = np.array([[top, top, top if kind != "last" else kappa, top, top / 2]])
    if kind == "first":
        hi_b[0, :4] = [kappa, kappa, top, top]
        hi_b[0, 4] = kappa / 2
    if kind == "last":
        hi_b[0, 2] = 0.0  # no pair value is exported by the last segment
    inv_d = 0.0 if D == math.inf else 1.0 / D
    best = -math.inf
    boxes = 0
    while len(lo_b):
        boxes += len(lo_b)
        if boxes > max_boxes:
            raise RuntimeError("certified_lam: too many boxes")
        Ql, yl, el, zl, sl = lo_b.T
        Qh, yh, eh, zh, sh = hi_b.T
        feas = 2 * sl <= Qh
        c_lo = _cost(Ql, yl, el, zl, kappa, lp, lo, kind)
        piv_h = yh + sh * sh * inv_d
        ub = (_f1(sh, eh, piv_h, nu) + np.sqrt(np.maximum(Qh - 2 * sl, 0) * zh * piv_h) - c_lo)
        ub = np.where(feas, ub, -np.inf)
        # a feasible point: the lower corner with s = min(s⁻, Q⁻/2)
        s0 = np.minimum(sl, Ql / 2)
        piv0 = yl + s0 * s0 * inv_d
        val = _f1(s0, el, piv0, nu) + np.sqrt(np.maximum(Ql - 2 * s0, 0) * zl * piv0) - c_lo
        val = np.where(np.isfinite(c_lo), val, -np.inf)
        best = max(best, float(val.max()))
        keep = ub > best + rtol * abs(best)
        lo_b, hi_b = lo_b[keep], hi_b[keep]
        if not len(lo_b):
            break
        w = (hi_b - lo_b) / np.array([top, top, top, top, top / 2])
        k = np.argmax(w, axis=1)
        mid = (lo_b[np.arange(len(k)), k] + hi_b[np.arange(len(k)), k]) / 2
        lo2, hi2 = lo_b.copy(), hi_b.copy()
        hi_b[np.arange(len(k)), k] = mid
        lo2[np.arange(len(k)), k] = mid
        lo_b, hi_b = np.concatenate([lo_b, lo2]), np.concatenate([hi_b, hi2])
    return best * (1 + rtol), boxes


if __name__ == "__main__":
    raise SystemExit(main())
