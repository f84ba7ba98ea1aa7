"""The faster evaluations of Theorems B, B′, E and F and the small-cache bound (issue 31) give
the floats and integers of the straightforward ones they replace.

* Theorems B and E's batched pooled maxima screen the points where ν = 0 with ``J_fast`` (J with
  its cubes multiplied out) and evaluate J (the C pow) only where a value depends on it
  (:func:`segments._flat_max_many`, :func:`segments._mid_flat`): the same floats as the batch
  without the screen and as the scalar reference, also with a much wider screen (more exact
  evaluations, every decision path taken);
* Theorem F's bisections follow their guess's path by one comparison and step node by node only
  off it: the stepwise reference's ends with wrong first guesses too;
* the levelled table's arrays are the JSON's rows, in its order (alternates by x);
* the small-cache bound's exact term in Python floats is the numpy one's.
"""

from __future__ import annotations

import json
import math
import random
from importlib import resources

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnio.bounds import backward as BK
from attnio.bounds import exact as E
from attnio.bounds import forward as F
from attnio.bounds import levelled as L
from attnio.bounds import reread as R
from attnio.bounds import segments as S
from attnio.bounds.base import segment_max


def _functions(theorem: str, d: int) -> tuple:
    return F._b_functions_many(d) if theorem == "B" else BK._e_functions_many(d)


def _scalar(theorem: str):
    return F.qkpv_pooled_lambdas if theorem == "B" else BK.backward_pooled_lambdas


@pytest.mark.parametrize("theorem", ["B", "E"])
@pytest.mark.parametrize("screen", [None, 1e-3, 0.5])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.integers(1, 300),
       pts=st.lists(st.tuples(st.one_of(st.integers(1, 10**7), st.integers(1, 2**50)),
                              st.one_of(st.integers(1, 10**7), st.floats(0.01, 4.0)),
                              st.sampled_from([0.0, 0.0, 0.0, 1e-170, 0.3])),
                    min_size=1, max_size=40))
def test_the_screened_pooled_maxima_are_the_unscreened_ones(theorem, screen, d, pts):
    """Mostly ν = 0 (the screened problems) among others; K absolute or a multiple of M (the
    closure's scan); the screen's margin as shipped, and wider (more points evaluated exactly,
    every candidate decision exercised): the floats of the batch without ``J_fast`` and of the
    scalar functions."""
    shipped = S.SCREEN_RTOL
    try:
        if screen is not None:
            S.SCREEN_RTOL = screen
        _check_screened(theorem, d, pts)
    finally:
        S.SCREEN_RTOL = shipped


def _check_screened(theorem: str, d: int, pts: list) -> None:
    cap = 1.9 * d if theorem == "B" else 2.4 * d
    rows = [(M, K if isinstance(K, int) else max(1, round(K * M)), f * cap) for M, K, f in pts]
    Ms, Ks, nus = (np.array(t, dtype=float) for t in zip(*rows))
    fns = _functions(theorem, d)
    assert fns.J_fast is not None
    fast = S.pooled_lambdas_many(Ms, Ks, nus, fns)
    plain = S.pooled_lambdas_many(Ms, Ks, nus, fns._replace(J_fast=None))
    for a, b in zip(fast, plain):
        assert a.tolist() == b.tolist()
    one = _scalar(theorem)
    for i, (M, K, nu) in enumerate(rows[:8]):
        assert tuple(float(g[i]) for g in fast) == one(M, d, K, nu)


def test_the_screen_runs_at_the_issue_s_shape():
    """The closure's scan at N = 4096, d = 64, M = 65,536 (ν = 0 throughout): the screened batch
    is the unscreened one, and the screen evaluates J exactly at few points."""
    d = 64
    Ms = np.full(53, 65536.0)
    Ks = np.round(np.geomspace(20000, 150000, 53))
    nus = np.zeros(53)
    fns = F._b_functions_many(d)
    calls = []
    J = fns.J

    def counted(x):
        calls.append(len(x))
        return J(x)

    fast = S.pooled_lambdas_many(Ms, Ks, nus, fns._replace(J=counted))
    plain = S.pooled_lambdas_many(Ms, Ks, nus, fns._replace(J_fast=None))
    assert [a.tolist() for a in fast] == [b.tolist() for b in plain]
    assert sum(calls) <= 3 * 53 * 3  # (about two exact points a problem, not ~14)


