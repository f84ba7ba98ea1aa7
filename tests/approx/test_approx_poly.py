"""The polynomial approximation of exp and the monomial features (attnio.approx)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attnio.approx import degree_for, feature_dim, feature_map, polynomial
from attnio.approx.poly import bessel_i, relative_error_bound
from attnio.bounds.approximate import (
    alman_song_degree,
    approx_trivial,
    approx_w_stationary,
    seth_entry_threshold,
)
from attnio.core.errors import ParameterError


@pytest.mark.parametrize("variant", ["chebyshev", "taylor"])
@pytest.mark.parametrize("R", [0.1, 0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("eps", [1e-2, 1e-4, 1e-8])
def test_polynomial_error_bound_holds_on_dense_grid(variant, R, eps):
    p = polynomial(eps, R, variant)
    x = np.concatenate([np.linspace(-R, R, 20001), [-R, R, 0.0]])
    rel = np.abs(p(x) - np.exp(x)) / np.exp(x)
    print(f"{variant} R={R} eps={eps}: degree {p.degree}, max rel err {rel.max():.3e} <= bound "
          f"{p.bound:.3e}")
    assert rel.max() <= p.bound <= eps
    if p.degree > 0:  # the least such degree: one less does not meet eps
        assert relative_error_bound(p.degree - 1, R, variant) > eps


def test_degree_for_known_values_and_chebyshev_beats_taylor():
    assert degree_for(1e-3, 1.0) == (5, polynomial(1e-3, 1.0).bound)
    assert degree_for(1e-3, 0.5)[0] == 3
    assert degree_for(1e-3, 2.0)[0] == 7
    for R in (0.5, 1, 2, 4):
        assert degree_for(1e-6, R)[0] <= degree_for(1e-6, R, "taylor")[0]


def test_bessel_series_matches_the_integral_definition():
    t = np.linspace(0, math.pi, 200001)
    for k in (0, 1, 3, 7):
        for x in (0.5, 2.0, 5.0):
            integral = np.trapezoid(np.exp(x * np.cos(t)) * np.cos(k * t), t) / math.pi
            assert bessel_i(k, x) == pytest.approx(integral, rel=1e-9)


@pytest.mark.parametrize("d,g", [(1, 6), (3, 4), (4, 5), (8, 3)])
@pytest.mark.parametrize("scale", [0.35, -0.5])
def test_feature_identity_to_float64_rounding(d, g, scale):
    rng = np.random.default_rng(d * 10 + g)
    p = polynomial(1e-12 if g >= 12 else 0.5, 1.0, "chebyshev", degree=None)
    coeffs = rng.standard_normal(g + 1)  # any coefficients, signs included
    fm = feature_map(d, g, coeffs, scale)
    assert fm.r == feature_dim(d, g) == math.comb(d + g, g)
    Q, K = rng.uniform(-1, 1, (30, d)), rng.uniform(-1, 1, (40, d))
    direct = np.polynomial.polynomial.polyval(scale * (Q @ K.T), coeffs)
    via = fm.phi(Q) @ fm.psi(K).T
    terms = np.polynomial.polynomial.polyval(np.abs(scale * (Q @ K.T)), np.abs(coeffs))
    assert np.max(np.abs(via - direct) / terms) < 64 * np.finfo(float).eps
    # blocks of features concatenate to the whole map
    parts = [fm.phi(Q, lo, min(fm.r, lo + 7)) for lo in range(0, fm.r, 7)]
    assert np.array_equal(np.concatenate(parts, axis=1), fm.phi(Q))
    assert p.degree >= 0


def test_chebyshev_features_reproduce_the_polynomial():
    p = polynomial(1e-6, 2.0)
    fm = feature_map(4, p.degree, p.coefficients, 0.5)
    rng = np.random.default_rng(0)
    Q, K = rng.uniform(-1, 1, (20, 4)), rng.uniform(-1, 1, (25, 4))
    S = 0.5 * Q @ K.T
    assert np.max(np.abs(fm.phi(Q) @ fm.psi(K).T - p(S)) / np.exp(S)) < 1e-13
    assert np.max(np.abs(fm.phi(Q) @ fm.psi(K).T - np.exp(S)) / np.exp(S)) <= p.bound


@pytest.mark.parametrize("eps", [0, -1e-3, 1.0, 0.9, float("nan"), "x", 1e-20])
def test_eps_outside_its_range_is_refused(eps):
    with pytest.raises(ParameterError, match="eps"):
        polynomial(eps, 1.0)


def test_bad_R_variant_degree_refused():
    with pytest.raises(ParameterError, match="R"):
        polynomial(1e-3, -1.0)
    with pytest.raises(ParameterError, match="variant"):
        polynomial(1e-3, 1.0, "remez")
    with pytest.raises(ParameterError, match="degree=2 .* least degree that meets eps is 5"):
        polynomial(1e-3, 1.0, degree=2)


def test_approx_bounds_and_their_preconditions():
    b = approx_w_stationary(N=4096, Nkv=4096, d=8, M=4096, r=1287)
    assert b.explicit and b.value >= 2 * (4096 + 4096) * 8
    assert approx_w_stationary(N=64, Nkv=64, d=8, M=100000, r=10).value == 2 * 128 * 8
    t = approx_trivial(N=100, Nkv=100, d=8, error=1e-5, R=1.0)
    assert t.value == 1600 and t.explicit
    with pytest.raises(ValueError, match="error < v_bound"):
        approx_trivial(N=100, Nkv=100, d=8, error=1e-2, R=1.0)
    assert not alman_song_degree(1e-3, 1.0).explicit
    assert seth_entry_threshold(2**16).value == pytest.approx(math.sqrt(math.log(2**16)))
