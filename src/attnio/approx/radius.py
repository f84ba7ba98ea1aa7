"""The score range ``[-R, R]`` the polynomial must cover, and the entry-bound precondition.

With scores ``s_ij = scale * <q_i, k_j>``:

* given an entry bound B (``|Q_ic|, |K_jc| <= B``): ``|s_ij| <= |scale| * B^2 * d``, so
  ``R = |scale| B^2 d`` (``= B^2 sqrt(d)`` at the usual scale 1/sqrt(d));
* from the data (no bound given): Cauchy-Schwarz gives the tighter, O(nd)-cheap
  ``R = |scale| * max_i |q_i| * max_j |k_j|``; the entry bound reported is then max |entry|.

Inputs whose entries exceed a user bound B break the theorem's precondition: they are refused
(:class:`ParameterError` naming ``entry_bound``) unless ``allow_unbounded=True``, which runs with
the polynomial chosen for B and warns that the error guarantee no longer holds.
"""

from __future__ import annotations

import math
import warnings

from ..core.errors import ParameterError

__all__ = ["UnboundedWarning", "check_entries", "check_radius", "score_radius"]


class UnboundedWarning(UserWarning):
    """Inputs outside the entry bound were run anyway (allow_unbounded=True): no guarantee."""


def _check_bound(entry_bound) -> float:
    try:
        b = float(entry_bound)
    except (TypeError, ValueError):
        raise ParameterError(f"entry_bound must be a finite real number > 0, got {entry_bound!r}", param="entry_bound") from None
    if not (math.isfinite(b) and b > 0):
        raise ParameterError(f"entry_bound must be a finite real number > 0, got {entry_bound!r}", param="entry_bound")
    return b


def score_radius(d: int, scale: float, entry_bound=None, *, max_norm_q=None, max_norm_k=None) -> float:
    """R such that every score lies in [-R, R] (from the bound if given, else from row norms)."""
    if entry_bound is not None:
        b = _check_bound(entry_bound)
        return abs(scale) * b * b * d
    if max_norm_q is None or max_norm_k is None:
        raise ParameterError(
            "entry_bound is required when there are no inputs to measure (count mode, planner): "
            "give entry_bound=B with |Q|, |K| entries <= B", param="entry_bound")
    return abs(scale) * float(max_norm_q) * float(max_norm_k)


def check_entries(max_abs_q: float, max_abs_k: float, entry_bound, allow_unbounded: bool) -> None:
    """Refuse (or, with allow_unbounded, warn about) entries of Q or K beyond ``entry_bound``."""
    if entry_bound is None:
        return
    b = _check_bound(entry_bound)
    worst, name = (max_abs_q, "Q") if max_abs_q >= max_abs_k else (max_abs_k, "K")
    if worst <= b:
        return
    msg = (
        f"entry_bound={b:g}: {name} has an entry of magnitude {worst:.6g} > {b:g}, outside the "
        f"precondition |entries| <= entry_bound of the polynomial method"
    )
    if not allow_unbounded:
        raise ParameterError(msg + "; raise entry_bound, or pass allow_unbounded=True to run "
                             "without the error guarantee", param="entry_bound")
    warnings.warn(
        msg + ": running anyway (allow_unbounded=True); the guaranteed error bound is LOST, the "
        "polynomial may be far from exp on the larger scores (even negative)",
        UnboundedWarning,
        stacklevel=3,
    )


def check_radius(data_R: float, radius: float, allow_unbounded: bool) -> None:
    """Refuse (or warn about) scores whose Cauchy-Schwarz range ``data_R`` exceeds ``radius``."""
    if data_R <= radius * (1 + 1e-12):
        return
    msg = (f"radius={radius:g}: the inputs' scores reach |scale| max|q| max|k| = {data_R:.6g} > "
           f"{radius:g}, outside the range [-radius, radius] the polynomial was chosen for")
    if not allow_unbounded:
        raise ParameterError(msg + "; raise radius, or pass allow_unbounded=True to run without "
                             "the error guarantee", param="radius")
    warnings.warn(msg + ": running anyway (allow_unbounded=True); the guaranteed error bound is "
                  "LOST", UnboundedWarning, stacklevel=3)