def test_kappas_with_wrong_first_guesses_take_the_stepwise_ends(monkeypatch):
    """Off the guess's path a bisection steps node by node: the same ends as the stepwise
    reference when every first guess is 0 or off by up to 3 (more rounds, the same steps)."""
    rng = random.Random(7)
    groups = []
    while len(groups) < 40:
        nkv = rng.randint(2, 20000)
        hq = rng.randint(1, 8)
        r = (R.Rows(hq, 2, nkv - 1, rng.randint(0, 50), nkv) if rng.random() < 0.6 else
             R.Rows(hq, 2, 1, rng.randint(2, 20000), nkv))
        if r.pairs > 0:
            groups.append(r)
    first = R._first_guess
    for wrong in (lambda r, aim: np.zeros_like(aim),
                  lambda r, aim: first(r, aim) + np.array([rng.randint(-3, 3) for _ in aim])):
        monkeypatch.setattr(R, "_first_guess", wrong)
        for r in groups:
            t = np.unique(np.floor(np.linspace(0.0, r.pairs / 2.0, 40)))
            assert np.array_equal(R._kappas(r, t), R._kappas_stepwise(r, t)), r


def test_the_levelled_arrays_are_the_json_rows():
    data = json.loads(resources.files("attnio.bounds").joinpath("levelled.json")
                      .read_text(encoding="utf-8"))
    assert L.nodes() == tuple(tuple(float(v) for v in row[:8]) for row in data["nodes"])
    alts = [tuple(float(v) for v in row[:8]) for row in data.get("alternates", [])]
    assert L.alternates() == tuple(sorted(alts, key=lambda n: n[0]))
    assert L._families() == (*L.nodes(), *L.alternates())
    cols = L._family_arrays()
    for j, col in enumerate(cols):
        assert col.tolist() == [f[j] for f in L._families()]
    assert L._xs() == tuple(n[0] for n in L.nodes())


def _small_cache_numpy(P: int, d: int, M: int) -> tuple[int, int]:
    """The small-cache bound with its exact term through numpy 0-d arrays (as before)."""
    work = P * d
    dd = float(d * d)

    def products(K):
        K = np.asarray(K, dtype=float)
        c, xmax = 2.0 * M + K, M + K
        disc = 9.0 - 8.0 * c / dd
        r = np.sqrt(np.maximum(disc, 0.0))
        f = xmax * xmax / 4.0 * (c - xmax + xmax * xmax / (4 * dd))
        for x in ((3 - r) * dd / 2, (3 + r) * dd / 2):
            ok = (disc >= 0) & (x > 0) & (x < xmax)
            fx = x * x / 4.0 * (c - x + x * x / (4 * dd))
            f = np.where(ok, np.maximum(f, fx), f)
        return np.sqrt(f) * (1 + 1e-12)

    return segment_max(lambda K: K * (math.ceil(work / float(products(K))) - 1),
                       lambda K: K * (np.ceil(work / products(K)) - 1), 2 * work + 2)


@settings(max_examples=200, deadline=None)
@given(P=st.one_of(st.integers(0, 10**6), st.integers(0, 2**62)),
       d=st.sampled_from([1, 2, 8, 40, 64, 128, 1000]),
       M=st.one_of(st.integers(1, 10**8), st.integers(1, 2**60)))
def test_the_small_cache_term_in_python_floats_is_the_numpy_one(P, d, M):
    assert E._small_cache.__wrapped__(P, d, M) == _small_cache_numpy(P, d, M)


@pytest.mark.parametrize("nb", [1, 2, 3, 5])
def test_the_vertical_rows_gather_what_repeat_gathers(nb):
    """``_potential_lambdas_many``'s ``take`` of the cached indices (``_vertical_rows``) is the
    fancy-indexed rows repeated per branch that it replaces, for every count of vertical edges."""
    B = np.random.default_rng(nb).random((10, 7))
    t_rows, p0_rows, cube_rows, gp0_rows, hi_rows = S._vertical_rows(nb)
    assert np.array_equal(B.take(t_rows, axis=0), B[S._T_ROWS].repeat(nb, axis=0))
    for nv in (2, 3):
        v = nv * nb
        for got, base in ((p0_rows, S._P0_ROWS), (cube_rows, S._CUBE_ROWS),
                          (gp0_rows, S._GP0_ROWS), (hi_rows, S._HI_ROWS)):
            assert np.array_equal(B.take(got[:v], axis=0), B[base[:nv]].repeat(nb, axis=0))
