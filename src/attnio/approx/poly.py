"""Polynomial approximation of ``exp`` on ``[-R, R]`` with a *proven* relative error.

Attention needs ``exp(s)`` for scores ``s = scale * <q, k>``; the polynomial method (Alman & Song,
arXiv 2302.13214) replaces it by a polynomial ``P`` of low degree ``g`` so that the attention
matrix factorises through ``r = C(d+g, g)`` monomial features (see :mod:`attnio.approx.features`).
What the output error needs is the *relative* error of ``P`` on the range of the scores::

    |P(x) - e^x| <= delta * e^x     for every x in [-R, R]                       (1)

(then ``P > 0`` there, the normaliser ``sum_j P(s_ij)`` is positive, and the output error is at
most ``delta/(1-delta)`` times the range of each column of V: :func:`output_error_factor`).

Two variants, each with a bound we prove here (no curve fitting):

* ``"taylor"``: ``P = sum_{j<=g} x^j/j!``.  Lagrange remainder ``e^xi x^{g+1}/(g+1)!`` with xi
  between 0 and x, so ``|P(x) - e^x| / e^x <= e^{max(0,-x)} |x|^{g+1}/(g+1)!`` and on [-R, R]::

      delta_T(g, R) = e^R * R^{g+1} / (g+1)!

* ``"chebyshev"``: the truncated Chebyshev series of ``e^{R t}`` on ``t in [-1, 1]``, whose
  coefficients are known in closed form, ``e^{R t} = I_0(R) + 2 sum_{k>=1} I_k(R) T_k(t)``
  (I_k the modified Bessel functions of the first kind, computed below from their positive power
  series, so without cancellation).  Since ``|T_k| <= 1``, the truncation at degree g errs by at
  most ``2 sum_{k>g} I_k(R)`` in absolute value, and dividing by ``min e^x = e^-R``::

      delta_C(g, R) = e^R * 2 * sum_{k>g} I_k(R)

  The tail beyond k = g + 40 is bounded with ``I_k(R) <= (R/2)^k / k! * I_0(R)`` (from
  ``(m+k)! >= m! k!`` in the series) and a geometric series.

Both bounds get a small float64 slack for converting to monomial coefficients and evaluating them
(an estimate from the standard rounding bounds ``|fl(sum) - sum| <= n u sum|terms|``), reported
separately in :attr:`PolyApprox.rounding`.

``degree_for(eps, R)`` returns the least degree whose bound is <= eps (and the bound it achieved).
Theory (Aggarwal & Alman, arXiv 2205.06249; used by Alman & Song): the least degree for error
``eps`` on an interval of length ~R is ``Theta(max(R, log(1/eps) / log(log(1/eps)/R)))``; with
``eps = 1/poly(n)`` and ``R = o(log n)`` that is ``o(log n)`` and ``r = C(d+g, g) = n^{o(1)}``
for ``d = O(log n)``, which is Alman & Song's near-linear regime (their entries are bounded by
``B = o(sqrt(log n))`` with scale 1/d, i.e. ``R = B^2``).  At ``B = Theta(sqrt(log n))`` no
truly subquadratic algorithm exists under SETH.

>>> g, bound = degree_for(1e-3, 1.0)
>>> g, bound < 1e-3
(5, True)
>>> p = polynomial(1e-3, 1.0)
>>> import numpy as np
>>> x = np.linspace(-1, 1, 1001)
>>> bool(np.max(np.abs(p(x) - np.exp(x)) / np.exp(x)) <= p.bound)
True
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import ParameterError

__all__ = [
    "EPS_MAX",
    "EPS_MIN",
    "PolyApprox",
    "UnreachableError",
    "VARIANTS",
    "bessel_i",
    "check_eps",
    "chebyshev_bound",
    "degree_for",
    "output_error_factor",
    "polynomial",
    "relative_error_bound",
    "taylor_bound",
]

VARIANTS = ("chebyshev", "taylor")
EPS_MIN = 1e-12  # below this float64 rounding of the feature sums dominates the proven bound
EPS_MAX = 0.5  # delta <= 1/2 keeps P >= e^x / 2 > 0 and the output factor delta/(1-delta) <= 1
MAX_DEGREE = 200
_U = float(np.finfo(np.float64).eps) / 2  # unit roundoff


class UnreachableError(ParameterError):
    """No degree <= MAX_DEGREE reaches eps on [-R, R] (the score range is too large)."""


def check_eps(eps: object) -> float:
    """``eps`` as a float in [EPS_MIN, EPS_MAX], or ParameterError naming it."""
    try:
        e = float(eps)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(f"eps must be a real number in [{EPS_MIN:g}, {EPS_MAX:g}], got {eps!r}", param="eps") from None
    if not (math.isfinite(e) and EPS_MIN <= e <= EPS_MAX):
        raise ParameterError(
            f"eps must be in [{EPS_MIN:g}, {EPS_MAX:g}] (the relative error of the polynomial "
            f"approximation of exp), got {eps!r}", param="eps")
    return e


def _check_R(R: object) -> float:
    try:
        r = float(R)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ParameterError(f"R must be a finite real number >= 0, got {R!r}", param="R") from None
    if not (math.isfinite(r) and r >= 0):
        raise ParameterError(f"R (the radius of the score range [-R, R]) must be finite and >= 0, got {R!r}", param="R")
    return r


@functools.lru_cache(maxsize=4096)
def bessel_i(k: int, x: float) -> float:
    """Modified Bessel function ``I_k(x)`` for integer k >= 0, x >= 0 (positive power series)."""
    if x == 0.0:
        return 1.0 if k == 0 else 0.0
    h = x / 2.0
    lh = math.log(h)
    total = 0.0
    m = 0
    while True:
        term = math.exp((2 * m + k) * lh - math.lgamma(m + 1) - math.lgamma(m + k + 1))
        total += term
        if m > h and term <= 1e-18 * total:
            break
        m += 1
    return total


def taylor_bound(g: int, R: float) -> float:
    """Proven relative error of the degree-g Taylor polynomial of exp on [-R, R]."""
    if R == 0:
        return 0.0
    return math.exp(R + (g + 1) * math.log(R) - math.lgamma(g + 2))


def _tail_I(g: int, R: float) -> float:
    """An upper bound on ``sum_{k>g} I_k(R)``."""
    if R == 0:
        return 0.0
    K = g + 40 + int(R)
    s = sum(bessel_i(k, R) for k in range(g + 1, K + 1))
    # I_k(R) <= (R/2)^k/k! I_0(R); sum_{k>K} of that <= first term / (1 - (R/2)/(K+2))
    first = math.exp((K + 1) * math.log(R / 2) - math.lgamma(K + 2)) * bessel_i(0, R)
    return s + first / (1.0 - (R / 2) / (K + 2))


def chebyshev_bound(g: int, R: float) -> float:
    """Proven relative error of the degree-g truncated Chebyshev series of exp on [-R, R]."""
    return math.exp(R) * 2.0 * _tail_I(g, R)


def relative_error_bound(g: int, R: float, variant: str = "chebyshev") -> float:
    """The proven relative error (1) of degree ``g`` on [-R, R] (without the rounding slack)."""
    variant = _check_variant(variant)
    R = _check_R(R)
    return chebyshev_bound(g, R) if variant == "chebyshev" else taylor_bound(g, R)


def _check_variant(variant: object) -> str:
    if variant not in VARIANTS:
        raise ParameterError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}", param="variant")
    return str(variant)


def _monomial_coefficients(g: int, R: float, variant: str) -> tuple[np.ndarray, float]:
    """Monomial coefficients c_0..c_g of P(x) and the float64 slack of producing/evaluating them."""
    c, slack, _ = _coefficients_and_slack(g, R, variant)
    return c, slack


def _coefficients_and_slack(g: int, R: float, variant: str) -> tuple[np.ndarray, float, float]:
    """As :func:`_monomial_coefficients`, plus the part of the slack that grows with g (the
    Chebyshev conversion's; the whole slack for Taylor): once it alone exceeds eps, no higher
    degree meets eps."""
    if variant == "taylor":
        c = np.array([1.0 / math.factorial(j) for j in range(g + 1)])
        conv = 0.0
    else:
        a = np.array([bessel_i(k, R) * (1.0 if k == 0 else 2.0) for k in range(g + 1)])
        p = np.polynomial.chebyshev.cheb2poly(a)  # coefficients in t = x / R
        c = np.array([p[j] / R**j if R > 0 else (p[j] if j == 0 else 0.0) for j in range(g + 1)])
        # converting: each monomial coefficient is a sum of <= g+1 terms a_k [t^j]T_k, and the
        # coefficients of T_k sum in absolute value to <= (1 + sqrt 2)^k
        conv = 4 * (g + 1) * _U * float(np.sum(np.abs(a) * (1 + math.sqrt(2)) ** np.arange(g + 1)))
    # evaluating sum_j c_j x^j through features: <= (g + 2) u sum_j |c_j| R^j (plus the feature
    # products, which add <= 2g u relative per term)
    ev = (3 * g + 4) * _U * float(np.sum(np.abs(c) * R ** np.arange(g + 1)))
    grows = conv if variant == "chebyshev" else ev
    return c, math.exp(R) * (conv + ev), math.exp(R) * grows


@dataclass(frozen=True)
class PolyApprox:
    """A polynomial ``P(x) = sum_j coefficients[j] x^j`` approximating exp on [-R, R].

    ``bound`` is the proven relative error (1) including the float64 slack ``rounding``.
    """

    variant: str
    degree: int
    R: float
    coefficients: tuple[float, ...]
    truncation: float
    rounding: float

    @property
    def bound(self) -> float:
        return self.truncation + self.rounding

    def __call__(self, x):
        return np.polynomial.polynomial.polyval(np.asarray(x, dtype=np.float64), self.coefficients)


def _approx(g: int, R: float, variant: str) -> PolyApprox:
    c, slack = _monomial_coefficients(g, R, variant)
    trunc = chebyshev_bound(g, R) if variant == "chebyshev" else taylor_bound(g, R)
    return PolyApprox(variant, g, R, tuple(float(v) for v in c), trunc, slack)


def degree_for(eps: float, R: float, variant: str = "chebyshev") -> tuple[int, float]:
    """The least degree g whose proven relative error on [-R, R] is <= eps, and that bound."""
    p = polynomial(eps, R, variant)
    return p.degree, p.bound


@functools.lru_cache(maxsize=256)
def polynomial(eps: float, R: float, variant: str = "chebyshev", degree: int | None = None) -> PolyApprox:
    """The approximation of least degree with proven relative error <= eps on [-R, R].

    With ``degree`` given, that degree is used and its bound must still be <= eps.
    """
    eps = check_eps(eps)
    R = _check_R(R)
    variant = _check_variant(variant)
    if degree is not None:
        if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or not 0 <= degree <= MAX_DEGREE:
            raise ParameterError(f"degree must be an integer in [0, {MAX_DEGREE}], got {degree!r}", param="degree")
        if not _representable(int(degree), R):
            raise ParameterError(f"degree={degree} on [-{R:.4g}, {R:.4g}] overflows float64; the "
                                 "score range is too large for the polynomial method",
                                 param="degree")
        p = _approx(int(degree), R, variant)
        if p.bound > eps:
            least = polynomial(eps, R, variant).degree
            raise ParameterError(
                f"degree={degree} gives a proven relative error {p.bound:.3g} > eps={eps:g} on "
                f"[-{R:g}, {R:g}] ({variant}); the least degree that meets eps is {least}", param="degree")
        return p
    too_large = UnreachableError(
        f"no degree <= {MAX_DEGREE} reaches eps={eps:g} on [-{R:.4g}, {R:.4g}]: the score range "
        "R = |scale|·entry_bound²·d is too large for the polynomial method (use a smaller "
        "entry_bound, raise eps, or an exact algorithm)", param="entry_bound")
    if not _representable(MAX_DEGREE if R <= 1 else 1, R):
        raise too_large
    def trunc_of(g: int) -> float:
        return chebyshev_bound(g, R) if variant == "chebyshev" else taylor_bound(g, R)

    top = MAX_DEGREE
    while top > 0 and not _representable(top, R):  # R**g would overflow float64
        top -= 1
    # the truncation error decreases with g: the least degree it allows, by bisection
    lo, hi = 0, top
    if trunc_of(top) > eps:
        raise too_large
    while lo < hi:
        mid = (lo + hi) // 2
        if trunc_of(mid) <= eps:
            hi = mid
        else:
            lo = mid + 1
    for g in range(lo, top + 1):
        trunc = trunc_of(g)
        c, slack, grows = _coefficients_and_slack(g, R, variant)
        if trunc + slack <= eps:
            return PolyApprox(variant, g, R, tuple(float(v) for v in c), trunc, slack)
        if grows > eps:  # rounding only grows from here
            break
    raise too_large


def _representable(g: int, R: float) -> bool:
    """Whether exp(R), R**g and the conversion's (1 + sqrt 2)**g stay inside float64."""
    return R < 700 and g * max(0.0, math.log(max(R, 1e-300))) < 600 and g < 800


def output_error_factor(delta: float) -> float:
    """``delta/(1-delta)``: the output error per unit of column range of V.

    With weights ``a_j = e^{s_j}`` and ``P(s_j) = a_j (1 + e_j)``, ``|e_j| <= delta``, the
    approximate output minus the exact one is, per row and column,
    ``sum_j w_j (e_j - e_bar) (v_j - c) / (1 + e_bar)`` for any constant c (``w_j`` the exact
    softmax weights, ``e_bar = sum_j w_j e_j``); with c the midpoint of the column's range this is
    at most ``2 delta / (1 - delta) * range/2``.  So
    ``|O~ - O|_{ic} <= delta/(1-delta) * (max_j V_jc - min_j V_jc)`` (derived here).
    """
    return delta / (1.0 - delta)
