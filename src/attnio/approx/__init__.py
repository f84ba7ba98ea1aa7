"""Approximate attention by the polynomial method (Alman & Song, arXiv 2302.13214).

* :mod:`.poly`: polynomial approximations of exp with proven relative error, ``degree_for``;
* :mod:`.features`: the monomial feature maps ``phi``, ``psi`` with ``<phi(q), psi(k)> = P(s<q,k>)``;
* :mod:`.bounds`: I/O lower bounds for approximate attention (trivial and derived regime bounds).

The schedule on the simulator is ``attnio.algorithms.approx_poly``; the PyTorch kernel is
``attnio.torch_ops.poly_attention``.  See docs/approximate.md.
"""

from .features import FeatureMap, feature_dim, feature_map, monomials
from .poly import (
    PolyApprox,
    check_eps,
    degree_for,
    output_error_factor,
    polynomial,
    relative_error_bound,
)
from .radius import score_radius

__all__ = [
    "FeatureMap",
    "PolyApprox",
    "check_eps",
    "degree_for",
    "feature_dim",
    "feature_map",
    "monomials",
    "output_error_factor",
    "polynomial",
    "relative_error_bound",
    "score_radius",
]
