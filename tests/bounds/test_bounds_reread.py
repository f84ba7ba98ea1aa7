"""Theorem F (docs/bounds.md §5.1): trivial + a cut's crossing values - M.

Each step of the proof is checked on its own where it can be brute-forced (the row structure, the
majorant of step 4, the per-column lemma over every colouring of small graphs, the cross-column
count of step 5 on random colourings), and the bound itself against every schedule and candidate
tiling on random shapes (masks, grouped heads, Nq != Nkv) at the memories where it is active.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio import bounds as B
from attnio.algorithms import mapper
from attnio.bounds import reread as R
from attnio.core import masks
from attnio.core.workload import Shape
from conftest import least_forward_count

CAUSAL = st.sampled_from([False, "bottom_right", "top_left"])


def _his(shape: Shape) -> list[int]:
    """The key prefix [0, h) each row of one group sees (rows seeing >= 2 keys), explicitly."""
    out = []
    for _ in range(shape.group):
        for r in range(shape.Nq):
            h = shape.Nkv if not shape.causal else min(shape.Nkv, max(0, r + 1 + shape.offset))
            if h >= 2:
                out.append(h)
    return out


def _F_exact(his: list[int], x: int, v: int) -> int:
    S = sum(h for h in his if h <= v)
    T = 0
    for j in range(max(his) if his else 0):
        if sum(1 for h in his if h > j) <= x:
            T = sum(h - j for h in his if h > j)
            break
    return S + T + x * v


@settings(max_examples=80, deadline=None)
@given(Nq=st.integers(1, 30), Nkv=st.integers(1, 30), causal=CAUSAL, hq=st.integers(1, 3))
def test_row_structure_and_the_majorant_of_step_4(Nq, Nkv, causal, hq):
    shape = Shape.make(Nq, 2, Nkv=Nkv, causal=causal, heads=hq, kv_heads=1)
    r = R.rows_of(shape)
    assert r is not None
    his = _his(shape)
    assert sorted(his) == sorted([r.lo + i for i in range(r.linear)] * hq + [Nkv] * (hq * r.full))
    assert r.pairs == hq * masks.row_counts(shape.head()).pairs2 == sum(his)
    assert r.rows == len(his)
    for k in range(min(r.rows, r.nkv)):
        exact = max(_F_exact(his, x, k - x) for x in range(k + 1))
        assert R._line_max(r, np.array([float(k)]))[0] * (1 + 1e-9) + 1e-6 >= exact, (r, k)


def _column_split(his: list[int], colour: dict[tuple[int, int], bool]) -> tuple[int, int]:
    """(rows + keys seen on both sides, min(products before, after)) of one column."""
    rows = {}
    keys: dict[int, set[bool]] = {}
    for (i, j), c in colour.items():
        rows.setdefault(i, set()).add(c)
        keys.setdefault(j, set()).add(c)
    mixed = sum(len(s) == 2 for s in rows.values()) + sum(len(s) == 2 for s in keys.values())
    a = sum(colour.values())
    return mixed, min(a, len(colour) - a)


@pytest.mark.parametrize("Nq,Nkv,causal,hq", [
    (4, 4, "bottom_right", 1), (5, 3, "bottom_right", 1), (3, 5, "top_left", 1),
    (5, 3, "top_left", 1), (3, 3, False, 1),
    pytest.param(2, 4, False, 2, marks=pytest.mark.slow),  # 2^8 colourings of 2 heads: ~8 s
    (3, 3, "bottom_right", 2), (3, 4, "bottom_right", 1)])
def test_per_column_lemma_over_every_colouring(Nq, Nkv, causal, hq):
    """Step 4: a column whose products split t : rest has >= κ(min) rows and keys on both sides."""
    shape = Shape.make(Nq, 2, Nkv=Nkv, causal=causal, heads=hq, kv_heads=1)
    r = R.rows_of(shape)
    his = _his(shape)
    edges = [(i, j) for i, h in enumerate(his) for j in range(h)]
    assert len(edges) <= 16
    for bits in itertools.product((False, True), repeat=len(edges)):
        mixed, t = _column_split(his, dict(zip(edges, bits, strict=True)))
        assert mixed >= R._kappas(r, np.array([t]))[0], (bits, mixed, t)


@pytest.mark.parametrize("Nq,Nkv,causal,hq,d", [
    (6, 6, "bottom_right", 1, 3), (5, 7, "top_left", 1, 2), (6, 4, False, 1, 3),
    (4, 4, "bottom_right", 2, 2), (7, 5, "bottom_right", 1, 2)])
def test_cross_column_count_of_step_5_on_random_colourings(Nq, Nkv, causal, hq, d):
    """Step 5: Σ_l (split rows + keys of column l) + ψ(pairs split across columns) is at least
    crossing_lower at the number of products before the cut, for colourings of many kinds."""
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, heads=hq, kv_heads=1)
    r = R.rows_of(shape)
    his = _his(shape)
    pairs = [(i, j) for i, h in enumerate(his) for j in range(h)]
    rng = random.Random(7)
    for trial in range(400):
        kind = trial % 4
        cut = rng.random()
        colour = {}
        for (i, j) in pairs:
            for l in range(d):
                if kind == 0:
                    c = rng.random() < cut
                elif kind == 1:  # by row, a different threshold per column
                    c = i < cut * len(his) + l
                elif kind == 2:  # by key
                    c = j < cut * Nkv - l
                else:  # by column, with noise
                    c = (l < cut * d) != (rng.random() < 0.1)
                colour[i, j, l] = c
        total = 0
        for l in range(d):
            mixed, _ = _column_split(his, {(i, j): colour[i, j, l] for (i, j) in pairs})
            total += mixed
        split_pairs = sum(len({colour[i, j, l] for l in range(d)}) == 2 for (i, j) in pairs)
        m = sum(colour.values())
        assert total + R._psi(split_pairs, d) >= R.crossing_lower(r, d, np.array([m]), np.array([m]))[0] - 1e-9, trial


def test_psi_is_the_least_cost_of_split_pairs():
    """ψ(c) <= min over y + a + b with y + ⌊a/d⌋⌊b/d⌋ >= c (pair values or whole q, k rows)."""
    for d in (1, 2, 3, 5):
        for c in range(0, 60):
            best = min(y + a + b for a in range(0, 40) for b in range(0, 40)
                       for y in [max(0, c - (a // d) * (b // d))])
            assert R._psi(c, d) <= best + 1e-9


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(N=st.integers(2, 40), dkv=st.integers(-8, 8), d=st.integers(1, 8), causal=CAUSAL,
       group=st.sampled_from([(1, 1), (2, 1), (4, 2), (3, 3)]), frac=st.floats(0.02, 2.5))
def test_no_schedule_or_tiling_is_below_theorem_f(N, dkv, d, causal, group, frac):
    heads, kv = group
    shape = Shape.make(N, d, Nkv=max(1, N + dkv), causal=causal, heads=heads, kv_heads=kv)
    M = max(8, round(frac * shape.Nq * d))
    least = least_forward_count(shape, M)
    if least is None:
        return
    b = B.reread_cut_for(shape, M)
    assert b.explicit and least >= b.value, (shape.describe(), M, least, b.value)


@pytest.mark.parametrize("shape,M", [
    (Shape.make(40, 6, causal=True), 100), (Shape.make(32, 8, Nkv=24, causal="top_left"), 90),
    (Shape.make(30, 4), 60), (Shape.make(48, 4, heads=4, kv_heads=1, causal=True), 60),
    (Shape.make(32, 4, heads=2, kv_heads=2, causal=True), 40)])
def test_simulated_counts_are_above_theorem_f(shape, M):
    b = B.reread_cut_for(shape, M)
    assert b.value > B.trivial_for(shape).value  # the cut adds something here
    for name in ("flash2", "standard", "row_hybrid"):
        alg = attnio.algorithms.get(name)
        if mapper.can_run(alg, shape, M) is not None:
            continue
        io = attnio.run(name, shape=shape, M=M, mode="count").io.total
        assert io >= b.value, (name, io, b.value)


@settings(max_examples=30, deadline=None)
@given(N=st.integers(2, 400), d=st.integers(1, 64), causal=CAUSAL, M=st.integers(8, 20_000))
def test_non_increasing_in_memory_so_closed_under_more_memory(N, d, causal, M):
    shape = Shape.make(N, d, causal=causal)
    a, b = B.reread_cut_for(shape, M).value, B.reread_cut_for(shape, M + 1 + M // 7).value
    assert a >= b


def test_windows_and_block_masks_get_the_trivial_value():
    shape = Shape.make(40, 4, causal=True, window=6)
    assert B.reread_cut_for(shape, 50).value == B.trivial_for(shape).value


def test_the_worst_held_out_points_are_lifted():
    for d, M in ((96, 8169), (80, 6808)):
        v = B.reread_cut(N=300, d=d, M=M, causal=True).value
        assert v >= 4.3 * 300 * d, (d, M, v)
        assert math.isclose(B.best(B.applicable(N=300, d=d, M=M, causal=True)).value, v)


def test_kappas_rounds_take_the_stepwise_bisection():
    """:func:`_kappas` evaluates several bisection levels a round: the same ends as one step a
    round (the reference, ``_kappas_stepwise``), value for value, on a seeded draw of groups."""
    rng = random.Random(24)
    cases = [R.rows_of(s) for s in (Shape(4096, 4096, 64), Shape(3000, 3000, 40),
                                    Shape(8192, 8192, 128, causal=True, heads=32, kv_heads=8))]
    while len(cases) < 120:
        N = rng.choice([3, 17, 100, 1000, 4096, 10**5, 3 * 10**6, 10**9])
        s = Shape(N, rng.choice([N, 2, rng.randrange(2, 10**6)]), 8,
                  causal=rng.choice([False, True, "top_left"]), heads=rng.choice([1, 4, 32]),
                  kv_heads=1)
        r = R.rows_of(s)
        if r is not None and r.pairs > 0:
            cases.append(r)
    for r in cases:
        t = np.floor(np.linspace(0.0, r.pairs / 2.0, 40))
        assert np.array_equal(R._kappas(r, t), R._kappas_stepwise(r, t)), r
