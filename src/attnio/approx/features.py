"""Monomial feature maps: ``<phi(q), psi(k)> = P(scale * <q, k>)`` exactly (up to rounding).

For ``P(x) = sum_{j<=g} c_j x^j`` and ``x = s <q, k>`` the multinomial theorem gives::

    P(s <q,k>) = sum_j c_j s^j sum_{|alpha| = j} (j! / alpha!) q^alpha k^alpha

so with one feature per monomial ``alpha`` (``r = C(d+g, g)`` of them, degree <= g; not the
redundant tensor power with d^j terms per degree) and ``w_alpha = |c_j| |s|^j j!/alpha!``::

    phi(q)_alpha = sqrt(w_alpha) q^alpha,     psi(k)_alpha = sign(c_j s^j) sqrt(w_alpha) k^alpha

Negative coefficients (Chebyshev's, or a negative scale) put their sign on the key side only.

Monomials are ordered by degree, then lexicographically (``itertools.combinations_with_replacement``
order).  Each is stored as a row of ``g`` variable indices padded with ``d`` (a column of ones),
so a block of features is ``prod_t X1[:, idx[:, t]]`` with ``X1 = [X, 1]``; and as a (parent,
variable) pair, for building them degree by degree (the torch kernel does that).

>>> fm = feature_map(2, 2, (1.0, 1.0, 0.5), scale=1.0)   # P(x) = 1 + x + x^2/2, d = 2
>>> fm.r
6
>>> import numpy as np
>>> q, k = np.array([[0.3, -0.2]]), np.array([[0.1, 0.4]])
>>> x = float((q @ k.T)[0, 0])
>>> bool(abs(float((fm.phi(q) @ fm.psi(k).T)[0, 0]) - (1 + x + x * x / 2)) < 1e-15)
True
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ParameterError

__all__ = ["FeatureMap", "MAX_R_COMPUTE", "feature_dim", "feature_map", "monomials"]

MAX_R_COMPUTE = 2_000_000  # feature tables beyond this are not built (counts still work)


def feature_dim(d: int, g: int) -> int:
    """Number of monomials of degree <= g in d variables: C(d + g, g)."""
    return math.comb(d + g, g)


@functools.lru_cache(maxsize=16)
def monomials(d: int, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Tables of the r monomials: (idx (r x g, padded with d), degree, multinomial j!/alpha!,
    parent index, last variable).  Parent/variable are -1 for the constant monomial."""
    r = feature_dim(d, g)
    if r > MAX_R_COMPUTE:
        raise ParameterError(
            f"feature dimension r = C(d+g, g) = {r:,} for d={d}, degree={g} exceeds "
            f"{MAX_R_COMPUTE:,}: too large to compute (count mode and the planner still work)", param="degree")
    idx = np.full((r, max(g, 1)), d, dtype=np.int64)
    deg = np.zeros(r, dtype=np.int64)
    mult = np.ones(r, dtype=np.float64)
    parent = np.full(r, -1, dtype=np.int64)
    var = np.full(r, -1, dtype=np.int64)
    pos: dict[tuple[int, ...], int] = {(): 0}
    m = 1
    for j in range(1, g + 1):
        fj = math.factorial(j)
        for combo in itertools.combinations_with_replacement(range(d), j):
            idx[m, :j] = combo
            deg[m] = j
            denom = 1
            for _, grp in itertools.groupby(combo):
                denom *= math.factorial(len(tuple(grp)))
            mult[m] = fj / denom
            parent[m] = pos[combo[:-1]]
            var[m] = combo[-1]
            if j < g:
                pos[combo] = m
            m += 1
    for a in (idx, deg, mult, parent, var):
        a.setflags(write=False)
    return idx, deg, mult, parent, var


@dataclass(frozen=True)
class FeatureMap:
    """The pair (phi, psi) for head dimension d, degree g, coefficients c and scale s."""

    d: int
    degree: int
    coefficients: tuple[float, ...]
    scale: float

    @property
    def r(self) -> int:
        return feature_dim(self.d, self.degree)

    def weights(self) -> tuple[np.ndarray, np.ndarray]:
        """(query weights sqrt(w), key weights sign * sqrt(w)), each of length r."""
        _, deg, mult, _, _ = monomials(self.d, self.degree)
        c = np.asarray(self.coefficients, dtype=np.float64)[deg]
        sj = self.scale ** deg.astype(np.float64)
        w = np.abs(c) * np.abs(sj) * mult
        root = np.sqrt(w)
        return root, np.sign(c * sj) * root

    def _block(self, X: np.ndarray, lo: int, hi: int, key: bool) -> np.ndarray:
        idx = monomials(self.d, self.degree)[0][lo:hi]
        X1 = np.concatenate([X, np.ones((X.shape[0], 1), dtype=X.dtype)], axis=1)
        F = X1[:, idx[:, 0]].copy()
        for t in range(1, idx.shape[1]):
            F *= X1[:, idx[:, t]]
        wq, wk = self.weights()
        F *= (wk if key else wq)[lo:hi]
        return F

    def phi(self, X: np.ndarray, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Query features of the rows of X (n x d), columns [lo, hi) of the r features."""
        return self._block(np.asarray(X, dtype=np.float64), lo, self.r if hi is None else hi, False)

    def psi(self, X: np.ndarray, lo: int = 0, hi: int | None = None) -> np.ndarray:
        """Key features (signs on this side), columns [lo, hi)."""
        return self._block(np.asarray(X, dtype=np.float64), lo, self.r if hi is None else hi, True)


def feature_map(d: int, degree: int, coefficients, scale: float) -> FeatureMap:
    coeffs = tuple(float(c) for c in coefficients)
    if len(coeffs) != degree + 1:
        raise ParameterError(f"coefficients must have degree+1 = {degree + 1} entries, got {len(coeffs)}", param="coefficients")
    return FeatureMap(int(d), int(degree), coeffs, float(scale))
