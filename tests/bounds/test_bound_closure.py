"""Theorems A and D closed by construction (attnio.bounds.closure, docs/bounds.md §12.1):
the value is the maximum by its definition (every row at every grid point >= M), the scaling
lemma its envelope rests on holds, it is monotone in M and in P, and no schedule is below it."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from attnio.bounds import backward as BK
from attnio.bounds import closure as C
from attnio.bounds import forward as F
from attnio.bounds.base import pairs_of
from attnio.bounds.segments import segments_bound_many
from attnio.core.workload import Shape
from conftest import least_backward_count, least_forward_count

THEOREMS = {"A": F._A, "D": BK._D}


def test_grid_has_every_small_integer_and_steps_of_at_most_a_256th_octave():
    pts = C.grid_from(1, 3000)
    assert pts[:369] == list(range(1, 370))
    assert all(b > a for a, b in zip(pts, pts[1:]))
    assert all(b <= math.ceil(a * 2 ** (1 / 256)) + 1 for a, b in zip(pts, pts[1:]))
    for M in (1, 2, 370, 371, 12910, 13168, 65536, 65537, 10**9 + 7, 2**61):
        first = C.grid_from(M, 2)
        assert first[0] >= M and first[0] in (M, *C.grid_from(M - 1, 2)), M
        assert first[1] == C.grid_from(first[0] + 1, 1)[0]
    assert C.grid_from(C.GRID_TOP + 1, 1) == []


@pytest.mark.parametrize("name", "AD")
def test_rows_scale_at_least_as_g_to_the_three_halves(name):
    """The scaling lemma: at a row's K = κG and μ = m√G, each of Λ, Λ_f, Λ_l at tG is at least
    t^{3/2} times its value at G (t >= 1), on random rows, d, G and t."""
    th, rng = THEOREMS[name], random.Random(5)
    rows = C.rows(th.table)
    for _ in range(300):
        r, d = rng.randrange(len(rows)), rng.choice([1, 4, 16, 40, 64, 128, 256])
        G = rng.randint(1, 10**7)
        t = rng.choice([1.0 + 1e-6, 1.001, 1.3, 4.0, 100.0])
        kappa, m = rows[r]
        G2 = G * t
        a = th.lambdas(d, [G, G2], [kappa * G, kappa * G2], [m * math.sqrt(G), m * math.sqrt(G2)])
        for lam in a:
            assert lam[1] >= t ** 1.5 * lam[0] * (1 - 1e-12), (name, rows[r], d, G, t, a)


def _brute(th, P, d, M, top):
    """max over every row and every grid point in [M, top] of the row's value, and whether all
    rows are 0 at the last grid point (then they are at every larger one, by the lemma above)."""
    rows = C.rows(th.table)
    Gs = C.grid_from(M, 100000)
    Gs = [G for G in Gs if G <= top]
    pairs = [(r, G) for G in Gs for r in range(len(rows))]
    lams = C._lambdas(th, d, pairs)
    W = th.work(P, d, np.zeros(1))
    vals = segments_bound_many(W, [math.floor(rows[r][0] * G) for r, G in pairs], *lams)
    last = vals[-len(rows):]
    return max(vals), max(last) == 0


@pytest.mark.parametrize("name", ["A", pytest.param("D", marks=pytest.mark.slow)])
def test_the_closure_is_the_maximum_by_its_definition(name):
    th, rng = THEOREMS[name], random.Random(11 if name == "A" else 13)
    checked = positive = 0
    for _ in range(12 if name == "A" else 5):
        d = rng.choice([1, 2, 4, 8])
        M = rng.randint(2, 60)
        P = rng.randint(M, 10 * M)
        want, ends = _brute(th, P, d, M, 8 * M)
        if not ends:
            continue
        assert C.closed_monotone(th, P, d, M)[0] == want, (name, P, d, M)
        checked += 1
        positive += want > 0
    assert checked >= 3 and positive >= 2


@pytest.mark.parametrize("name", "AD")
@pytest.mark.parametrize("d", [pytest.param(4, marks=pytest.mark.slow), 40,
                               pytest.param(128, marks=pytest.mark.slow)])
def test_the_closure_never_rises_in_m_nor_falls_in_p(name, d):
    th = THEOREMS[name]
    P = 300 * 301 // 2
    prev = None
    M = d
    while M <= 4 * 300 * d:
        v = C.closed_monotone(th, P, d, M)[0]
        assert prev is None or v <= prev[1], (name, d, prev, (M, v))
        prev = (M, v)
        M = max(M + 1, int(M * 1.1))
    M = 20 * d
    prev = None
    for P in [*range(1, 120), *(int(120 * 1.15 ** k) for k in range(40))]:
        v = C.closed_monotone(th, P, d, M)[0]
        assert prev is None or v >= prev[1], (name, d, prev, (P, v))
        prev = (P, v)


def test_the_reported_parameters_give_the_value():
    """(value, K, μ, G): the row's value at G, with K = ⌊κG⌋ and μ = m√G of a row."""
    for th in THEOREMS.values():
        for P, d, M in ((5000, 16, 300), (10**6, 64, 4096), (321 * 321, 40, 12910)):
            v, K, mu, G = C.closed_monotone(th, P, d, M)
            assert G >= M and v > 0
            r = next(i for i, (k, m) in enumerate(C.rows(th.table))
                     if math.floor(k * G) == K and m * math.sqrt(G) == mu)
            assert C.row_value(th, P, d, r, G) == v


FORWARD = [Shape(16, 16, 4), Shape(24, 9, 6), Shape(32, 32, 8), Shape.make(20, 4, causal=True),
           Shape.make(24, 8, Nkv=16, causal="top_left", window=7),
           Shape.make(16, 4, heads=4, kv_heads=2, causal=True)]


@pytest.mark.parametrize("shape", FORWARD, ids=lambda s: s.describe())
def test_no_schedule_is_below_the_closure(shape):
    ran = 0
    for M in (4 * shape.d + 8, 8 * shape.d, shape.d * shape.d, 4 * shape.d * shape.d,
              50 * shape.d * shape.d):
        P = pairs_of(shape)
        for least, th in ((least_forward_count(shape, M), F._A),
                          (least_backward_count(shape, M), BK._D)):
            if least is None:
                continue
            ran += 1
            assert C.closed_monotone(th, P, shape.d, M)[0] <= least, (shape.describe(), M,
                                                                       th.name)
    assert ran >= 4
