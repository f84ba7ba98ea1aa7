"""I/O lower bounds for *approximate* attention (derived here: arXiv 2605.23751's body could not
be read, so none of these is that paper's theorem; each says what it assumes).

The exact-attention bounds of :mod:`attnio.bounds` (Saha & Ye) do not apply to an approximation.
What we can prove for approximations:

* :func:`approx_trivial` - **explicit**: Nkv·d reads of V plus Nq·d writes of O, for *every*
  algorithm whose absolute error is below ``v_bound · e^{-2R} / Nkv`` on all inputs with scores in
  [-R, R] and |V| <= v_bound.  Proof (adversary): each softmax weight is at least
  ``e^{-R}/(Nkv e^{R})``; if a run never reads V_jc, flipping it between -v_bound and +v_bound
  leaves the run (hence the output) unchanged but moves the exact O_ic by more than twice the
  error allowed.  The output must be written (the model's convention).  Reading every word of Q
  and K is needed too for generic inputs, giving ``2(Nq + Nkv) d`` = :func:`attnio.bounds.trivial`
  for algorithms that read all their inputs; ``approx_poly`` attains exactly that when one pass
  fits (``r(d+1)`` plus tiles <= M).
* :func:`approx_w_stationary` - **explicit, for a family**: algorithms that form each of the r·d
  sums ``W_ac = sum_j psi_a(k_j) V_jc`` in fast memory without spilling partial sums (as
  ``approx_poly`` does, one feature block at a time).  At most M partial sums are live at once, so
  (interval graphs are perfect) some ``T = ceil(r d / M)`` of their live intervals are pairwise
  disjoint; each interval needs all Nkv words ``V_{·c}`` of its column in fast memory, of which at
  most M can be resident when it starts.  So ``reads >= T (Nkv - M) + M`` and
  ``I/O >= max(2(Nq+Nkv)d, T (Nkv - M) + M + Nq d)`` (for Nkv > M).  ``approx_poly`` is within a
  factor O(d) of it in the r-blocked regime (it reads whole rows of K, V, Q per pass; the bound
  counts one V column per interval).
* :func:`alman_song_degree` and :func:`seth_entry_threshold` - asymptotic forms (constant 1,
  ``explicit=False``): the degree ``max(R, log(1/eps)/log(log(1/eps)/R))`` and the entry bound
  ``B = sqrt(log n)`` at which Alman & Song show that (for d = Theta(log n), scale 1/d) no
  algorithm runs in truly subquadratic *time* under SETH; I/O is at least time / (words per I/O
  of useful work) only in models that tie the two, so we state it as a time threshold.
"""

from __future__ import annotations

import math

from ..core.checks import check_int, check_real
from ..core.errors import ParameterError
from .base import Bound, keyword_sizes

__all__ = ["alman_song_degree", "approx_trivial", "approx_w_stationary", "seth_entry_threshold"]


@keyword_sizes("Nq, Nkv, d")
def approx_trivial(*, N: int, d: int, Nkv: int | None = None, error: float, R: float,
                   v_bound: float = 1.0) -> Bound:
    """Nkv·d + Nq·d for any algorithm with max absolute error ``error < v_bound e^{-2R}/Nkv``."""
    Nq, d = check_int("N", N, minimum=1), check_int("d", d, minimum=1)
    Nkv = Nq if Nkv is None else check_int("Nkv", Nkv, minimum=1)
    error = check_real("error", error, lo=0, lo_open=True)
    v_bound = check_real("v_bound", v_bound, lo=0, lo_open=True)
    R = check_real("R", R, lo=0)
    limit = v_bound * math.exp(-2 * R) / Nkv
    if error >= limit:
        raise ParameterError(
            f"approx_trivial needs error < v_bound e^(-2R)/Nkv = {limit:.3g} (every V word then "
            f"moves some output by more than the error), got error={error:.3g}", param="error")
    return Bound(float(Nkv * d + Nq * d), "derived adversary argument (docs/approximate.md)",
                 (f"error < v_bound e^(-2R)/Nkv = {limit:.3g}", "scores in [-R, R]",
                  "|V| <= v_bound", "the output is written to slow memory"),
                 True, name="approx_trivial", regime="any M")


@keyword_sizes("Nq, Nkv, d, M, r")
def approx_w_stationary(*, N: int, d: int, M: int, r: int,
                        Nkv: int | None = None) -> Bound:
    """max(2(Nq+Nkv)d, ceil(rd/M)(Nkv-M) + M + Nq d) for W-stationary feature-space algorithms."""
    Nq, d, M, r = (check_int(n, v, minimum=1)
                   for n, v in (("N", N), ("d", d), ("M", M), ("r", r)))
    Nkv = Nq if Nkv is None else check_int("Nkv", Nkv, minimum=1)
    T = -(-r * d // M)
    stream = T * (Nkv - M) + M + Nq * d if Nkv > M else 0
    floor = 2 * (Nq + Nkv) * d
    regime = "one pass (r d <= M)" if T == 1 else f"r-blocked ({T} disjoint W generations)"
    return Bound(float(max(floor, stream)), "derived: interval argument on W's partial sums",
                 ("W = psi(K)^T V formed as r d sums in fast memory, partial sums never spilled",
                  "every feature psi_a(k_j) nonzero (generic inputs)",
                  "every input word read at least once (the 2(Nq+Nkv)d term)"),
                 True, name="approx_w_stationary", regime=regime)


def alman_song_degree(eps: float, R: float) -> Bound:
    """Theta(max(R, log(1/eps) / log(log(1/eps)/R))) with constant 1 (asymptotic)."""
    eps = check_real("eps", eps, lo=0, hi=1, lo_open=True, hi_open=True)
    R = check_real("R", R, lo=0, lo_open=True)
    L = math.log(1 / eps)
    inner = math.log(L / R) if L / R > math.e else 1.0
    return Bound(max(R, L / inner), "Aggarwal & Alman 2022 (arXiv 2205.06249), used by Alman & Song",
                 ("sup error eps of a polynomial for e^x on an interval of length ~R",),
                 False, name="alman_song_degree", constant=None)


def seth_entry_threshold(n: int) -> Bound:
    """B = sqrt(log n): Alman & Song's SETH threshold (time; d = Theta(log n); scale 1/d)."""
    n = check_int("n", n, minimum=2)
    return Bound(math.sqrt(math.log(n)), "Alman & Song 2023 (arXiv 2302.13214), main results (abstract)",
                 ("d = Theta(log n)", "scale 1/d", "additive error 1/poly(n)", "SETH"),
                 False, name="seth_entry_threshold", constant=None)
