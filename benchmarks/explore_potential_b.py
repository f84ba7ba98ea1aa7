"""Exploration (issue 25, not a bound): what a potential on Theorem B's boundary words would give.

Theorem B (docs/bounds.md §6) prices a segment by what it imports (Q, K, V entries, pair values)
and exports (pair values, O pieces) with no potential (μ = 0).  §6.1 states the per-segment
inequality with a potential Φ(σ) = λ_p·(pair-value words of σ) + λ_o·(O words of σ), which
telescopes by Lemma 6 with any real λ_p, λ_o (the best found have λ_o ≈ 2λ_p: a value climbs one
level per product family, inputs → pair values → O).  This
script maximises that per-segment problem *heuristically* (a grid, then SLSQP from its best
points, and random restarts): it is NOT certified (it can under-estimate the maximum Λ, hence
over-estimate the constant) and nothing in attnio uses it.  It prints, in units P·d/√M (the
many-segment limit K·(2d − ν)/(d·Λ) at M = 1, D = d²/M; ν = 0 and r = 0 in the limit D = ∞):

* the model without potential (must reproduce Theorem B's tabulated constant: a check of the model);
* the model with the potential, at the best (K/M, μ, ν) a Nelder–Mead search finds.

Run:  python benchmarks/explore_potential_b.py [--D 4 1 ...] [--small]
  --small  the M << d² limit only (r = 0, ab/d² = 0): about a minute
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--D", type=float, nargs="*", default=[4.0, 2.0, 1.0, 0.5])
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args(argv)
    for D in ([math.inf] if args.small else [math.inf, *args.D]):
        c0, x0 = best_constant(D, False)
        c1, x1 = best_constant(D, True)
        print(f"d²/M = {D:g}: no potential {c0:.4f} (K/M {math.exp(x0[0]):.3f}), "
              f"potential {c1:.4f} (K/M {math.exp(x1[0]):.3f}, λ_p/√M {x1[1]:.3f}, "
              f"λ_o/√M {x1[2]:.3f}" + ("" if D == math.inf else f", ν/√M {abs(x1[-1]):.3f}")
              + ")", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
